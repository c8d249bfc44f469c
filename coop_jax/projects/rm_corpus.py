"""An offline static-RM corpus for the synthetic task, the analogue of Cooper's VerifyRM data
(triples from several generators, kept where two verifiers agree), built once before any RL.

No triple comes from the RL start policy: the generators here are programmatic solutions of
each error kind (`data.synthetic.solution_error_kind`) in both answer formats. Each triple is
labelled by the lenient rule verifier and by the strict numeric one (the experiment's gold); a
triple they disagree on is dropped. `corpus_manifest.json` beside the corpus lists the
generators, their counts, the label balance, the disagreements and the start-policy check.
Character-level SFT policies other than the RL start policy are generators too
(`experiment.corpus_sft_policies`, `sft_generators`): the tiny character model trained with other
seeds, corruption fractions (`sft.corrupt_fraction`) or lengths, sampled on corpus questions.
Each is identified by a digest of its SFT settings and one of its parameters; the manifest
records both beside the start policy's, and a generator equal to the start policy in either is
refused. (Few-shot samples of a pretrained LM are a further generator the issue names; not built.)
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Callable, Sequence

import numpy as np

from coop_jax.checkpoint.portable import params_digest
from coop_jax.data.synthetic import (ANSWER_FORMATS, consistent_wrong_solution, format_answer,
                                     solution_error_kind)
from coop_jax.rm.input import write_triples
from coop_jax.rm.train import label_balance, split_triples
from coop_jax.trainer.sft import corrupt_final_answer
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


def policy_triples(records: Sequence[dict], completions: Sequence[Sequence[str]], name: str
                   ) -> tuple[list[dict], dict]:
    """(agreeing triples, counts) of one policy generator's completions (grouped per record;
    empty and repeated completions of a question dropped)."""
    triples, made = [], 0
    for r, group in zip(records, completions):
        for completion in dict.fromkeys(c for c in group if c.strip()):
            made += 1
            label = labelled(r["reference"], completion)
            if label is not None:
                triples.append({"question": r["question"], "reference": r["reference"],
                                "completion": completion, "label": label, "generator": name})
    return triples, {"made": made, "kept": len(triples), "disagreements": made - len(triples)}


def digest(obj) -> str:
    """A short sha256 of JSON-able settings."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def policy_digest(policy_dir: str) -> str:
    """`params_digest` of the policy saved as an HF folder in `policy_dir`."""
    from coop_jax import hf
    return params_digest(hf.load(policy_dir).params)


def accuracy_by(groups: Sequence[str], rows: Sequence[dict]) -> dict:
    """An RM's accuracy and the positive fraction in each group of triples (`groups[i]` names
    the group of rows[i], the per-triple rows of `rm.scoring.evaluate_reward_model`)."""
    out: dict[str, list] = {}
    for group, row in zip(groups, rows):
        out.setdefault(group, []).append((row["correct"], row["label"]))
    return {k: {"n": len(v), "accuracy": float(np.mean([c for c, _ in v])),
                "positive_fraction": float(np.mean([y for _, y in v]))}
            for k, v in sorted(out.items())}


def accuracy_by_kind(triples: Sequence[dict], rows: Sequence[dict]) -> dict:
    """An RM's accuracy on each kind of triple (correct, final_mismatch, ...)."""
    return accuracy_by([solution_error_kind(t["question"], t["reference"], t["completion"])
                        for t in triples], rows)


def sft_settings(config, seed: int, **sft) -> dict:
    """What decides a character SFT policy: the model and data sections, the sft section with
    `sft` overrides, and the seed (`reward_hacking.sft_policy` trains the start with
    config.seed)."""
    d = config.data.to_dict()
    return {"model": config.model.to_dict(), "sft": config.sft.to_dict() | sft, "seed": seed,
            "data": {k: d[k] for k in ("dataset", "prompt_template", "synthetic",
                                       "synthetic_train_size", "max_prompt_len")}}


def parse_sft_policies(text: str) -> list[dict]:
    """`experiment.corpus_sft_policies`: "seed=1,corrupt=0.3,steps=100; seed=2" -> [{"seed": 1,
    "corrupt_fraction": 0.3, "steps": 100}, {"seed": 2}] (unset fields: the config's sft)."""
    names = {"seed": ("seed", int), "corrupt": ("corrupt_fraction", float),
             "steps": ("steps", int)}
    specs = []
    for part in filter(None, (p.strip() for p in (text or "").split(";"))):
        spec = {}
        for item in filter(None, (i.strip() for i in part.split(","))):
            key, _, value = item.partition("=")
            if key.strip() not in names or not value.strip():
                raise ValueError(f"config.experiment.corpus_sft_policies: {item!r} in {part!r}; "
                                 f"write KEY=VALUE with KEY one of {list(names)}")
            field, cast = names[key.strip()]
            spec[field] = cast(value)
        if "seed" not in spec:
            raise ValueError(f"config.experiment.corpus_sft_policies: {part!r} needs a seed=")
        specs.append(spec)
    return specs


