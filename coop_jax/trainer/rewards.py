"""Reward sources: one registered entry per `reward.type`.

Each entry (a `RewardSource`) says what the reward needs (a reward model, whether it trains it, an
EMA teacher, how many prompt views are trained on), its host function (rollouts, rule labels and
extracted answers -> per-row rewards and metrics), the device reward source the compiled step uses
(`train_step.DEVICE_REWARDS`: batch rewards, sigmoid(RM) or the rule/RM hybrid, each declaring
the options it reads), and an optional
per-step hook the loop calls before sampling (Co-rewarding-II's EMA teacher). Adding a reward type
is one `@register_reward(...)` function here plus its test. See docs/ALGORITHMS.md.

Rows are prompt-major (row r = rollout r % G of prompt r // G). The pairs for Cooper's RM update
come from `coop_jax.trainer.cooper`.
"""
from __future__ import annotations

import collections
import dataclasses
import math
import zlib
from typing import Any, Callable, Mapping, Sequence

import jax
import numpy as np

from coop_jax import config as config_lib
from coop_jax.registry import Options, Param, Registry, first_doc_line
from coop_jax.rm.step import RMUpdate
from coop_jax.trainer.step import DEVICE_REWARDS
from coop_jax.verify import EXTRACTION_MODES, answers_equivalent

# `verifier.extraction` = AUTO: the reward source's own default for the dataset (below).
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
    options: Options = Options()         # the reward type's declared parameters
    step: int = 0                         # the training step (seeds host-side random rewards)


# host(inputs) -> (one float32 reward array per view, metrics)
HostFn = Callable[[RewardInputs], tuple[list[np.ndarray], dict]]
# before_step(state, step, options) -> (state, metrics); options: the reward type's `params`
StepHook = Callable[[Any, int, Any], tuple[Any, dict]]


@dataclasses.dataclass(frozen=True)
class RewardSource:
    name: str
    host: HostFn
    device: str = "batch"           # a train_step.DEVICE_REWARDS name
    # the RM is co-trained on (positive, negative) pairs (Cooper): the step's RM update options
    # (rm.step.RMUpdate fields), each read from its config field
    rm_update: Mapping[str, Param] | None = None
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
    def trains_rm(self) -> bool:
        return self.rm_update is not None

    @property
    def needs_rm(self) -> bool:
        return DEVICE_REWARDS[self.device].needs_rm or self.trains_rm

    def rm_update_from_config(self, config) -> RMUpdate | None:
        """The step's RM update of this reward type, read from the config by the entry point
        (None: the RM is not trained)."""
        if self.rm_update is None:
            return None
        return RMUpdate(**{name: p.read(config) for name, p in self.rm_update.items()})


REWARD_SOURCES: Registry[RewardSource] = Registry("reward.type")


def register_reward(name: str, *, params: Mapping[str, Param] | None = None,
                    **spec) -> Callable[[HostFn], HostFn]:
    """Decorator: register `host(inputs) -> (rewards per view, metrics)` as reward.type `name`;
    `params`: the options its host function reads (`RewardInputs.options`), each from its
    config field."""
    def register(fn: HostFn) -> HostFn:
        REWARD_SOURCES.register(name, RewardSource(name, fn, **spec), doc=first_doc_line(fn),
                                params=params)
        return fn
    return register


def reward_source(name: str) -> RewardSource:
    return REWARD_SOURCES.lookup(name)


def rm_reward_types() -> tuple[str, ...]:
    """The reward types that load a reward model."""
    return REWARD_SOURCES.where(lambda source: source.needs_rm)


