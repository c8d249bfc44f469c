"""Reward sources: one registered entry per `reward.type`.

Each entry (a `RewardSource`) says what the reward needs (a reward model, whether it trains it, an
EMA teacher, how many prompt views are trained on), its host function (rollouts, rule labels and
extracted answers -> per-row rewards and metrics), the device reward source the compiled step uses
(`train_step.DEVICE_REWARDS`: batch rewards, sigmoid(RM) or the rule/RM hybrid), and an optional
per-step hook the loop calls before sampling (Co-rewarding-II's EMA teacher). Adding a reward type
is one `@register_reward(...)` function here plus its test. See docs/ALGORITHMS.md.

Rows are prompt-major (row r = rollout r % G of prompt r // G). The pairs for Cooper's RM update
come from `coop_jax.cooper`.
"""
from __future__ import annotations

import collections
import dataclasses
import math
from typing import Any, Callable, Mapping, Sequence

import jax
import numpy as np

from coop_jax.registry import Registry, first_doc_line
from coop_jax.verify import EXTRACTION_MODES, answers_equivalent

# `verifier.extraction` = AUTO: the reward source's own default for the dataset (below).
AUTO_EXTRACTION = "auto"
EXTRACTION_CHOICES = (AUTO_EXTRACTION,) + tuple(EXTRACTION_MODES)
# The references' answer matching: Cooper's GSM8K rule reward is a strict `#### <number>` match
# (verl's gsm8k scorer, method="strict"); Co-rewarding votes on the last \boxed{} content only, a
# rollout without one gets 0. The synthetic task answers with "####" and keeps the lenient rules,
# as does MATH under Cooper (math-verify-style equivalence).
RULE_EXTRACTION = {"gsm8k": "strict_hash", "*": "lenient"}
VOTE_EXTRACTION = {"synthetic": "lenient", "*": "strict_boxed"}


@dataclasses.dataclass(frozen=True)
class RewardInputs:
    """What a host reward function sees for one step."""
    records: Sequence[dict]               # the step's prompts
    views: Sequence[Sequence[str]]        # decoded rollouts per trained view (views[0]: question)
    labels: np.ndarray | None             # rule labels of views[0] (None: still being verified)
    extracted: Sequence[str | None] | None  # the answers the rule verifier extracted from views[0]
    teacher: Sequence[str] | None         # the EMA teacher's rollouts (needs_teacher)
    group_size: int
    verifier: Any


# host(inputs) -> (one float32 reward array per view, metrics)
HostFn = Callable[[RewardInputs], tuple[list[np.ndarray], dict]]
# before_step(state, step, config) -> (state, metrics)
StepHook = Callable[[Any, int, Any], tuple[Any, dict]]


@dataclasses.dataclass(frozen=True)
class RewardSource:
    name: str
    host: HostFn
    device: str = "batch"           # key of train_step.DEVICE_REWARDS
    trains_rm: bool = False         # the RM is co-trained on (positive, negative) pairs (Cooper)
    needs_teacher: bool = False     # an EMA teacher of the policy, also the KL reference
    num_views: int = 1              # views of each prompt trained on (Co-rewarding-I: 2)
    uses_rule_labels: bool = True   # False: rule labels only feed diagnostics (verified async)
    before_step: StepHook | None = None
    # default answer extraction per dataset ("*": any other), used when verifier.extraction=auto
    extraction: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: dict(RULE_EXTRACTION))

    def extraction_for(self, dataset: str) -> str:
        return self.extraction.get(dataset, self.extraction["*"])

    @property
    def needs_rm(self) -> bool:
        return self.device != "batch" or self.trains_rm


REWARD_SOURCES: Registry[RewardSource] = Registry("reward.type")


def register_reward(name: str, **spec) -> Callable[[HostFn], HostFn]:
    """Decorator: register `host(inputs) -> (rewards per view, metrics)` as reward.type `name`."""
    def register(fn: HostFn) -> HostFn:
        REWARD_SOURCES.register(name, RewardSource(name, fn, **spec), doc=first_doc_line(fn))
        return fn
    return register


def reward_source(name: str) -> RewardSource:
    return REWARD_SOURCES.lookup(name)


def extraction_mode(config) -> str:
    """The rule verifier's extraction mode of a run: `verifier.extraction`, or with "auto" the
    reward source's default for `data.dataset`."""
    mode = config.verifier.extraction
    if mode == AUTO_EXTRACTION:
        return reward_source(config.reward.type).extraction_for(config.data.dataset)
    return mode


def normalize_answer(answer: str | None) -> str | None:
    """Exact-string comparison as in Co-rewarding, after removing all whitespace."""
    if answer is None:
        return None
    answer = "".join(answer.split())
    return answer or None


def majority_answer(answers: Sequence[str | None]) -> str | None:
    """Most common non-empty answer (ties: the one seen first); None if all are empty."""
    counts = collections.Counter(a for a in map(normalize_answer, answers) if a is not None)
    if not counts:
        return None
    best = max(counts.values())
    return next(a for a in map(normalize_answer, answers) if a is not None and counts[a] == best)


