"""Cooper's host side: (positive, negative) pairs for the reward model.

Positive = the FIRST rollout of a group the rule verifier marks correct (no such rollout: the
pair is masked). Negative, by `cooper.negative` (the NEGATIVE_STRATEGIES registry; a new strategy
is one function under `@register_negative(name)`):
  rewrite  - an assistant model rewrites the positive into a plausible wrong solution
             (temperature 0.7, max_tokens = words(pos) + 500, <= cooper.rewrite_tries tries);
  rollout  - the first rule-incorrect rollout of the same group (on-policy, free);
  perturb  - the positive with its final answer replaced by a different value (an ablation);
  consistent_wrong - the positive with one early slip carried through to a wrong final answer
             (synthetic task; the offline stand-in for rewrite);
  rollout_hardest - the rule-incorrect rollout of the group that the pre-update RM scores
             highest (with `cooper.pairs_per_group` = k, the k highest, one pair each), chosen
             on device (`rm.step.resolve_pairs`): the host sends rollout indices, not texts.
`cooper.pair_label_noise` swaps each pair's positive and negative with that probability (0.5:
the sham-Cooper control, an RM that moves as much as Cooper's without learning from the rule).
A verified strategy's negative (rewrite, perturb, consistent_wrong) is kept by
`cooper.negative_check` (the KEEP_RULES registry): "reference" (default, as the released code
does with Math-Verify) keeps it unless the lenient verifier finds the two full texts equivalent,
so a rewrite without a parseable answer counts as wrong; "extracted" keeps it only if it has a
final answer, under the run's extraction mode, that is not equivalent to the positive's.
See docs/ALGORITHMS.md.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Callable, Sequence

import numpy as np

from coop_jax.data.synthetic import consistent_wrong_solution
from coop_jax.parallel import host
from coop_jax.registry import Registry, first_doc_line
from coop_jax.rm.input import RMInputFormat
from coop_jax.sampling.chat import http_chat, local_chat
from coop_jax.rm.step import PairBatch

# The points of the released code's instruction, in our words: wrong reasoning throughout, a wrong
# conclusion, about the correct response's length, it must look like a solution of the problem,
# plausible-sounding; and only the solution process and its answer.
REWRITE_SYSTEM_PROMPT = (
    "You are given a math problem and a correct response to it. Write a completely incorrect, "
    "misleading response instead: keep the form of a worked solution, but let its reasoning go "
    "wrong so that it reaches a wrong final answer. Make it about as long as the correct "
    "response, plausible-sounding, and written as if it solved the problem.")


# Tokens of the rewrite prompt beyond the question and the positive: the system prompt, the
# user message's labels and the chat template (115 tokens with SmolLM2's chat template).
REWRITE_PROMPT_OVERHEAD_TOKENS = 128


def rewrite_user_message(prompt: str, positive: str) -> str:
    """The request: the policy's full user prompt (the question and its answer-format
    instruction) and the positive."""
    return (f"Math problem:\n{prompt}\n\nCorrect response:\n{positive}\n\nGive only the "
            "solution process and the final answer, in the format the problem asks for, and "
            "nothing else.")


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


@dataclasses.dataclass(frozen=True)
class PairRequest:
    """One prompt that has a positive: what a strategy may build its negative from."""
    question: str
    reference: str
    prompt: str                  # the policy's user prompt (the question in its template)
    positive: str
    answer: str | None           # the positive's extracted final answer
    group: Sequence[str]         # every rollout of the prompt, in order
    labels: Sequence[float]      # their rule labels
    rng: np.random.Generator | None = None  # the prompt's draws (see build_pairs' `seed`)
    slot: int = 0                # the prompt's index in this process's records


# candidates(requests, rng=..., rewriter=...) -> one negative text (or None) per request
CandidateFn = Callable[..., list]


@dataclasses.dataclass(frozen=True)
class NegativeStrategy:
    """A `cooper.negative` option.

    `verified`: candidates pass the shared keep check (`cooper.negative_check`, KEEP_RULES).
    `needs_answer`: the strategy builds on the positive's extracted answer (perturb).
    `retries`: failed prompts are asked again, up to `cooper.rewrite_tries` times.
    `needs_assistant`: the run must configure an assistant model (`make_rewriter`).
    `on_device`: the negative is picked on device by the RM's scores; `candidates` is then
    `fn(labels, group_size, pairs_per_group, has_reference) -> (PairBatch of rollout indices,
    stats)`.
    """
    name: str
    candidates: CandidateFn
    verified: bool = True
    retries: bool = False
    needs_assistant: bool = False
    needs_answer: bool = False
    on_device: bool = False


NEGATIVE_STRATEGIES: Registry[NegativeStrategy] = Registry("cooper.negative")


def register_negative(name: str, *, verified: bool = True, retries: bool = False,
                      needs_assistant: bool = False, needs_answer: bool = False,
                      on_device: bool = False) -> Callable[[CandidateFn], CandidateFn]:
    """Decorator: register `fn(requests, *, rng, rewriter) -> list[str | None]` as `name` (an
    `on_device` strategy's function: see NegativeStrategy)."""
    def register(fn: CandidateFn) -> CandidateFn:
        NEGATIVE_STRATEGIES.register(name, NegativeStrategy(
            name, fn, verified, retries, needs_assistant, needs_answer, on_device),
            doc=first_doc_line(fn))
        return fn
    return register


def negative_strategy(name: str) -> NegativeStrategy:
    return NEGATIVE_STRATEGIES.lookup(name)


@dataclasses.dataclass(frozen=True)
class PairSettings:
    """How Cooper's RM pairs are built (`cooper.*`), read once by the entry point."""
    negative: str                 # a NEGATIVE_STRATEGIES name
    pairs_per_group: int
    reference_positive: bool
    rewrite_tries: int
    negative_check: str           # a KEEP_RULES name
    pair_label_noise: float
    seed: int

    @classmethod
    def from_config(cls, config) -> "PairSettings":
        c = config.cooper
        return cls(c.negative, c.pairs_per_group, bool(c.reference_positive), c.rewrite_tries,
                   c.negative_check, float(c.pair_label_noise), config.seed)


def validate_config(c, trains_rm: bool) -> None:
    """Raise ValueError naming `cooper.negative` when it is unknown, or when the run trains the RM
    (`trains_rm`) with a strategy whose assistant is not configured or with more pairs per group
    than a group can hold."""
    NEGATIVE_STRATEGIES.check(c.cooper.negative)
    KEEP_RULES.check(c.cooper.negative_check)
    k, noise = c.cooper.pairs_per_group, c.cooper.pair_label_noise
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"config.cooper.pairs_per_group must be an int >= 1, got {k!r}")
    if k > 1 and not NEGATIVE_STRATEGIES[c.cooper.negative].on_device:
        raise ValueError(f"config.cooper.pairs_per_group={k} needs a negative ranked by the RM "
                         f"(cooper.negative in "
                         f"{list(NEGATIVE_STRATEGIES.where(lambda s: s.on_device))})")
    if trains_rm and k >= c.rollout.group_size:  # only a run that forms pairs needs them
        raise ValueError(f"config.cooper.pairs_per_group ({k}) must be below "
                         f"rollout.group_size ({c.rollout.group_size}): a group needs a positive")
    if not 0.0 <= noise <= 1.0:
        raise ValueError(f"config.cooper.pair_label_noise must be in [0, 1], got {noise!r}")
    if (trains_rm and NEGATIVE_STRATEGIES[c.cooper.negative].needs_assistant
            and not (c.cooper.assistant_hf_path or c.cooper.assistant_url)):
        others = NEGATIVE_STRATEGIES.where(lambda s: not s.needs_assistant)
        raise ValueError(f"config.cooper.negative={c.cooper.negative!r} needs "
                         f"cooper.assistant_hf_path or cooper.assistant_url (or choose one of "
                         f"{list(others)})")


