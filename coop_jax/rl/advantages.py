"""Outcome-reward advantage estimators (GRPO family, REINFORCE++), one pure function per name.

Every estimator maps rewards ``[num_groups, G]`` (up to G rollouts of one prompt per row) to
advantages of the same shape. Groups may differ in size: ``present [num_groups, G]`` marks the
real rollouts of each row (the rest is padding, whose advantage is 0); ``ragged_advantages``
builds that layout from verl-style flat rewards and group ids.

A group whose present rewards are all equal (a single rollout included) carries no learning
signal: the group estimators (grpo, drgrpo, rloo) return exactly 0 for it, never NaN. That
equality, max == min with no tolerance, is the one rule; dynamic sampling
(`rl.dynamic_sampling.informative_groups`) drops exactly those groups.

The REINFORCE++ estimators whiten over the whole batch, as verl does, with every rollout
weighted by its response tokens (``tokens [num_groups, G]``; None = one weight per rollout):
``(x - mean) / sqrt(var_unbiased + 1e-8)``. A constant group then need not get 0, by design.
"""
from __future__ import annotations

from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from coop_jax.registry import Registry

# fn(rewards, eps, present, tokens, **options) -> advantages, all [num_groups, G]
AdvantageFn = Callable[..., jax.Array]
_WHITEN_EPS = 1e-8  # verl's masked_whiten: inside the square root


def constant_groups(rewards: jax.Array, present: jax.Array) -> jax.Array:
    """Bool [num_groups, 1]: the present rewards of the row are all equal (the no-signal rule).
    A float mean of equal values need not round back to that value, so it is decided on the
    rewards themselves."""
    big = jnp.finfo(rewards.dtype).max
    hi = jnp.max(jnp.where(present, rewards, -big), axis=-1, keepdims=True)
    lo = jnp.min(jnp.where(present, rewards, big), axis=-1, keepdims=True)
    return hi <= lo


def _count(present: jax.Array) -> jax.Array:
    return jnp.sum(present, axis=-1, keepdims=True).astype(jnp.float32)


def _group_mean(rewards: jax.Array, present: jax.Array) -> jax.Array:
    return jnp.sum(jnp.where(present, rewards, 0.0), axis=-1, keepdims=True) / jnp.maximum(
        _count(present), 1.0)


def _finish(rewards: jax.Array, present: jax.Array, adv: jax.Array) -> jax.Array:
    return jnp.where(constant_groups(rewards, present) | ~present, 0.0, adv)


def grpo(rewards, eps, present, tokens):
    """(r - mean_g) / (std_g with ddof=1 + eps)."""
    del tokens
    centered = rewards - _group_mean(rewards, present)
    sq = jnp.sum(jnp.where(present, centered**2, 0.0), axis=-1, keepdims=True)
    var = sq / jnp.maximum(_count(present) - 1.0, 1.0)
    return _finish(rewards, present, centered / (jnp.sqrt(var) + eps))


def drgrpo(rewards, eps, present, tokens):
    """Dr.GRPO: r - mean_g, no std division."""
    del eps, tokens
    return _finish(rewards, present, rewards - _group_mean(rewards, present))


def rloo(rewards, eps, present, tokens):
    """REINFORCE leave-one-out: r_i - mean_{j != i} r_j."""
    del eps, tokens
    total = jnp.sum(jnp.where(present, rewards, 0.0), axis=-1, keepdims=True)
    others = (total - rewards) / jnp.maximum(_count(present) - 1.0, 1.0)
    return _finish(rewards, present, rewards - others)


def _batch_whiten(x: jax.Array, present: jax.Array, tokens: Optional[jax.Array]) -> jax.Array:
    """verl's masked_whiten of x broadcast over each rollout's tokens: token-weighted batch mean,
    unbiased token-weighted variance (n = all tokens), (x - mean) / sqrt(var + 1e-8)."""
    w = jnp.where(present, 1.0 if tokens is None else tokens.astype(jnp.float32), 0.0)
    n = jnp.sum(w)
    mean = jnp.sum(w * x) / jnp.maximum(n, 1.0)
    var = jnp.sum(w * (x - mean) ** 2) / jnp.maximum(n - 1.0, 1.0)
    return jnp.where(present, (x - mean) * jax.lax.rsqrt(var + _WHITEN_EPS), 0.0)


