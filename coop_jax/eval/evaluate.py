"""Policy evaluation with bootstrap confidence intervals (the reward model's accuracy is
`coop_jax.rm.scoring.evaluate_reward_model`, shared with training).

Policy protocol (docs/ALGORITHMS.md §1): greedy accuracy plus avg@k / pass@k from k samples at
temperature 0.7, top-p 0.95. Every metric is first computed per problem, then averaged over
problems, and its 95% interval is a bootstrap over problems.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from coop_jax import models
from coop_jax.data import format_prompt
from coop_jax.sampling import generate_texts
from coop_jax.sampling.engine import DEFAULT_SLOT_HALVINGS
from coop_jax.stats import BOOTSTRAP, ci, pass_at_k
from coop_jax.verify.grouped import verify_across_hosts


# Headline accuracy is lenient (math-verify-style equivalence) on every dataset, so runs of
# different reward types compare; where the references validate with a stricter scorer, it is
# reported beside it under "strict" (Cooper validates GSM8K with verl's strict "#### <number>";
# the synthetic task's gold is an integer literal after the answer marker).
STRICT_EVAL_EXTRACTION = {"gsm8k": "strict_hash", "synthetic": "strict_numeric"}


def strict_verifiers(dataset: str, num_workers: int, timeout_s: float, stack) -> dict:
    """{"strict": a RuleVerifier} for a dataset with a reference strict scorer, else {}; the
    verifier lives as long as `stack` (a contextlib.ExitStack)."""
    from coop_jax.verify import RuleVerifier
    mode = STRICT_EVAL_EXTRACTION.get(dataset)
    if mode is None:
        return {}
    return {"strict": stack.enter_context(RuleVerifier(num_workers, timeout_s, extraction=mode))}


def _check_records(records: Sequence[dict]) -> None:
    if not records:
        raise ValueError("records is empty")
    for i, r in enumerate(records):
        for key in ("question", "reference"):
            if not isinstance(r.get(key), str):
                raise ValueError(f"records[{i}]['{key}'] must be a string, got {r.get(key)!r}")


def score_policy(records: Sequence[dict], prompts: Sequence[str], verifier, *,
                 greedy: tuple[list[list[str]], list[list[int]]] | None = None,
                 sampled: tuple[list[list[str]], list[list[int]]] | None = None,
                 truncated: dict[str, list[list[bool]]] | None = None,
                 also: dict[str, Any] | None = None) -> tuple[dict, list[dict]]:
    """Verify given completions and build the report and per-sample rows (no model involved).

    ``greedy`` / ``sampled`` are ``(texts, lengths)`` per problem, as from
    ``sampling.generate_completions``; greedy groups hold one completion, sampled groups k each.
    ``also``: further verifiers by name (e.g. GSM8K's strict one), whose greedy accuracy and
    avg@k go to ``report[name]``; ``verifier`` gives the headline numbers and the rows.
    """
    _check_records(records)
    if greedy is None and sampled is None:
        raise ValueError("nothing to score: give greedy and/or sampled completions")
    references = [r["reference"] for r in records]
    report: dict[str, Any] = {"num_problems": len(records), "bootstrap": dict(BOOTSTRAP)}
    rows: list[dict] = []
    lengths_for_report = None
    extracted, timeouts, errors, total = 0, 0, 0, 0
    for mode, gen in (("greedy", greedy), ("sampled", sampled)):
        if gen is None:
            continue
        texts, lengths = gen
        if len(texts) != len(records) or len(lengths) != len(records):
            raise ValueError(f"{mode} completions cover {len(texts)} problems, records "
                             f"{len(records)}")
        k = len(texts[0])
        if k < 1 or any(len(t) != k for t in texts):
            raise ValueError(f"every problem needs the same (>= 1) number of {mode} completions")
        results = verify_across_hosts(verifier, references, texts)
        correct = np.array([[res.correct for res in group] for group in results], np.float64)
        others = {}  # name -> its correctness of each completion, also kept per row
        for name, other in (also or {}).items():
            again = verify_across_hosts(other, references, texts)
            right = others[name] = np.array([[res.correct for res in group] for group in again],
                                            np.float64)
            report.setdefault(name, {})["greedy_accuracy" if mode == "greedy" else "avg_at_k"] = \
                ci(right[:, 0] if mode == "greedy" else right.mean(axis=1))
        for i, (rec, group) in enumerate(zip(records, results)):
            for j, res in enumerate(group):
                rows.append({"id": rec.get("id", str(i)), "question": rec["question"],
                             "prompt": prompts[i],
                             "reference": rec["reference"], "completion": texts[i][j],
                             "extracted": res.extracted, "correct": bool(res.correct),
                             "mode": mode, "sample_index": j, "length": int(lengths[i][j]),
                             **{f"{name}_correct": bool(right[i, j])
                                for name, right in others.items()}})
                extracted += res.extracted is not None
                timeouts += bool(res.timed_out)
                errors += res.error is not None
                total += 1
        if mode == "greedy":
            report["greedy_accuracy"] = ci(correct[:, 0])
        else:
            report["k"] = k
            report["avg_at_k"] = ci(correct.mean(axis=1))
            report["pass_at_k"] = ci([pass_at_k(k, int(c), k) for c in correct.sum(axis=1)])
            report["num_correct_samples"] = int(correct.sum())
        # Response length comes from the sampled completions when there are any.
        lengths_for_report = np.asarray(lengths, np.float64).mean(axis=1)
        if truncated and mode in truncated:
            report[f"{mode}_truncated_fraction"] = float(np.mean(truncated[mode]))
    report["mean_response_length"] = ci(lengths_for_report)
    report.update(num_completions=total, extraction_rate=extracted / total,
                  verifier_timeouts=timeouts, verifier_errors=errors)
    return report, rows


def evaluate_policy(params, model_cfg: models.ModelConfig, tokenizer, records: Sequence[dict], *,
                    template: str, chat: bool = False, verifier=None, k: int = 8,
                    temperature: float = 0.7, top_p: float = 0.95, greedy: bool = True,
                    max_prompt_len: int, max_new_tokens: int, batch_size: int = 64, seed: int = 0,
                    also: dict[str, Any] | None = None, engine: str = "static", slots: int = 0,
                    slot_halvings: int = DEFAULT_SLOT_HALVINGS) -> tuple[dict, list[dict]]:
    """Greedy accuracy and/or avg@k, pass@k (k samples per problem), mean response length,
    each ``{"mean", "ci_low", "ci_high"}`` with a bootstrap 95% interval over problems.

    ``k=0`` skips sampling (the training loop's fast periodic greedy eval). Rows are one per
    completion: ``{id, question, prompt, reference, completion, extracted, correct, mode,
    sample_index, length}`` with mode "greedy" or "sampled". ``also``: as in `score_policy`.
    ``engine`` / ``slots`` / ``slot_halvings``: the sampler, as in
    `sampling.generate_completions`.
    """
    _check_records(records)
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"k must be an int >= 0, got {k!r}")
    if k == 0 and not greedy:
        raise ValueError("nothing to evaluate: k=0 and greedy=False")
    prompts = [format_prompt(template, r["question"], tokenizer=tokenizer, chat=chat)
               for r in records]
    common = dict(max_prompt_len=max_prompt_len, max_new_tokens=max_new_tokens,
                  batch_size=batch_size, top_k=0, engine=engine, slots=slots,
                  slot_halvings=slot_halvings)
    gens, truncated = {}, {}
    if greedy:
        texts, lens, trunc = generate_texts(params, model_cfg, tokenizer, prompts,
                                            temperature=0.0, top_p=1.0, num_samples=1, seed=seed,
                                            **common)
        gens["greedy"], truncated["greedy"] = (texts, lens), trunc
    if k:
        texts, lens, trunc = generate_texts(params, model_cfg, tokenizer, prompts,
                                            temperature=temperature, top_p=top_p, num_samples=k,
                                            seed=seed + 1, **common)
        gens["sampled"], truncated["sampled"] = (texts, lens), trunc
    report, rows = score_policy(records, prompts, verifier, greedy=gens.get("greedy"),
                                sampled=gens.get("sampled"), truncated=truncated, also=also)
    report.update(greedy=bool(greedy), temperature=float(temperature) if k else None,
                  top_p=float(top_p) if k else None, max_new_tokens=int(max_new_tokens),
                  max_prompt_len=int(max_prompt_len), template=template, chat=bool(chat),
                  seed=int(seed))
    report.setdefault("k", 0)
    return report, rows
