"""Cooper's host side: (positive, negative) pairs for the reward model, and the EMA schedule of
Co-rewarding-II.

Positive = the FIRST rollout of a group the rule verifier marks correct (no such rollout: the
pair is masked). Negative, by `cooper.negative`:
  rewrite  - an assistant model rewrites the positive into a plausible wrong solution
             (temperature 0.7, max_tokens = words(pos) + 500, <= 3 tries);
  rollout  - the first rule-incorrect rollout of the same group (on-policy, free);
  perturb  - the positive with its final answer replaced by a different value.
A rewritten or perturbed negative is kept only if it has a final answer and the rule verifier says
that answer is NOT equivalent to the positive's.
"""
from __future__ import annotations

import json
import math
import re
import urllib.request
from typing import Callable, Sequence

import numpy as np

from coop_jax.rm_input import format_rm_input, tokenize_rm_inputs

REWRITE_SYSTEM_PROMPT = (
    "You are given a math problem and a correct solution. Produce a completely incorrect, "
    "misleading response: wrong reasoning and a wrong conclusion, similar in length and style to "
    "the correct one, plausible-sounding, and ending with a final answer in the same format.")


def rewrite_user_message(question: str, positive: str) -> str:
    return f"Problem:\n{question}\n\nCorrect response:\n{positive}\n\nIncorrect response:"


def corewarding_decay(step: int, a_start: float, a_end: float, total: int) -> float:
    """a_k = a_end + 0.5 (a_start - a_end)(1 + cos(pi t / T)), t = clip(k - 1, 0, T), k = step+1."""
    total = max(int(total), 1)
    t = min(max(step, 0), total)
    return a_end + 0.5 * (a_start - a_end) * (1 + math.cos(math.pi * t / total))


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def perturb_answer(answer: str, rng: np.random.Generator) -> str:
    """A different value for `answer`: integers/decimals shifted by a non-zero amount, anything
    else changed by appending `+1`."""
    stripped = answer.replace(",", "").strip()
    if _NUMBER.fullmatch(stripped):
        shift = int(rng.integers(1, 10)) * (1 if rng.random() < 0.5 else -1)
        value = float(stripped) + shift
        return str(int(value)) if "." not in stripped else f"{value:g}"
    return f"{answer}+1"


def perturb_text(text: str, answer: str, rng: np.random.Generator) -> str | None:
    """`text` with its last occurrence of the final answer replaced by a perturbed value."""
    at = text.rfind(answer)
    if not answer or at < 0:
        return None
    return text[:at] + perturb_answer(answer, rng) + text[at + len(answer):]


def _wrong_and_answered(verifier, pos_answers: Sequence[str], candidates: Sequence[str | None]
                        ) -> list[bool]:
    """Keep a candidate only if it has a final answer not equivalent to the positive's."""
    idx = [i for i, c in enumerate(candidates) if c]
    keep = [False] * len(candidates)
    if not idx:
        return keep
    results = verifier.verify_batch_detailed([pos_answers[i] for i in idx],
                                             [candidates[i] for i in idx])
    for i, r in zip(idx, results):
        keep[i] = (r.extracted is not None and not r.correct and not r.timed_out
                   and r.error is None)
    return keep


def build_pairs(strategy: str, records: Sequence[dict], texts: Sequence[str], labels: np.ndarray,
                extracted: Sequence[str | None], group_size: int, *, verifier,
                rewriter: Callable | None = None, rng: np.random.Generator | None = None,
                tries: int = 3) -> tuple[list[tuple[str, str] | None], dict]:
    """At most one (positive text, negative text) per prompt; None where the pair is masked."""
    if strategy not in ("rewrite", "rollout", "perturb"):
        raise ValueError(f"cooper.negative must be rewrite, rollout or perturb, got {strategy!r}")
    rng = rng or np.random.default_rng(0)
    n = len(records)
    pos_idx = []
    for p in range(n):
        rows = range(p * group_size, (p + 1) * group_size)
        pos_idx.append(next((r for r in rows if labels[r] > 0.5), None))
    pairs: list[tuple[str, str] | None] = [None] * n
    stats = {"pairs/no_positive": sum(i is None for i in pos_idx), "pairs/no_negative": 0,
             "pairs/negative_not_wrong": 0}
    with_pos = [p for p in range(n) if pos_idx[p] is not None]
    if strategy == "rollout":
        for p in with_pos:
            rows = range(p * group_size, (p + 1) * group_size)
            neg = next((r for r in rows if labels[r] <= 0.5), None)
            if neg is None:
                stats["pairs/no_negative"] += 1
            else:
                pairs[p] = (texts[pos_idx[p]], texts[neg])
    else:
        pending = {p: extracted[pos_idx[p]] for p in with_pos}
        for p, ans in list(pending.items()):
            if not ans:  # the verifier accepted it, but no answer string to anchor a negative on
                stats["pairs/no_negative"] += 1
                del pending[p]
        for _ in range(tries if strategy == "rewrite" else 1):
            if not pending:
                break
            order = list(pending)
            if strategy == "perturb":
                cands = [perturb_text(texts[pos_idx[p]], pending[p], rng) for p in order]
            else:
                cands = rewriter([(records[p]["question"], texts[pos_idx[p]]) for p in order])
            keep = _wrong_and_answered(verifier, [pending[p] for p in order], cands)
            for p, c, k in zip(order, cands, keep):
                if k:
                    pairs[p] = (texts[pos_idx[p]], c)
                    del pending[p]
        stats["pairs/negative_not_wrong"] = len(pending)
    stats["pairs/valid"] = sum(pair is not None for pair in pairs)
    return pairs, stats


