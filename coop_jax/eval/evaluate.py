"""Policy and reward-model evaluation with bootstrap confidence intervals.

Policy protocol (docs/ALGORITHMS.md §1): greedy accuracy plus avg@k / pass@k from k samples at
temperature 0.7, top-p 0.95. Every metric is first computed per problem, then averaged over
problems, and its 95% interval is a bootstrap over problems.
"""
from __future__ import annotations

import functools
import logging
import math
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from coop_jax import models, sampling
from coop_jax.data import fixed_batches, format_prompt, tokenize_prompts
from coop_jax.eval.stats import bootstrap_ci, interval_to_json, pass_at_k, roc_auc
from coop_jax.models.tokenizer import stop_token_ids
from coop_jax.rm_input import check_triples, format_rm_input, tokenize_rm_inputs
from coop_jax.verify import verify_detailed

logger = logging.getLogger(__name__)

BOOTSTRAP = {"resamples": 1000, "seed": 0, "alpha": 0.05}


def _generate(params, model_cfg: models.ModelConfig, tokenizer, prompts: Sequence[str], *,
              max_prompt_len: int, max_new_tokens: int, temperature: float, top_p: float,
              top_k: int, num_samples: int, batch_size: int, seed: int, kernel_impl: str):
    """(texts [P][G], token lengths [P][G], truncated [P][G])."""
    if isinstance(prompts, str):
        raise TypeError("prompts must be a list of strings, not one string")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if not prompts:
        return [], [], []
    if model_cfg.is_reward_model:
        raise ValueError("generation needs a causal LM config (num_labels == 0), got a reward model")
    scfg = sampling.SamplingConfig(
        max_new_tokens=max_new_tokens, eos_ids=stop_token_ids(tokenizer),
        pad_id=int(tokenizer.pad_token_id), temperature=float(temperature), top_k=int(top_k),
        top_p=float(top_p), num_samples=int(num_samples),
        valid_vocab=min(len(tokenizer), model_cfg.vocab_size), kernel_impl=kernel_impl)
    fn = sampling.make(model_cfg, scfg)
    ids, mask = tokenize_prompts(tokenizer, list(prompts), max_prompt_len)
    bs = min(batch_size, len(prompts))  # a fixed shape for every batch: one compilation
    key = jax.random.key(seed)
    texts, lengths, truncated = [], [], []
    g = scfg.num_samples
    for b, (idx, real) in enumerate(fixed_batches(np.arange(len(prompts)), bs)):
        out = fn(params, ids[idx], mask[idx], jax.random.fold_in(key, b))
        decoded = sampling.decode_texts(tokenizer, out)
        lens, trunc = np.asarray(out.lengths), np.asarray(out.truncated)
        for j in range(real):
            rows = slice(j * g, (j + 1) * g)
            texts.append(decoded[rows])
            lengths.append([int(x) for x in lens[rows]])
            truncated.append([bool(x) for x in trunc[rows]])
    return texts, lengths, truncated


def generate_completions(params, model_cfg: models.ModelConfig, tokenizer, prompts: list[str], *,
                         max_prompt_len: int, max_new_tokens: int, temperature: float,
                         top_p: float = 1.0, top_k: int = 0, num_samples: int = 1,
                         batch_size: int = 64, seed: int = 0, kernel_impl: str = "auto",
                         ) -> tuple[list[list[str]], list[list[int]]]:
    """``num_samples`` completions per prompt and their token lengths (stop token included).

    ``temperature=0`` is greedy. Prompts are left-padded to ``max_prompt_len`` (longer ones keep
    their last tokens); every batch has ``min(batch_size, len(prompts))`` prompts, so the sampler
    compiles once per configuration.
    """
    texts, lengths, _ = _generate(
        params, model_cfg, tokenizer, prompts, max_prompt_len=max_prompt_len,
        max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, top_k=top_k,
        num_samples=num_samples, batch_size=batch_size, seed=seed, kernel_impl=kernel_impl)
    return texts, lengths