def match_rewards(answers: Sequence[str | None], labels: Sequence[str | None]) -> np.ndarray:
    """1.0 where the answer equals its label as an exact string (no label -> 0)."""
    return np.array([float(lab is not None and normalize_answer(a) == lab)
                     for a, lab in zip(answers, labels)], np.float32)


def group_majority_labels(answers: Sequence[str | None], group_size: int) -> list[str | None]:
    """The majority answer of each group of `group_size` consecutive rows."""
    if len(answers) % group_size:
        raise ValueError(f"{len(answers)} answers do not split into groups of {group_size}")
    return [majority_answer(answers[i:i + group_size]) for i in range(0, len(answers), group_size)]


def rule_labels(verifier, references: Sequence[str], texts: Sequence[str]
                ) -> tuple[np.ndarray, list[str | None], int]:
    """(0/1 labels, extracted answers, timeouts) from the process-pool rule verifier."""
    results = verifier.verify_batch_detailed(list(references), list(texts))
    labels = np.array([float(r.correct) for r in results], np.float32)
    return labels, [r.extracted for r in results], sum(bool(r.timed_out) for r in results)


def pseudo_label_accuracy(records: Sequence[dict], pseudo: Sequence[str | None]) -> float:
    """Fraction of prompts whose majority-vote label is equivalent to the reference."""
    truth = [normalize_answer(r["reference"]) for r in records]
    return float(np.mean([p is not None and answers_equivalent(t, p)
                          for p, t in zip(pseudo, truth)]))


def _vote(answers, labels_from, group_size) -> tuple[np.ndarray, list[str | None]]:
    pseudo = group_majority_labels(labels_from, group_size)
    return match_rewards(answers, np.repeat(pseudo, group_size).tolist()), pseudo


# ---------------------------------------------------------------------- the reward types
@register_reward("rule")
def _rule(x: RewardInputs):
    return [x.labels], {}


@register_reward("static_rm", device="rm", uses_rule_labels=False)
def _static_rm(x: RewardInputs):
    # the frozen RM scores on device; the batch's reward column is unused
    return [np.zeros(len(x.views[0]), np.float32)], {}


@register_reward("cooper", device="rm", trains_rm=True)
def _cooper(x: RewardInputs):
    return [x.labels], {}


@register_reward("majority_vote", extraction=VOTE_EXTRACTION)
def _majority_vote(x: RewardInputs):
    """TTRL: the majority answer of the group is every rollout's label."""
    rewards, pseudo = _vote(x.extracted, x.extracted, x.group_size)
    return [rewards], {"pseudo_label_accuracy": pseudo_label_accuracy(x.records, pseudo)}


@register_reward("corewarding_1", num_views=2, extraction=VOTE_EXTRACTION)
def _corewarding_1(x: RewardInputs):
    """Co-rewarding-I: each view is labelled by the other view's majority answer."""
    extracted2 = x.verifier.extract_batch(x.views[1])
    rewards, pseudo = _vote(x.extracted, extracted2, x.group_size)    # label for x from x'
    rewards2, _ = _vote(extracted2, x.extracted, x.group_size)        # label for x' from x
    return [rewards, rewards2], {"pseudo_label_accuracy": pseudo_label_accuracy(x.records,
                                                                                pseudo)}


_ema = jax.jit(lambda teacher, policy, a: jax.tree_util.tree_map(
    lambda t, p: (a * p + (1 - a) * t).astype(t.dtype), teacher, policy))


def corewarding_decay(step: int, a_start: float, a_end: float, total: int) -> float:
    """a_k = a_end + 0.5 (a_start - a_end)(1 + cos(pi t / T)), t = clip(k - 1, 0, T), k = step+1."""
    total = max(int(total), 1)
    t = min(max(step, 0), total)
    return a_end + 0.5 * (a_start - a_end) * (1 + math.cos(math.pi * t / total))


def ema_teacher_update(state, step: int, config) -> tuple[Any, dict]:
    """Co-rewarding-II: teacher <- a_k * policy + (1 - a_k) * teacher, once per step."""
    c = config.corewarding
    a = corewarding_decay(step, c.a_start, c.a_end, c.decay_steps or config.train.steps)
    teacher = _ema(state.ref_params, state.policy.params, a)
    return state.replace(ref_params=teacher), {"teacher_decay": a}


@register_reward("corewarding_2", needs_teacher=True, before_step=ema_teacher_update,
                 extraction=VOTE_EXTRACTION)
def _corewarding_2(x: RewardInputs):
    """Co-rewarding-II: labels are the majority answers of the EMA teacher's rollouts."""
    rewards, pseudo = _vote(x.extracted, x.verifier.extract_batch(x.teacher), x.group_size)
    return [rewards], {"pseudo_label_accuracy": pseudo_label_accuracy(x.records, pseudo)}


@register_reward("hybrid", device="hybrid")
def _hybrid(x: RewardInputs):
    """Rule labels on the host; the device ranks rollouts inside each rule stratum by the RM."""
    return [x.labels], {}