def tokenize_pairs(tokenizer, records: Sequence[dict], pairs: Sequence[tuple[str, str] | None],
                   max_len: int) -> dict[str, np.ndarray]:
    """RM inputs of each prompt's (positive, negative) pair; masked pairs get pair_valid = 0."""
    pos, neg = [], []
    for r, pair in zip(records, pairs):
        p, q = pair if pair is not None else ("", "")
        pos.append(format_rm_input(r["question"], r["reference"], p))
        neg.append(format_rm_input(r["question"], r["reference"], q))
    pos_ids, pos_mask = tokenize_rm_inputs(tokenizer, pos, max_len)
    neg_ids, neg_mask = tokenize_rm_inputs(tokenizer, neg, max_len)
    return {"pair_pos_tokens": pos_ids, "pair_pos_mask": pos_mask, "pair_neg_tokens": neg_ids,
            "pair_neg_mask": neg_mask,
            "pair_valid": np.array([pair is not None for pair in pairs], np.float32)}


# ---------------------------------------------------------------------- assistants for "rewrite"
def http_rewriter(url: str, model: str, temperature: float = 0.7, timeout_s: float = 120.0):
    """An OpenAI-compatible chat-completions endpoint (`url` is the server root or /v1)."""
    endpoint = url.rstrip("/")
    if not endpoint.endswith("/chat/completions"):
        endpoint = (endpoint if endpoint.endswith("/v1") else endpoint + "/v1") + "/chat/completions"

    def rewrite(items: Sequence[tuple[str, str]]) -> list[str | None]:
        out = []
        for question, positive in items:
            body = {"model": model, "temperature": temperature,
                    "max_tokens": len(positive.split()) + 500,
                    "messages": [{"role": "system", "content": REWRITE_SYSTEM_PROMPT},
                                 {"role": "user", "content": rewrite_user_message(question,
                                                                                  positive)}]}
            request = urllib.request.Request(endpoint, data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=timeout_s) as response:
                    reply = json.load(response)
                out.append(reply["choices"][0]["message"]["content"])
            except (OSError, KeyError, IndexError, ValueError):
                out.append(None)  # counted as a failed try
        return out

    return rewrite


def local_rewriter(hf_path: str, max_prompt_len: int, max_new_tokens: int,
                   temperature: float = 0.7, seed: int = 0):
    """Any local HF causal LM, sampled with coop_jax's sampler."""
    import jax

    from coop_jax import data, hf, sampling

    from coop_jax.eval.evaluate import stop_token_ids

    lm = hf.load(hf_path)
    tokenizer = lm.tokenizer()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    scfg = sampling.SamplingConfig(max_new_tokens=max_new_tokens, eos_ids=stop_token_ids(tokenizer),
                                   pad_id=pad, temperature=temperature,
                                   valid_vocab=min(len(tokenizer), lm.config.vocab_size))
    sample = sampling.make(lm.config, scfg)
    calls = {"n": 0}

    def prompt(question, positive):
        user = rewrite_user_message(question, positive)
        if getattr(tokenizer, "chat_template", None):
            return tokenizer.apply_chat_template(
                [{"role": "system", "content": REWRITE_SYSTEM_PROMPT},
                 {"role": "user", "content": user}], tokenize=False, add_generation_prompt=True)
        return f"{REWRITE_SYSTEM_PROMPT}\n\n{user}\n"

    def rewrite(items: Sequence[tuple[str, str]]) -> list[str | None]:
        if not items:
            return []
        ids, mask = data.tokenize_prompts(tokenizer, [prompt(q, p) for q, p in items],
                                          max_prompt_len)
        calls["n"] += 1
        out = sample(lm.params, ids, mask, jax.random.key(seed * 100003 + calls["n"]))
        return sampling.decode_texts(tokenizer, out)

    return rewrite


def make_rewriter(config, mesh=None):
    c = config.cooper
    if c.assistant_url:
        return http_rewriter(c.assistant_url, c.assistant_model or "default",
                             c.rewrite_temperature)
    if c.assistant_hf_path:
        # Compiled shapes are fixed: the paper's max_tokens = words(pos) + 500 becomes a bound.
        return local_rewriter(c.assistant_hf_path, config.data.max_prompt_len + c.max_len,
                              config.rollout.max_new_tokens + 500, c.rewrite_temperature,
                              config.seed)
    raise ValueError("cooper.negative='rewrite' needs cooper.assistant_url or "
                     "cooper.assistant_hf_path")