@register_negative("rewrite", retries=True, needs_assistant=True)
def _rewrite_candidates(requests, *, rng, rewriter):
    """An assistant model rewrites the positive into a plausible wrong solution."""
    del rng
    items = [(r.prompt, r.positive) for r in requests]
    if getattr(rewriter, "slotted", False):  # each prompt's rewrite sampled at its own row
        return rewriter(items, slots=[r.slot for r in requests])
    return rewriter(items)


@register_negative("rollout", verified=False)
def _rollout_candidates(requests, *, rng, rewriter):
    """The first rule-incorrect rollout of the same group (on-policy, free)."""
    del rng, rewriter
    return [next((t for t, lab in zip(r.group, r.labels) if lab <= 0.5), None) for r in requests]


@register_negative("perturb", needs_answer=True)
def _perturb_candidates(requests, *, rng, rewriter):
    """The positive with its final answer replaced by a different value (an ablation: an RM can
    learn "final answer != last computed value" without reading the reference)."""
    del rewriter
    return [perturb_text(r.positive, r.answer, r.rng or rng) for r in requests]


@register_negative("consistent_wrong")
def _consistent_wrong_candidates(requests, *, rng, rewriter):
    """Offline stand-in for `rewrite` on the synthetic task: one early slip (a misread operand
    or an arithmetic slip) carried consistently through every later step to a wrong final
    answer, so only the question or the reference exposes it (coop_jax.data.synthetic)."""
    del rewriter
    return [consistent_wrong_solution(r.question, r.positive, r.rng or rng) for r in requests]


