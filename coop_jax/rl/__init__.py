"""RL maths for the GRPO family: advantages, KL, policy loss, overlong handling, dynamic sampling.

Each option is a small pure function registered by name (ADVANTAGES, KL_ESTIMATORS, AGGREGATIONS,
RATIO_LEVELS, OVERLONG) and chosen by a config string.
"""
from coop_jax.rl.advantages import ADVANTAGES, compute_advantages
from coop_jax.rl.dynamic_sampling import fill_batch, informative_groups
from coop_jax.rl.kl import KL_ESTIMATORS, fold_kl_into_rewards, kl_penalty
from coop_jax.rl.losses import (
    AGGREGATIONS,
    RATIO_LEVELS,
    LossConfig,
    aggregate,
    loss_normalisers,
    part_weights,
    policy_loss,
    weigh_metrics,
)
from coop_jax.rl.overlong import (
    OVERLONG,
    apply_overlong,
    overlong_loss_mask,
    overlong_reward_penalty,
)

__all__ = [
    "ADVANTAGES",
    "AGGREGATIONS",
    "KL_ESTIMATORS",
    "OVERLONG",
    "RATIO_LEVELS",
    "LossConfig",
    "aggregate",
    "apply_overlong",
    "compute_advantages",
    "fill_batch",
    "fold_kl_into_rewards",
    "informative_groups",
    "kl_penalty",
    "loss_normalisers",
    "overlong_loss_mask",
    "overlong_reward_penalty",
    "part_weights",
    "policy_loss",
    "weigh_metrics",
]
