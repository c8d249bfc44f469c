"""Labelled (question, reference, completion, label) triples for coop-train-rm: sampled from a
policy, labelled by the rule verifier (with a judge endpoint, kept only where the judge agrees:
the paper's hybrid annotation, docs/ALGORITHMS.md §1), split by question, balanced, filtered by
length. The triples' format, reading and writing are `coop_jax.rm.input`'s."""
from __future__ import annotations

import logging
import re
from typing import Callable, Sequence

import numpy as np

from coop_jax import data
from coop_jax.sampling import generate_completions
from coop_jax.sampling.chat import http_chat
from coop_jax.verify.grouped import verify_across_hosts

JUDGE_SYSTEM_PROMPT = (
    "You grade solutions to math problems. Given a problem, its reference answer and a candidate "
    "solution, decide whether the candidate's final answer is mathematically equivalent to the "
    "reference answer. Reply with one word: correct or incorrect.")

log = logging.getLogger("coop_jax.rm.train")

Judge = Callable[[Sequence[tuple[str, str, str]]], list["bool | None"]]


def label_balance(triples: Sequence[dict]) -> dict:
    pos = sum(bool(t["label"]) for t in triples)
    return {"num_triples": len(triples), "num_positive": pos, "num_negative": len(triples) - pos,
            "positive_fraction": pos / len(triples) if triples else float("nan")}


def split_triples(triples: Sequence[dict], heldout_fraction: float, seed: int = 0
                  ) -> tuple[list[dict], list[dict]]:
    """(train, held-out), split by question so no question is on both sides; about
    `heldout_fraction` of the distinct questions go to held-out (at least one when > 0)."""
    if not 0 <= heldout_fraction < 1:
        raise ValueError(f"heldout_fraction must be in [0, 1), got {heldout_fraction}")
    questions = list(dict.fromkeys(t["question"] for t in triples))
    n_held = 0 if heldout_fraction == 0 else max(1, round(heldout_fraction * len(questions)))
    if n_held >= len(questions) > 0 and heldout_fraction > 0:
        raise ValueError(f"heldout_fraction={heldout_fraction} leaves no training question "
                         f"({len(questions)} questions)")
    order = np.random.default_rng(seed).permutation(len(questions))
    held = {questions[i] for i in order[:n_held]}
    return ([t for t in triples if t["question"] not in held],
            [t for t in triples if t["question"] in held])


def drop_overlong(triples: Sequence[dict], opts) -> tuple[list[dict], int]:
    """`rm_train.overlong="drop"` (the reference): leave out triples whose question, reference and
    completion have more than `rm_train.max_chars` characters together; "truncate" keeps them all
    (the token input is cut to `max_len` tokens on `rm.truncation_side`). (kept,
    number dropped)."""
    if opts.overlong == "truncate":
        return list(triples), 0
    kept = [t for t in triples
            if len(t["question"]) + len(t["reference"]) + len(t["completion"]) <= opts.max_chars]
    if not kept:
        raise ValueError(f"every training triple is over config.rm_train.max_chars "
                         f"({opts.max_chars}); raise it or set rm_train.overlong='truncate'")
    if len(kept) < len(triples):
        log.warning("dropped %d of %d training triples over rm_train.max_chars=%d",
                    len(triples) - len(kept), len(triples), opts.max_chars)
    return kept, len(triples) - len(kept)


# ----------------------------------------------------------------------------- the judge
_THINK = re.compile(r"<think>.*?(</think>|$)", re.S)
_VERDICT = re.compile(r"\b(not\s+correct|incorrect|correct|wrong)\b")


def parse_judge_verdict(text: str | None) -> bool | None:
    """True / False from a judge reply ("correct" / "incorrect", "not correct", "wrong"; the
    last verdict word outside <think> blocks wins); None when there is none."""
    if not text:
        return None
    words = _VERDICT.findall(_THINK.sub(" ", text).lower())
    return None if not words else words[-1] == "correct"


def judge_user_message(question: str, reference: str, completion: str) -> str:
    return (f"Problem:\n{question}\n\nReference answer:\n{reference}\n\nCandidate solution:\n"
            f"{completion}\n\nIs the candidate's final answer correct? Answer \"correct\" or "
            f"\"incorrect\".")