@register_negative("rollout_hardest", verified=False, on_device=True)
def ranked_rollout_pairs(labels, group_size: int, pairs_per_group: int = 1,
                         has_reference: Sequence[bool] | None = None) -> tuple[PairBatch, dict]:
    """The rule-incorrect rollouts of the group that the pre-update RM scores highest, against
    its first correct one (k pairs per group with cooper.pairs_per_group), picked on device.

    Host half: per group, k pair rows of rollout indices (`PairBatch.pos_row`, `neg_choices`:
    every rule-incorrect row, `neg_rank` 0..k-1); a row is valid when its group has a positive
    and more than `neg_rank` incorrect rollouts. A group with no correct rollout but a reference
    solution (`has_reference`, cooper.reference_positive) gets pos_row -1: the caller puts that
    positive's tokens in `pos_tokens`. Other tokens are placeholders that `rm.step.resolve_pairs`
    replaces."""
    labels = np.asarray(labels).reshape(-1, group_size) > 0.5
    k = pairs_per_group
    right, wrong = labels.any(axis=1), (~labels).sum(axis=1)
    reference = ~right & (np.zeros(len(labels), bool) if has_reference is None
                          else np.asarray(has_reference, bool))
    rank = np.tile(np.arange(k, dtype=np.int32), len(labels))
    has_positive = np.repeat(right | reference, k)
    valid = has_positive & (rank < np.repeat(wrong, k))
    blank = np.zeros((len(rank), 1), np.int32)
    pos_row = np.where(reference, -1, labels.argmax(axis=1))
    pairs = PairBatch(blank, blank, blank, blank, valid.astype(np.float32),
                      pos_row=np.repeat(pos_row, k).astype(np.int32),
                      neg_choices=np.repeat(~labels, k, axis=0).astype(np.float32),
                      neg_rank=rank)
    stats = {"pairs/no_positive": int((~has_positive).sum()),
             "pairs/no_negative": int((has_positive & ~valid).sum()),
             "pairs/negative_not_wrong": 0, "pairs/valid": int(valid.sum()),
             "pairs/reference_positive": int((np.repeat(reference, k) & valid).sum())}
    return pairs, stats


def with_reference_positives(pairs: PairBatch, records: Sequence[dict],
                             references: Sequence[str | None], tokenizer, fmt: RMInputFormat
                             ) -> PairBatch:
    """`ranked_rollout_pairs`' pairs with the RM inputs of the reference positives (pos_row -1)
    in `pos_tokens` (other rows empty)."""
    k = len(pairs.valid) // len(records)
    per_pair = [(r, ref) for r, ref in zip(records, references) for _ in range(k)]
    rows = [(r["question"], r["reference"], ref if row < 0 else "")
            for (r, ref), row in zip(per_pair, pairs.pos_row)]
    tokens, mask = fmt.tokenize(tokenizer, rows)
    blank = np.zeros_like(tokens)  # the negatives' placeholders, as wide (one padded axis)
    return pairs.replace(pos_tokens=tokens, pos_mask=mask * (pairs.pos_row[:, None] < 0),
                         neg_tokens=blank, neg_mask=blank)


