"""RL maths for the GRPO family: advantages, KL, policy loss, overlong handling, dynamic sampling.

Each option is a small pure function registered by name (ADVANTAGES, KL_ESTIMATORS,
KL_CONTROLLERS, POLICY_LOSSES, AGGREGATIONS, RATIO_LEVELS, OVERLONG) and chosen by a config
string. `tests/rl/test_rl_verl_parity.py` compares them with verl's own `core_algos`.
"""
from coop_jax.rl.advantages import (
    ADVANTAGES,
    compute_advantages,
    constant_groups,
    group_layout,
    ragged_advantages,
)
from coop_jax.rl.dynamic_sampling import fill_batch, informative_groups
from coop_jax.rl.kl import (
    KL_CONTROLLERS,
    KL_ESTIMATORS,
    fold_kl_into_rewards,
    kl_penalty,
    reward_kl,
)
from coop_jax.rl.losses import (
    AGGREGATIONS,
    POLICY_LOSSES,
    RATIO_LEVELS,
    LossConfig,
    aggregate,
    check_policy_loss,
    default_clip_ratio_c,
    loss_normalisers,
    part_weights,
    policy_loss,
    truncated_is_weights,
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
    "KL_CONTROLLERS",
    "KL_ESTIMATORS",
    "OVERLONG",
    "POLICY_LOSSES",
    "RATIO_LEVELS",
    "LossConfig",
    "aggregate",
    "apply_overlong",
    "check_policy_loss",
    "compute_advantages",
    "constant_groups",
    "default_clip_ratio_c",
    "fill_batch",
    "fold_kl_into_rewards",
    "group_layout",
    "informative_groups",
    "kl_penalty",
    "loss_normalisers",
    "overlong_loss_mask",
    "overlong_reward_penalty",
    "part_weights",
    "policy_loss",
    "ragged_advantages",
    "reward_kl",
    "truncated_is_weights",
    "weigh_metrics",
]