def judge_messages(question: str, reference: str, completion: str) -> list[dict]:
    return [{"role": "system", "content": JUDGE_SYSTEM_PROMPT},
            {"role": "user", "content": judge_user_message(question, reference, completion)}]


def http_judge(url: str, model: str, *, max_tokens: int = 1024, timeout_s: float = 120.0,
               concurrency: int = 8) -> Judge:
    """A judge over an OpenAI-compatible chat-completions endpoint (`sampling.chat.http_chat`,
    temperature 0, `concurrency` requests in flight); a failed request or a reply without a
    verdict gives None."""
    chat = http_chat(url, model, temperature=0.0, timeout_s=timeout_s, concurrency=concurrency)

    def judge(items: Sequence[tuple[str, str, str]]) -> list[bool | None]:
        replies = chat([(judge_messages(*item), max_tokens) for item in items])
        return [parse_judge_verdict(reply) for reply in replies]

    return judge


# ----------------------------------------------------------------------------- labelling
def _dedupe(completions: Sequence[Sequence[str]]) -> tuple[list[list[str]], dict]:
    """Each group without empty and repeated completions; the counts of both."""
    groups, stats = [], {"completions": 0, "empty": 0, "duplicates": 0}
    for group in completions:
        stats["completions"] += len(group)
        kept = [c for c in group if c.strip()]
        stats["empty"] += len(group) - len(kept)
        unique = list(dict.fromkeys(kept))
        stats["duplicates"] += len(kept) - len(unique)
        groups.append(unique)
    return groups, stats


def _judged(triples: list[dict], judge: Judge, stats: dict) -> list[dict]:
    """The triples on whose label the judge agrees (its counts in `stats`)."""
    verdicts = judge([(t["question"], t["reference"], t["completion"]) for t in triples])
    stats["judge/no_verdict"] = sum(v is None for v in verdicts)
    stats["judge/disagree"] = sum(v is not None and v != t["label"]
                                  for v, t in zip(verdicts, triples))
    kept = [t for t, v in zip(triples, verdicts) if v == t["label"]]
    stats["judge/agree"] = len(kept)
    return kept


def label_triples(records: Sequence[dict], completions: Sequence[Sequence[str]], verifier, *,
                  judge: Judge | None = None) -> tuple[list[dict], dict]:
    """Triples from completions grouped per record, labelled by the rule verifier (`verifier` is
    a RuleVerifier, or None for in-process checks); with `judge`, only triples on which the judge
    agrees are kept. Empty and repeated completions of a question are dropped, as are verifier
    timeouts."""
    if len(records) != len(completions):
        raise ValueError(f"{len(records)} records but {len(completions)} completion groups")
    groups, stats = _dedupe(completions)
    stats["verifier_timeouts"] = 0
    results = verify_across_hosts(verifier, [r["reference"] for r in records], groups)
    triples = []
    for rec, group, res in zip(records, groups, results):
        for c, r in zip(group, res):
            if r.timed_out:
                stats["verifier_timeouts"] += 1
                continue
            triples.append({"question": rec["question"], "reference": rec["reference"],
                            "completion": c, "label": bool(r.correct)})
    stats["rule_positive"] = sum(t["label"] for t in triples)
    if judge is not None:
        triples = _judged(triples, judge, stats)
    stats.update(label_balance(triples))
    return triples, stats


def build_triples(params, model_cfg, tokenizer, records: Sequence[dict], *, verifier,
                  template: str, chat: bool = False, samples_per_question: int = 4,
                  temperature: float = 1.0, top_p: float = 1.0, max_prompt_len: int,
                  max_new_tokens: int, batch_size: int = 64, seed: int = 0,
                  judge: Judge | None = None) -> tuple[list[dict], dict]:
    """Sample `samples_per_question` completions per record from a policy and label them
    (`label_triples`)."""
    if samples_per_question < 1:
        raise ValueError(f"samples_per_question must be >= 1, got {samples_per_question}")
    prompts = [data.format_prompt(template, r["question"], tokenizer=tokenizer, chat=chat)
               for r in records]
    texts, _ = generate_completions(
        params, model_cfg, tokenizer, prompts, max_prompt_len=max_prompt_len,
        max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
        num_samples=samples_per_question, batch_size=batch_size, seed=seed)
    return label_triples(records, texts, verifier, judge=judge)