def reference_solutions(records: Sequence[dict]) -> list[str | None]:
    """Each record's worked reference solution (its answer in the task's format), the positive
    of a group with no correct rollout under cooper.reference_positive; None where the record
    has none (that group forms no pair)."""
    return [r.get("solution") or None for r in records]


def label_swaps(num_pairs: int, noise: float, seed: Sequence[int], first_pair: int = 0
                ) -> np.ndarray:
    """1 where a pair's labels are swapped, with probability `noise`: pair i draws from its own
    `default_rng([*seed, first_pair + i])`, so the swaps do not depend on how the pairs are
    split over processes (`first_pair`: the global index of this process's first pair)."""
    return np.array([np.random.default_rng([*seed, first_pair + i]).random() < noise
                     for i in range(num_pairs)], np.float32)


def keep_if_wrong(verifier, pos_answers: Sequence[str], candidates: Sequence[str | None]
                  ) -> list[bool]:
    """The "extracted" check: keep a candidate only if it has a final answer (under the
    verifier's extraction mode) not equivalent to the positive's (no timeout, no error)."""
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


def keep_if_not_equivalent(full_text_verifier, positives: Sequence[str],
                           candidates: Sequence[str | None]) -> list[bool]:
    """The "reference" check (the released code's `not verify(parse(neg), parse(pos))`): keep a
    candidate unless the lenient verifier finds the answers of the two full texts equivalent; a
    candidate (or positive) without a parseable answer counts as not equivalent, and so does a
    check that timed out (Math-Verify's `verify` returns False on a timeout too)."""
    idx = [i for i, c in enumerate(candidates) if c]
    keep = [False] * len(candidates)
    answers = full_text_verifier.extract_batch([positives[i] for i in idx]) if idx else []
    check = [(i, a) for i, a in zip(idx, answers) if a is not None]
    for i in idx:
        keep[i] = True
    if check:
        results = full_text_verifier.verify_batch_detailed([a for _, a in check],
                                                           [candidates[i] for i, _ in check])
        for (i, _), r in zip(check, results):
            keep[i] = not r.correct
    return keep


@dataclasses.dataclass(frozen=True)
class KeepRule:
    """A `cooper.negative_check` option: fn(verifiers, requests, candidates) -> keep flags."""
    keep: Callable[..., list[bool]]
    needs_answer: bool  # the positive needs an extracted answer (else: no negative)


KEEP_RULES: Registry[KeepRule] = Registry("cooper.negative_check")
KEEP_RULES.register("reference", KeepRule(
    lambda v, requests, cands: keep_if_not_equivalent(v.full_text, [r.positive for r in requests],
                                                      cands), needs_answer=False),
    doc="lenient verifier on the full texts; no parseable answer counts as wrong (the reference)")
KEEP_RULES.register("extracted", KeepRule(
    lambda v, requests, cands: keep_if_wrong(v.rule, [r.answer for r in requests], cands),
    needs_answer=True),
    doc="an extracted final answer (the run's extraction mode) not equivalent to the positive's")


@dataclasses.dataclass(frozen=True)
class PairVerifiers:
    """The verifiers of the keep checks: the run's rule verifier and a lenient one."""
    rule: object
    full_text: object