def verify_grouped(verifier, references: Sequence[str], completions: Sequence[Sequence[str]]):
    """VerifyResults shaped like ``completions`` (one list per problem).

    ``verifier`` is anything with ``verify_batch_detailed`` (a ``RuleVerifier``), or None for the
    in-process verifier (no hard timeout).
    """
    if len(references) != len(completions):
        raise ValueError(f"{len(references)} references but {len(completions)} completion groups")
    flat_refs = [r for r, group in zip(references, completions) for _ in group]
    flat = [c for group in completions for c in group]
    if verifier is None:
        results = [verify_detailed(r, c) for r, c in zip(flat_refs, flat)]
    else:
        results = verifier.verify_batch_detailed(flat_refs, flat)
    out, pos = [], 0
    for group in completions:
        out.append(results[pos:pos + len(group)])
        pos += len(group)
    return out


def _ci(values) -> dict:
    return interval_to_json(bootstrap_ci(values, **BOOTSTRAP))


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
                 ) -> tuple[dict, list[dict]]:
    """Verify given completions and build the report and per-sample rows (no model involved).

    ``greedy`` / ``sampled`` are ``(texts, lengths)`` per problem, as from
    ``generate_completions``; greedy groups hold one completion, sampled groups k each.
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
        results = verify_grouped(verifier, references, texts)
        correct = np.array([[res.correct for res in group] for group in results], np.float64)
        for i, (rec, group) in enumerate(zip(records, results)):
            for j, res in enumerate(group):
                rows.append({"id": rec.get("id", str(i)), "prompt": prompts[i],
                             "reference": rec["reference"], "completion": texts[i][j],
                             "extracted": res.extracted, "correct": bool(res.correct),
                             "mode": mode, "sample_index": j, "length": int(lengths[i][j])})
                extracted += res.extracted is not None
                timeouts += bool(res.timed_out)
                errors += res.error is not None
                total += 1
        if mode == "greedy":
            report["greedy_accuracy"] = _ci(correct[:, 0])
        else:
            report["k"] = k
            report["avg_at_k"] = _ci(correct.mean(axis=1))
            report["pass_at_k"] = _ci([pass_at_k(k, int(c), k) for c in correct.sum(axis=1)])
            report["num_correct_samples"] = int(correct.sum())
        # Response length comes from the sampled completions when there are any.
        lengths_for_report = np.asarray(lengths, np.float64).mean(axis=1)
        if truncated and mode in truncated:
            report[f"{mode}_truncated_fraction"] = float(np.mean(truncated[mode]))
    report["mean_response_length"] = _ci(lengths_for_report)
    report.update(num_completions=total, extraction_rate=extracted / total,
                  verifier_timeouts=timeouts, verifier_errors=errors)
    return report, rows


def evaluate_policy(params, model_cfg: models.ModelConfig, tokenizer, records: Sequence[dict], *,
                    template: str, chat: bool = False, verifier=None, k: int = 8,
                    temperature: float = 0.7, top_p: float = 0.95, greedy: bool = True,
                    max_prompt_len: int, max_new_tokens: int, batch_size: int = 64, seed: int = 0,
                    kernel_impl: str = "auto") -> tuple[dict, list[dict]]:
    """Greedy accuracy and/or avg@k, pass@k (k samples per problem), mean response length,
    each ``{"mean", "ci_low", "ci_high"}`` with a bootstrap 95% interval over problems.

    ``k=0`` skips sampling (the training loop's fast periodic greedy eval). Rows are one per
    completion: ``{id, prompt, reference, completion, extracted, correct, mode, sample_index,
    length}`` with mode "greedy" or "sampled".
    """
    _check_records(records)
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"k must be an int >= 0, got {k!r}")
    if k == 0 and not greedy:
        raise ValueError("nothing to evaluate: k=0 and greedy=False")
    prompts = [format_prompt(template, r["question"], tokenizer=tokenizer, chat=chat)
               for r in records]
    common = dict(max_prompt_len=max_prompt_len, max_new_tokens=max_new_tokens,
                  batch_size=batch_size, kernel_impl=kernel_impl, top_k=0)
    gens, truncated = {}, {}
    if greedy:
        texts, lens, trunc = _generate(params, model_cfg, tokenizer, prompts, temperature=0.0,
                                       top_p=1.0, num_samples=1, seed=seed, **common)
        gens["greedy"], truncated["greedy"] = (texts, lens), trunc
    if k:
        texts, lens, trunc = _generate(params, model_cfg, tokenizer, prompts,
                                       temperature=temperature, top_p=top_p, num_samples=k,
                                       seed=seed + 1, **common)
        gens["sampled"], truncated["sampled"] = (texts, lens), trunc
    report, rows = score_policy(records, prompts, verifier, greedy=gens.get("greedy"),
                                sampled=gens.get("sampled"), truncated=truncated)
    report.update(greedy=bool(greedy), temperature=float(temperature) if k else None,
                  top_p=float(top_p) if k else None, max_new_tokens=int(max_new_tokens),
                  max_prompt_len=int(max_prompt_len), template=template, chat=bool(chat),
                  seed=int(seed))
    report.setdefault("k", 0)
    return report, rows


# ----------------------------------------------------------------------------- reward model

@functools.lru_cache(maxsize=8)
def _jit_scores(cfg: models.ModelConfig):
    return jax.jit(lambda p, t, m: models.reward_scores(p, cfg, t, m))


def score_triples(params, rm_cfg: models.ModelConfig, tokenizer, triples: Sequence[dict], *,
                  max_len: int, batch_size: int) -> np.ndarray:
    """Raw RM scores [n] (logits; sigmoid > 0.5 ⇔ score > 0), fixed batch shape."""
    if not rm_cfg.is_reward_model:
        raise ValueError("evaluate_reward_model needs a reward model config (num_labels >= 1)")
    if batch_size < 1 or max_len < 1:
        raise ValueError(f"batch_size and max_len must be >= 1, got {batch_size}, {max_len}")
    texts = [format_rm_input(t["question"], t["reference"], t["completion"]) for t in triples]
    ids, mask = tokenize_rm_inputs(tokenizer, texts, max_len)
    fn = _jit_scores(rm_cfg)
    bs = min(batch_size, len(texts))
    scores = []
    for idx, real in fixed_batches(np.arange(len(texts)), bs):
        out = np.asarray(fn(params, jnp.asarray(ids[idx]), jnp.asarray(mask[idx])), np.float64)
        scores.append(out.reshape(len(idx), -1)[:real, 0])
    return np.concatenate(scores)


def evaluate_reward_model(params, rm_cfg: models.ModelConfig, tokenizer, triples: Sequence[dict],
                          *, max_len: int, batch_size: int = 64) -> tuple[dict, list[dict]]:
    """Accuracy (score > 0 ⇔ label) and ROC AUC on labelled triples, with bootstrap 95% CIs."""
    labels = np.asarray(check_triples(triples))
    scores = score_triples(params, rm_cfg, tokenizer, triples, max_len=max_len,
                           batch_size=batch_size)
    if not np.all(np.isfinite(scores)):
        raise FloatingPointError("the reward model produced NaN/inf scores")
    correct = ((scores > 0) == labels).astype(np.float64)
    auc = bootstrap_ci(np.stack([scores, labels.astype(np.float64)], 1),
                       statistic=lambda a: roc_auc(a[:, 0], a[:, 1]), **BOOTSTRAP)
    mean_or_none = lambda x: float(x.mean()) if x.size else None
    report = {"num_triples": int(len(labels)), "num_positive": int(labels.sum()),
              "num_negative": int((~labels).sum()), "accuracy": _ci(correct),
              "roc_auc": interval_to_json(auc),
              "mean_score_positive": mean_or_none(scores[labels]),
              "mean_score_negative": mean_or_none(scores[~labels]),
              "max_len": int(max_len), "bootstrap": dict(BOOTSTRAP)}
    if math.isnan(auc["mean"]):
        logger.warning("ROC AUC is undefined: the triples hold a single label class")
    rows = [{"id": t.get("id", str(i)), "question": t["question"], "reference": t["reference"],
             "completion": t["completion"], "label": bool(y), "score": float(s),
             "predicted": bool(s > 0), "correct": bool(c)}
            for i, (t, y, s, c) in enumerate(zip(triples, labels, scores, correct))]
    return report, rows