def reinforce_plus_plus(rewards, eps, present, tokens):
    """REINFORCE++ (outcome reward, gamma 1): the rewards whitened over the batch."""
    del eps
    return _batch_whiten(rewards, present, tokens)


def reinforce_plus_plus_baseline(rewards, eps, present, tokens):
    """REINFORCE++-baseline: r - mean_g, then whitened over the batch."""
    del eps
    return _batch_whiten(rewards - _group_mean(rewards, present), present, tokens)


# the estimators whose advantage of a constant group is exactly 0 (the others whiten the batch)
GROUP_RELATIVE = ("grpo", "drgrpo", "rloo")

ADVANTAGES: Registry[AdvantageFn] = Registry(
    "rl.advantage", {"grpo": grpo, "drgrpo": drgrpo, "rloo": rloo,
                     "reinforce_plus_plus": reinforce_plus_plus,
                     "reinforce_plus_plus_baseline": reinforce_plus_plus_baseline})


def compute_advantages(name: str, rewards: jax.Array, *, eps: float = 1e-6,
                       present: Optional[jax.Array] = None, tokens: Optional[jax.Array] = None,
                       **options) -> jax.Array:
    """Advantages ``[num_groups, G]`` of rewards ``[num_groups, G]`` with estimator ``name``.

    ``present``: bool, the real rollouts of each row (None: all); ``tokens``: each rollout's
    response tokens, the REINFORCE++ whitening weights (None: one per rollout); ``options``: the
    parameters the estimator declared (``ADVANTAGES.params(name)``)."""
    fn = ADVANTAGES.lookup(name, "advantage")
    rewards = jnp.asarray(rewards)
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [num_groups, G], got shape {rewards.shape}")
    if not jnp.issubdtype(rewards.dtype, jnp.floating):
        rewards = rewards.astype(jnp.float32)
    present = jnp.ones(rewards.shape, bool) if present is None else jnp.asarray(present, bool)
    for field, arr in (("present", present), ("tokens", tokens)):
        if arr is not None and jnp.shape(arr) != rewards.shape:
            raise ValueError(f"{field} must have shape {rewards.shape}, got {jnp.shape(arr)}")
    return fn(rewards, eps, present, None if tokens is None else jnp.asarray(tokens), **options)


def group_layout(group_ids) -> tuple[np.ndarray, np.ndarray, int]:
    """Host side: (row of each rollout's group, its column in the row, number of groups) for flat
    ``group_ids [B]`` of any hashable values; groups keep their first appearance's order."""
    ids = np.asarray(group_ids)
    if ids.ndim != 1:
        raise ValueError(f"group_ids must be [B], got shape {ids.shape}")
    _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    order = np.argsort(np.argsort(first))  # unique's sorted order -> first-appearance order
    rows = order[inverse.reshape(-1)]
    cols = np.zeros(len(ids), np.int64)
    seen: dict[int, int] = {}
    for i, r in enumerate(rows):
        cols[i] = seen.get(r, 0)
        seen[r] = cols[i] + 1
    return rows, cols, len(first)


def ragged_advantages(name: str, rewards, group_ids, *, tokens=None, eps: float = 1e-6,
                      **options) -> jax.Array:
    """Advantages ``[B]`` of flat rewards ``[B]`` whose groups, given by ``group_ids [B]``, may
    differ in size (verl's ``index`` convention): padded to ``[num_groups, G_max]`` with a
    ``present`` mask, then ``compute_advantages``."""
    rewards = np.asarray(rewards, np.float32)
    if rewards.ndim != 1 or np.shape(group_ids) != rewards.shape:
        raise ValueError(f"rewards and group_ids must both be [B], got {rewards.shape} and "
                         f"{np.shape(group_ids)}")
    rows, cols, num_groups = group_layout(group_ids)
    shape = (num_groups, int(cols.max()) + 1 if len(cols) else 1)
    padded, present = np.zeros(shape, np.float32), np.zeros(shape, bool)
    padded[rows, cols], present[rows, cols] = rewards, True
    weights = None
    if tokens is not None:
        weights = np.zeros(shape, np.float32)
        weights[rows, cols] = np.asarray(tokens, np.float32)
    adv = compute_advantages(name, padded, eps=eps, present=present, tokens=weights, **options)
    return adv[rows, cols]