def build_pairs(strategy: str, records: Sequence[dict], texts: Sequence[str], labels: np.ndarray,
                extracted: Sequence[str | None], group_size: int, *, verifier,
                rewriter: Callable | None = None, rng: np.random.Generator | None = None,
                tries: int = 3, seed: Sequence[int] | None = None, first_prompt: int = 0,
                prompts: Sequence[str] | None = None, keep_rule: str = "reference",
                full_text_verifier=None, references: Sequence[str | None] | None = None
                ) -> tuple[list[tuple[str, str] | None], dict]:
    """At most one (positive text, negative text) per prompt; None where the pair is masked.

    Positive = the first rule-correct rollout of the group; the negative comes from the
    strategy's candidate function, then (for verified strategies) the `keep_rule` check
    (KEEP_RULES; "reference" uses `full_text_verifier`, a lenient one, default `verifier`).
    `prompts`: the policy's user prompt of each record (default: its question), which the
    rewrite assistant is sent. `references` (cooper.reference_positive): a group with no correct
    rollout takes its record's reference solution as the positive (`reference_solutions`).
    Random strategies draw from `rng`, shared by the prompts in order; with `seed`, prompt p
    draws from its own `default_rng([*seed, first_prompt + p])` instead, so a prompt's negative
    does not depend on which other prompts this process holds (`first_prompt`: the global index
    of `records[0]` in a multi-host batch).
    """
    spec, rule = negative_strategy(strategy), KEEP_RULES.lookup(keep_rule)
    if spec.on_device:
        raise ValueError(f"cooper.negative={strategy!r} picks its negatives on device: its host "
                         "half is ranked_rollout_pairs, not build_pairs")
    verifiers = PairVerifiers(verifier, full_text_verifier or verifier)
    prompts = prompts or [r["question"] for r in records]
    rng = rng or np.random.default_rng(0)
    n = len(records)
    positives = []  # per prompt: (text, its answer) or None
    from_reference = set()  # prompts whose positive is their reference solution
    for p in range(n):
        rows = range(p * group_size, (p + 1) * group_size)
        row = next((r for r in rows if labels[r] > 0.5), None)
        reference = references[p] if references is not None and row is None else None
        if reference:
            from_reference.add(p)
        positives.append((texts[row], extracted[row]) if row is not None else
                         (reference, records[p]["reference"]) if reference else None)
    pairs: list[tuple[str, str] | None] = [None] * n
    stats = {"pairs/no_positive": sum(x is None for x in positives), "pairs/no_negative": 0,
             "pairs/negative_not_wrong": 0}
    requests = {}
    for p in range(n):
        if positives[p] is None:
            continue
        positive, answer = positives[p]
        if spec.verified and (spec.needs_answer or rule.needs_answer) and not answer:
            # the verifier accepted it, but there is no answer string to anchor a negative on
            stats["pairs/no_negative"] += 1
            continue
        rows = slice(p * group_size, (p + 1) * group_size)
        own = None if seed is None else np.random.default_rng([*seed, first_prompt + p])
        requests[p] = PairRequest(records[p]["question"], records[p]["reference"], prompts[p],
                                  positive, answer, texts[rows], labels[rows], own, p)
    # a collective rewriter (a mesh-sharded assistant on several processes) must be called the
    # same number of times on every process: a process whose requests are all done keeps asking
    # with none until no process has any left
    collective = bool(getattr(rewriter, "collective", False))
    for _ in range(tries if spec.retries else 1):
        if not (host.any_process(bool(requests)) if collective else requests):
            break
        order = list(requests)
        cands = spec.candidates([requests[p] for p in order], rng=rng, rewriter=rewriter)
        keep = (rule.keep(verifiers, [requests[p] for p in order], cands)
                if spec.verified else [c is not None for c in cands])
        for p, c, k in zip(order, cands, keep):
            if k:
                pairs[p] = (requests.pop(p).positive, c)
    stats["pairs/negative_not_wrong" if spec.verified else "pairs/no_negative"] += len(requests)
    stats["pairs/valid"] = sum(pair is not None for pair in pairs)
    if references is not None:
        stats["pairs/reference_positive"] = sum(pairs[p] is not None for p in from_reference)
    return pairs, stats


def tokenize_pairs(tokenizer, records: Sequence[dict], pairs: Sequence[tuple[str, str] | None],
                   fmt: RMInputFormat) -> PairBatch:
    """RM inputs (in `fmt`) of each prompt's (positive, negative) pair; masked pairs get
    valid = 0."""
    pos, neg = [], []
    for r, pair in zip(records, pairs):
        p, q = pair if pair is not None else ("", "")
        pos.append((r["question"], r["reference"], p))
        neg.append((r["question"], r["reference"], q))
    pos_ids, pos_mask = fmt.tokenize(tokenizer, pos)
    neg_ids, neg_mask = fmt.tokenize(tokenizer, neg)
    return PairBatch(pos_ids, pos_mask, neg_ids, neg_mask,
                     np.array([pair is not None for pair in pairs], np.float32))


