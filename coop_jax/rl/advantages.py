"""Group-relative advantage estimators (GRPO family), one pure function per name.

Every estimator maps rewards ``[num_groups, G]`` (G rollouts of one prompt per row) to
advantages of the same shape. A group whose rewards are all equal carries no learning
signal; every estimator returns exactly 0 for it (also for G == 1), never NaN.
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from coop_jax.registry import Registry

AdvantageFn = Callable[[jax.Array, float], jax.Array]


def _zero_constant_groups(rewards: jax.Array, adv: jax.Array) -> jax.Array:
    # A float mean of equal values need not round back to that value, so the
    # "no signal" case is decided on the rewards themselves, not on adv.
    constant = jnp.max(rewards, axis=-1, keepdims=True) == jnp.min(rewards, axis=-1, keepdims=True)
    return jnp.where(constant, 0.0, adv)


def grpo(rewards: jax.Array, eps: float) -> jax.Array:
    """(r - mean_g) / (std_g with ddof=1 + eps)."""
    g = rewards.shape[-1]
    centered = rewards - jnp.mean(rewards, axis=-1, keepdims=True)
    var = jnp.sum(centered**2, axis=-1, keepdims=True) / max(g - 1, 1)
    return _zero_constant_groups(rewards, centered / (jnp.sqrt(var) + eps))


def drgrpo(rewards: jax.Array, eps: float) -> jax.Array:
    """Dr.GRPO: r - mean_g, no std division."""
    del eps
    return _zero_constant_groups(rewards, rewards - jnp.mean(rewards, axis=-1, keepdims=True))


def rloo(rewards: jax.Array, eps: float) -> jax.Array:
    """REINFORCE leave-one-out: r_i - mean_{j != i} r_j."""
    del eps
    g = rewards.shape[-1]
    others = (jnp.sum(rewards, axis=-1, keepdims=True) - rewards) / max(g - 1, 1)
    return _zero_constant_groups(rewards, rewards - others)


ADVANTAGES: Registry[AdvantageFn] = Registry(
    "rl.advantage", {"grpo": grpo, "drgrpo": drgrpo, "rloo": rloo})


def compute_advantages(name: str, rewards: jax.Array, *, eps: float = 1e-6,
                       **options) -> jax.Array:
    """Advantages ``[num_groups, G]`` of rewards ``[num_groups, G]`` with estimator ``name``;
    ``options``: the parameters it declared (``ADVANTAGES.params(name)``)."""
    fn = ADVANTAGES.lookup(name, "advantage")
    rewards = jnp.asarray(rewards)
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [num_groups, G], got shape {rewards.shape}")
    if not jnp.issubdtype(rewards.dtype, jnp.floating):
        rewards = rewards.astype(jnp.float32)
    return fn(rewards, eps, **options)
