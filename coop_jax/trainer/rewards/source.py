"""What a reward type is (`RewardSource`), its registry (`REWARD_SOURCES`, chosen by
`reward.type`) and the checks of a run's config against it.

A reward type declares what it needs (a reward model, whether it trains it, an EMA teacher, how
many prompt views are trained on), its host function (rollouts, rule labels and extracted
answers -> per-row rewards and metrics), its device half (`trainer.step.DeviceReward`: the host's
rewards, sigmoid(RM) or the rule/RM hybrid) and an optional per-step hook the loop calls before
sampling (Co-rewarding-II's EMA teacher).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from coop_jax import config as config_lib
from coop_jax.registry import Options, Param, Registry, first_doc_line, read_options
from coop_jax.rm.step import RMUpdate
from coop_jax.trainer.step import HOST_REWARDS, DeviceReward

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
    device: DeviceReward = HOST_REWARDS  # how the compiled step turns the batch into rewards
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
        return self.device.needs_rm or self.trains_rm

    def rm_update_from_config(self, config) -> RMUpdate | None:
        """The step's RM update of this reward type, read from the config by the entry point
        (None: the RM is not trained)."""
        if self.rm_update is None:
            return None
        return RMUpdate(**read_options(self.rm_update, config))


REWARD_SOURCES: Registry[RewardSource] = Registry("reward.type")


def register_reward(name: str, *, params: Mapping[str, Param] | None = None,
                    **spec) -> Callable[[HostFn], HostFn]:
    """Decorator: register `host(inputs) -> (rewards per view, metrics)` as reward.type `name`;
    `params`: the options its host function reads (`RewardInputs.options`), each from its
    config field; `spec`: the other `RewardSource` fields (its `device` half among them)."""
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


def extraction_mode(configured: str, reward_type: str, dataset: str) -> str:
    """The rule verifier's extraction mode of a run: `configured` (`verifier.extraction`), or
    with "auto" the default of reward type `reward_type` for `dataset` (`data.dataset`)."""
    if configured == config_lib.AUTO_EXTRACTION:
        return reward_source(reward_type).extraction_for(dataset)
    return configured