# ---------------------------------------------------------------------- assistants for "rewrite"
def rewrite_messages(prompt: str, positive: str) -> list[dict]:
    return [{"role": "system", "content": REWRITE_SYSTEM_PROMPT},
            {"role": "user", "content": rewrite_user_message(prompt, positive)}]


def http_rewriter(url: str, model: str, temperature: float = 0.7, timeout_s: float = 120.0):
    """The "rewrite" assistant behind an OpenAI-compatible endpoint (`url`: server root or /v1);
    a failed request yields None (counted as a failed try)."""
    chat = http_chat(url, model, temperature, timeout_s)
    return lambda items: chat([(rewrite_messages(q, p), len(p.split()) + 500) for q, p in items])


def local_rewriter(hf_path: str, max_prompt_len: int, max_new_tokens: int,
                   temperature: float = 0.7, seed: int = 0, *, mesh=None,
                   dtype: str = "float32", compute_dtype: str | None = None,
                   scan_layers: bool = False, batch_size: int = 0, **engine):
    """The "rewrite" assistant as a local HF causal LM sampled with coop_jax's sampler; with a
    `mesh`, sharded over it (`sampling.chat.local_chat`: on several processes every call is a
    collective, `rewriter.collective`, and `build_pairs` calls it as many times on every
    process). `engine`: `local_chat`'s engine, slots and slot_halvings."""
    chat = local_chat(hf_path, max_prompt_len, max_new_tokens, temperature, seed, mesh=mesh,
                      dtype=dtype, compute_dtype=compute_dtype, scan_layers=scan_layers,
                      batch_size=batch_size, **engine)

    def rewrite(items, slots=None):
        return chat([rewrite_messages(q, p) for q, p in items], slots=slots)

    rewrite.collective = chat.collective
    rewrite.slotted = mesh is not None and batch_size > 0  # rows by prompt index
    return rewrite


@dataclasses.dataclass(frozen=True)
class AssistantSettings:
    """The "rewrite" negatives' assistant (`cooper.assistant_*`): an endpoint (`url`) or a local
    HF model (`hf_path`), read once from the config by the entry point (`from_config`).

    `local` holds `local_rewriter`'s keyword arguments (also what benchmarks/memory_plan.py
    compiles). Compiled shapes are fixed: the paper's max_tokens = words(pos) + 500 becomes a
    bound, the prompt holds the question, the positive and the instructions (chat-formatted), and
    a call holds up to `rollout.prompts_per_step` rewrites (the step's prompts, over all
    processes), sampled with the rollouts' engine (`rollout.engine`, `rollout.slots`,
    `rollout.slot_halvings`). The parameters (and activations) are in the policy's compute dtype,
    `model.dtype`: the assistant only samples, so it needs no fp32 master weights (a 7B one is
    15 GB in bfloat16); its layers are scanned like the policy's (`model.scan_layers`)."""
    url: str
    model: str
    hf_path: str
    temperature: float
    seed: int
    local: dict

    @classmethod
    def from_config(cls, config) -> "AssistantSettings":
        c = config.cooper
        local = dict(max_prompt_len=(config.data.max_prompt_len + config.rollout.max_new_tokens
                                     + REWRITE_PROMPT_OVERHEAD_TOKENS),
                     max_new_tokens=config.rollout.max_new_tokens + 500,
                     dtype=config.model.dtype, scan_layers=config.model.scan_layers,
                     batch_size=config.rollout.prompts_per_step, engine=config.rollout.engine,
                     slots=config.rollout.slots, slot_halvings=config.rollout.slot_halvings)
        return cls(c.assistant_url, c.assistant_model, c.assistant_hf_path,
                   c.rewrite_temperature, config.seed, local)


def make_rewriter(settings: AssistantSettings, mesh=None):
    """The "rewrite" assistant: an endpoint (`settings.url`) or a local HF model
    (`settings.hf_path`), sharded over the run's `mesh` beside the policy when one is given."""
    s = settings
    if s.url:
        return http_rewriter(s.url, s.model or "default", s.temperature)
    if s.hf_path:
        return local_rewriter(s.hf_path, temperature=s.temperature, seed=s.seed, mesh=mesh,
                              **s.local)
    raise ValueError("cooper.negative='rewrite' needs cooper.assistant_url or "
                     "cooper.assistant_hf_path")
