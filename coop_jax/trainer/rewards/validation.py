"""The checks of a run's config against its reward type, at start."""
from __future__ import annotations

from coop_jax import config as config_lib
from coop_jax.trainer.rewards.source import REWARD_SOURCES
from coop_jax.trainer.rewards.voting import ANSWER_MATCHES
from coop_jax.trainer.step import HOST_REWARDS


def validate_config(c) -> None:
    """Raise ValueError naming the first field that the run's reward type cannot work with."""
    REWARD_SOURCES.check(c.reward.type)
    ANSWER_MATCHES.check(c.reward.vote_match)
    source = REWARD_SOURCES[c.reward.type]
    if source.needs_rm:
        config_lib.validate_model_section(c.reward_model, "reward_model")
    validate_views(c, source)
    if c.rl.dynamic_sampling and source.device is not HOST_REWARDS:
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


def validate_views(c, source) -> None:
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