def validate_config(c) -> None:
    """Raise ValueError naming the first field that the run's reward type cannot work with."""
    REWARD_SOURCES.check(c.reward.type)
    ANSWER_MATCHES.check(c.reward.vote_match)
    source = REWARD_SOURCES[c.reward.type]
    if source.needs_rm:
        config_lib.validate_model_section(c.reward_model, "reward_model")
    rows = c.rollout.prompts_per_step * c.rollout.group_size
    if (rows // c.rl.num_minibatches) % (c.rl.micro_batches * source.num_views):
        raise ValueError(f"config.rl.micro_batches ({c.rl.micro_batches}) x views "
                         f"({source.num_views}) must divide the {rows // c.rl.num_minibatches} "
                         "rows of each PPO mini-batch (prompts_per_step * group_size / "
                         "rl.num_minibatches)")
    if source.num_views > 1 and c.rl.num_minibatches != 1:
        raise ValueError(f"config.rl.num_minibatches must be 1 for reward.type={c.reward.type!r} "
                         "(the views' losses are summed over the whole batch)")
    if c.rl.dynamic_sampling and source.num_views > 1:
        raise ValueError(f"config.rl.dynamic_sampling is not supported with reward.type="
                         f"{c.reward.type!r}: its {source.num_views} views of each prompt are "
                         "trained together, so groups cannot be dropped one view at a time; set "
                         "rl.dynamic_sampling=False")
    if c.rl.dynamic_sampling and source.device != "batch":
        raise ValueError("config.rl.dynamic_sampling needs host-side rewards; reward.type "
                         f"{c.reward.type!r} computes them on device")
    if c.rl.log_kl_to_start and source.needs_teacher:
        raise ValueError(f"config.rl.log_kl_to_start is not supported with reward.type="
                         f"{c.reward.type!r}: its KL reference is the EMA teacher, not the start "
                         "policy; set rl.log_kl_to_start=False")
    if c.rollout.overlap and (source.needs_teacher or source.before_step is not None):
        raise ValueError(f"config.rollout.overlap is not supported with reward.type="
                         f"{c.reward.type!r}: its per-step hook (the EMA teacher) changes the "
                         "state the next batch would be sampled from; set rollout.overlap=False")


def extraction_mode(configured: str, reward_type: str, dataset: str) -> str:
    """The rule verifier's extraction mode of a run: `configured` (`verifier.extraction`), or
    with "auto" the default of reward type `reward_type` for `dataset` (`data.dataset`)."""
    if configured == config_lib.AUTO_EXTRACTION:
        return reward_source(reward_type).extraction_for(dataset)
    return configured


def _exact(answer: str) -> str:
    return answer.strip()


def _no_whitespace(answer: str) -> str:
    return "".join(answer.split())


# `reward.vote_match`: how the voting rewards compare extracted answers. The references compare
# them as exact strings; "no_whitespace" also lets `\frac {1}{2}` and `\frac{1}{2}` vote together.
ANSWER_MATCHES: Registry[Callable[[str], str]] = Registry("reward.vote_match")
ANSWER_MATCHES.register("exact", _exact, doc="exact strings (the references), ends stripped")
ANSWER_MATCHES.register("no_whitespace", _no_whitespace, doc="exact strings after removing all "
                        "whitespace")


def normalize_answer(answer: str | None, match: str = "exact") -> str | None:
    """The answer as `match` compares it; None for no (or an empty) answer."""
    if answer is None:
        return None
    return ANSWER_MATCHES.lookup(match)(answer) or None


def majority_answer(answers: Sequence[str | None], match: str = "exact") -> str | None:
    """Most common non-empty answer (ties: the one seen first); None if all are empty."""
    keys = [normalize_answer(a, match) for a in answers]
    counts = collections.Counter(a for a in keys if a is not None)
    if not counts:
        return None
    best = max(counts.values())
    return next(a for a in keys if a is not None and counts[a] == best)


def match_rewards(answers: Sequence[str | None], labels: Sequence[str | None],
                  match: str = "exact") -> np.ndarray:
    """1.0 where the answer equals its label under `match` (no label -> 0)."""
    return np.array([float(lab is not None and normalize_answer(a, match) == lab)
                     for a, lab in zip(answers, labels)], np.float32)


def group_majority_labels(answers: Sequence[str | None], group_size: int,
                          match: str = "exact") -> list[str | None]:
    """The majority answer of each group of `group_size` consecutive rows."""
    if len(answers) % group_size:
        raise ValueError(f"{len(answers)} answers do not split into groups of {group_size}")
    return [majority_answer(answers[i:i + group_size], match)
            for i in range(0, len(answers), group_size)]


def rule_labels(verifier, references: Sequence[str], texts: Sequence[str]
                ) -> tuple[np.ndarray, list[str | None], int]:
    """(0/1 labels, extracted answers, timeouts) from the process-pool rule verifier."""
    results = verifier.verify_batch_detailed(list(references), list(texts))
    labels = np.array([float(r.correct) for r in results], np.float32)
    return labels, [r.extracted for r in results], sum(bool(r.timed_out) for r in results)


def pseudo_label_accuracy(records: Sequence[dict], pseudo: Sequence[str | None]) -> float:
    """Fraction of prompts whose majority-vote label is equivalent to the reference."""
    truth = [normalize_answer(r["reference"], "no_whitespace") for r in records]
    return float(np.mean([p is not None and answers_equivalent(t, p)
                          for p, t in zip(pseudo, truth)]))


def _vote(x: RewardInputs, answers, labels_from) -> tuple[np.ndarray, list[str | None]]:
    match = x.options["match"]
    pseudo = group_majority_labels(labels_from, x.group_size, match)
    return match_rewards(answers, np.repeat(pseudo, x.group_size).tolist(), match), pseudo


# ---------------------------------------------------------------------- the reward types
@register_reward("rule")
def _rule(x: RewardInputs):
    return [x.labels], {}


@register_reward("static_rm", device="rm", uses_rule_labels=False)
def _static_rm(x: RewardInputs):
    # the frozen RM scores on device; the batch's reward column is unused
    return [np.zeros(len(x.views[0]), np.float32)], {}


# Cooper's RM update: cooper.no_pair_step="skip" leaves the RM unchanged on a step without a pair
COOPER_RM_UPDATE = {"skip_no_pair": Param("cooper.no_pair_step", lambda v: v == "skip"),
                    "micro_batches": Param("cooper.micro_batches")}


@register_reward("cooper", device="rm", rm_update=COOPER_RM_UPDATE)
def _cooper(x: RewardInputs):
    return [x.labels], {}


VOTE = dict(extraction=VOTE_EXTRACTION, params={"match": Param("reward.vote_match")})


@register_reward("majority_vote", **VOTE)
def _majority_vote(x: RewardInputs):
    """TTRL: the majority answer of the group is every rollout's label."""
    rewards, pseudo = _vote(x, x.extracted, x.extracted)
    return [rewards], {"pseudo_label_accuracy": pseudo_label_accuracy(x.records, pseudo)}


@register_reward("corewarding_1", num_views=2, **VOTE)
def _corewarding_1(x: RewardInputs):
    """Co-rewarding-I: each view is labelled by the other view's majority answer."""
    extracted2 = x.verifier.extract_batch(x.views[1])
    rewards, pseudo = _vote(x, x.extracted, extracted2)    # label for x from x'
    rewards2, _ = _vote(x, extracted2, x.extracted)        # label for x' from x
    return [rewards, rewards2], {"pseudo_label_accuracy": pseudo_label_accuracy(x.records,
                                                                                pseudo)}


_ema = jax.jit(lambda teacher, policy, a: jax.tree_util.tree_map(
    lambda t, p: (a * p + (1 - a) * t).astype(t.dtype), teacher, policy))


def corewarding_decay(step: int, a_start: float, a_end: float, total: int) -> float:
    """a_k = a_end + 0.5 (a_start - a_end)(1 + cos(pi t / T)), t = clip(k - 1, 0, T), k = step+1."""
    total = max(int(total), 1)
    t = min(max(step, 0), total)
    return a_end + 0.5 * (a_start - a_end) * (1 + math.cos(math.pi * t / total))


def ema_teacher_update(state, step: int, options: Options) -> tuple[Any, dict]:
    """Co-rewarding-II: teacher <- a_k * policy + (1 - a_k) * teacher, once per step."""
    o = options
    a = corewarding_decay(step, o["a_start"], o["a_end"], o["decay_steps"] or o["steps"])
    teacher = _ema(state.ref_params, state.policy.params, a)
    return state.replace(ref_params=teacher), {"teacher_decay": a}


@register_reward("corewarding_2", needs_teacher=True, before_step=ema_teacher_update,
                 extraction=VOTE_EXTRACTION, params=VOTE["params"] | {
                     "a_start": Param("corewarding.a_start"), "a_end": Param("corewarding.a_end"),
                     "decay_steps": Param("corewarding.decay_steps"),
                     "steps": Param("train.steps")})
def _corewarding_2(x: RewardInputs):
    """Co-rewarding-II: labels are the majority answers of the EMA teacher's rollouts."""
    rewards, pseudo = _vote(x, x.extracted, x.verifier.extract_batch(x.teacher))
    return [rewards], {"pseudo_label_accuracy": pseudo_label_accuracy(x.records, pseudo)}


def random_rewards(seed: int, step: int, records: Sequence[dict], rows: int) -> np.ndarray:
    """Bernoulli(0.5) per rollout from a host RNG seeded by (seed, step, the prompts' ids): the
    same on a resumed step, different for a refill's prompts, independent of the texts."""
    ids = zlib.crc32("\n".join(str(r.get("id", r["question"])) for r in records).encode())
    rng = np.random.default_rng([int(seed), int(step), ids])
    return (rng.random(rows) < 0.5).astype(np.float32)


# Bernoulli(0.5), not the rule labels shuffled within the batch: a shuffle keeps the batch's
# reward rate equal to the policy's accuracy, so the signal's strength would still follow the
# task; a coin's is the same at every step (the "random reward" calibration of Shao et al. 2025,
# "Spurious Rewards"). Rule labels are still computed, in the background, for rule_accuracy.
@register_reward("random", uses_rule_labels=False, params={"seed": Param("seed")})
def _random(x: RewardInputs):
    """Calibration: a fair coin per rollout, unrelated to the completion."""
    return [random_rewards(x.options["seed"], x.step, x.records, len(x.views[0]))], {}


@register_reward("hybrid", device="hybrid")
def _hybrid(x: RewardInputs):
    """Rule labels on the host; the device ranks rollouts inside each rule stratum by the RM."""
    return [x.labels], {}
