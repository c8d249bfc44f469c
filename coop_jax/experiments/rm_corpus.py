"""An offline static-RM corpus for the synthetic task, the analogue of Cooper's VerifyRM data
(triples from several generators, kept where two verifiers agree), built once before any RL.

No triple comes from the RL start policy: the generators here are programmatic solutions of
each error kind (`data.synthetic.solution_error_kind`) in both answer formats. Each triple is
labelled by the lenient rule verifier and by the strict numeric one (the experiment's gold); a
triple they disagree on is dropped. `corpus_manifest.json` beside the corpus lists the
generators, their counts, the label balance, the disagreements and the start-policy check.
(Character policies from other SFT seeds or corruption fractions, and few-shot samples of a
pretrained LM, are further generators the issue names; they are not built here.)
"""
from __future__ import annotations

import json
import os
from typing import Callable, Sequence

import numpy as np

from coop_jax.data.synthetic import (ANSWER_FORMATS, consistent_wrong_solution, format_answer,
                                     solution_error_kind)
from coop_jax.rm_input import write_triples
from coop_jax.rm_train import label_balance, split_triples
from coop_jax.sft import corrupt_final_answer
from coop_jax.verify import verify

VERIFIERS = ("lenient", "strict_numeric")


def _in_format(r: dict, fmt: str) -> str:
    """The record's worked solution with its final answer in `fmt`."""
    for marker in ANSWER_FORMATS:
        final = format_answer(r["reference"], marker)
        if r["solution"].endswith(final):
            return r["solution"][:-len(final)] + format_answer(r["reference"], fmt)
    raise ValueError(f"solution without a final answer: {r['solution']!r}")


def _no_answer(solution: str, reference: str, fmt: str) -> str:
    return solution[:-len(format_answer(reference, fmt))].rstrip()


# generator -> completion(record, rng, answer format) or None (none for this record)
GENERATORS: dict[str, Callable[[dict, np.random.Generator, str], str | None]] = {
    "program_correct": lambda r, rng, fmt: _in_format(r, fmt),
    "program_final_mismatch": lambda r, rng, fmt: corrupt_final_answer(_in_format(r, fmt),
                                                                      r["reference"]),
    "program_consistent_wrong": lambda r, rng, fmt: consistent_wrong_solution(
        r["question"], _in_format(r, fmt), rng, fmt),
    "program_no_answer": lambda r, rng, fmt: _no_answer(_in_format(r, fmt), r["reference"], fmt),
}


def labelled(reference: str, completion: str) -> bool | None:
    """The label both verifiers give the completion, None when they disagree."""
    labels = {verify(reference, completion, mode) for mode in VERIFIERS}
    return labels.pop() if len(labels) == 1 else None


def generate(records: Sequence[dict], seed: int = 0) -> tuple[list[dict], dict]:
    """(agreeing triples, per-generator counts) from every generator in both answer formats."""
    rng = np.random.default_rng([seed, 58])
    triples, counts = [], {}
    for fmt in ANSWER_FORMATS:
        for name, make in GENERATORS.items():
            gen = f"{name}/{fmt}"
            made = kept = 0
            for r in records:
                completion = make(r, rng, fmt)
                label = None if completion is None else labelled(r["reference"], completion)
                made += completion is not None
                if label is not None:
                    kept += 1
                    triples.append({"question": r["question"], "reference": r["reference"],
                                    "completion": completion, "label": label, "generator": gen})
            counts[gen] = {"made": made, "kept": kept, "disagreements": made - kept}
    return triples, counts


def manifest(triples: Sequence[dict], counts: dict, start_policy: str) -> dict:
    """Generators and counts, label balance, error kinds, and the start-policy check."""
    kinds = [solution_error_kind(t["question"], t["reference"], t["completion"]) for t in triples]
    generators = sorted({t["generator"] for t in triples})
    return {"generators": counts, "verifiers": list(VERIFIERS),
            "label_balance": label_balance(triples),
            "kinds": {k: kinds.count(k) for k in sorted(set(kinds))},
            "rl_start_policy": start_policy,
            "from_rl_start_policy": sum(t["generator"] == start_policy for t in triples),
            "no_triple_from_rl_start_policy": start_policy not in generators}


def build_corpus(records: Sequence[dict], out_dir: str, *, start_policy: str,
                 heldout_fraction: float, seed: int = 0) -> tuple[str, str]:
    """(train, held-out) triple files of the offline corpus (split by question) in `out_dir`,
    with corpus_manifest.json; `start_policy` names the RL start policy (no generator may)."""
    os.makedirs(out_dir, exist_ok=True)
    triples, counts = generate(records, seed)
    info = manifest(triples, counts, start_policy)
    if not info["no_triple_from_rl_start_policy"]:
        raise ValueError(f"the corpus holds triples of the RL start policy {start_policy!r}")
    train_set, heldout = split_triples(triples, heldout_fraction, seed)
    info |= {"train": label_balance(train_set), "heldout": label_balance(heldout)}
    paths = (os.path.join(out_dir, "train_triples.jsonl"),
             os.path.join(out_dir, "heldout_triples.jsonl"))
    write_triples(paths[0], train_set)
    write_triples(paths[1], heldout)
    with open(os.path.join(out_dir, "corpus_manifest.json"), "w") as fh:
        json.dump(info, fh, indent=2)
    return paths