def sft_generators(config, records: Sequence[dict], specs: Sequence[dict], *,
                   samples_per_question: int, start: dict, out_dir: str) -> list[dict]:
    """One generator per SFT spec: the tiny character policy trained from scratch with that
    seed / corruption / length, saved as an HF folder under `out_dir` (as the start policy is)
    and sampled from there `samples_per_question` times on each of `records`. `start` =
    {"settings": digest, "params": digest of its HF folder's parameters} of the RL start policy;
    a spec that reproduces it (same settings or same parameters) is an error."""
    import jax

    from coop_jax import hf, parallel
    from coop_jax.trainer import setup, sft
    from coop_jax import config as config_lib
    from coop_jax.data import format_prompt
    from coop_jax.hf.tokenizer import CHAR_TOKENIZER_DIR, load_tokenizer
    from coop_jax.sampling import generate_completions

    tokenizer = load_tokenizer()
    sft_records = setup.load_records(config).train
    mesh = parallel.make_mesh(config_lib.resolve_mesh_shape(config.mesh.shape,
                                                            jax.device_count()))
    prompts = [format_prompt(config.data.prompt_template, r["question"], tokenizer=tokenizer)
               for r in records]
    out = []
    for spec in specs:
        overrides = {k: v for k, v in spec.items() if k != "seed"}
        settings = digest(sft_settings(config, spec["seed"], **overrides))
        name = "sft_policy/" + ",".join(f"{k}={v}" for k, v in sorted(spec.items()))
        if settings == start["settings"]:
            raise ValueError(f"corpus generator {name} has the RL start policy's SFT settings")
        c = config.copy_and_resolve_references()
        c.seed = spec["seed"]
        c.sft.update(**overrides)
        cfg, params = setup.build_model(c.model, tokenizer, mesh, jax.random.key(c.seed),
                                        kernels=c.kernels.impl)
        params, _ = sft.warm_start_with(sft.SFTSettings.from_config(c), params, cfg, tokenizer,
                                     sft_records)
        where = os.path.join(out_dir, f"sft_generator_{len(out)}")
        hf.save(hf.from_params(cfg, jax.device_get(params), tokenizer_dir=CHAR_TOKENIZER_DIR,
                               pad_token_id=tokenizer.pad_token_id), where)
        lm = hf.load(where)
        p_digest = params_digest(lm.params)
        if p_digest == start["params"]:
            raise ValueError(f"corpus generator {name} has the RL start policy's parameters")
        texts, _ = generate_completions(
            lm.params, lm.config.with_kernels(c.kernels.impl), tokenizer, prompts,
            max_prompt_len=c.data.max_prompt_len, max_new_tokens=c.rollout.max_new_tokens,
            temperature=c.rollout.temperature, num_samples=samples_per_question, seed=c.seed)
        out.append({"name": name, "completions": texts, "sft": spec, "settings": settings,
                    "params": p_digest, "dir": where})
    return out


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
                 heldout_fraction: float, seed: int = 0, policies: Sequence[dict] = (),
                 policy_records: Sequence[dict] = (), start: dict | None = None
                 ) -> tuple[str, str]:
    """(train, held-out) triple files of the offline corpus (split by question) in `out_dir`,
    with corpus_manifest.json; `start_policy` names the RL start policy (no generator may).
    `policies` (`sft_generators`, sampled on `policy_records`) are policy generators; `start`
    the start policy's digests, which none of theirs may equal."""
    os.makedirs(out_dir, exist_ok=True)
    triples, counts = generate(records, seed)
    for gen in policies:
        if start and (gen["settings"] == start["settings"] or gen["params"] == start["params"]):
            raise ValueError(f"corpus generator {gen['name']} is the RL start policy")
        made, counts[gen["name"]] = policy_triples(policy_records, gen["completions"],
                                                   gen["name"])
        counts[gen["name"]] |= {"sft": gen["sft"], "settings_digest": gen["settings"],
                                "params_digest": gen["params"]}
        triples += made
    info = manifest(triples, counts, start_policy)
    if start:
        info["rl_start_policy_digests"] = start
        info["no_generator_is_the_rl_start_policy"] = all(
            g["settings"] != start["settings"] and g["params"] != start["params"]
            for g in policies)
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
