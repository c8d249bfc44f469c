"""Handling of responses that hit the generation length limit (DAPO).

``mask``: truncated responses get loss weight 0 (their reward is unreliable).
``penalty``: soft overlong punishment added to the reward,
    0                                   if L <= max_len - cache_len
    ((max_len - cache_len) - L) / cache_len * factor   inside the window
    -factor                             if L > max_len
Each registry entry maps (rewards, lengths, truncated, max_len, cache_len, factor)
to (rewards [B], loss_weight [B]); the loss weight multiplies the token mask.
"""
from __future__ import annotations

import numbers
from typing import Callable

import jax
import jax.numpy as jnp

from coop_jax.registry import Registry

OverlongFn = Callable[..., tuple[jax.Array, jax.Array]]


def overlong_loss_mask(truncated: jax.Array) -> jax.Array:
    """Loss weight [B]: 0.0 for truncated responses, 1.0 otherwise."""
    return 1.0 - jnp.asarray(truncated).astype(jnp.float32)


def overlong_reward_penalty(
    lengths: jax.Array, max_len: int, cache_len: int, factor: float = 1.0
) -> jax.Array:
    """DAPO soft overlong punishment [B] (<= 0) for response lengths [B]."""
    if not isinstance(max_len, numbers.Integral) or max_len <= 0:
        raise ValueError(f"max_len must be a positive int, got {max_len!r}")
    if not isinstance(cache_len, numbers.Integral) or not 0 < cache_len <= max_len:
        raise ValueError(f"cache_len must be an int in (0, max_len={max_len}], got {cache_len!r}")
    over = jnp.asarray(lengths).astype(jnp.float32) - (max_len - cache_len)
    return -factor * jnp.clip(over / cache_len, 0.0, 1.0)


def _none(rewards, lengths, truncated, max_len, cache_len, factor):
    del lengths, truncated, max_len, cache_len, factor
    return rewards, jnp.ones(rewards.shape, jnp.float32)


def _mask(rewards, lengths, truncated, max_len, cache_len, factor):
    del lengths, max_len, cache_len, factor
    return rewards, overlong_loss_mask(truncated)


def _penalty(rewards, lengths, truncated, max_len, cache_len, factor):
    del truncated
    penalty = overlong_reward_penalty(lengths, max_len, cache_len, factor)
    return rewards + penalty, jnp.ones(rewards.shape, jnp.float32)


OVERLONG: Registry[OverlongFn] = Registry(
    "rl.overlong", {"none": _none, "mask": _mask, "penalty": _penalty})


def apply_overlong(
    name: str,
    rewards: jax.Array,
    lengths: jax.Array,
    truncated: jax.Array,
    *,
    max_len: int,
    cache_len: int,
    factor: float = 1.0,
) -> tuple[jax.Array, jax.Array]:
    """Apply overlong mode ``name``; returns (rewards [B], loss_weight [B])."""
    fn = OVERLONG.lookup(name, "overlong")
    rewards = jnp.asarray(rewards).astype(jnp.float32)
    if rewards.ndim != 1:
        raise ValueError(f"rewards must be [B], got shape {rewards.shape}")
    for field, arr in (("lengths", lengths), ("truncated", truncated)):
        if jnp.shape(arr) != rewards.shape:
            raise ValueError(f"{field} must have shape {rewards.shape}, got {jnp.shape(arr)}")
    return fn(rewards, lengths, truncated, max_len, cache_len, factor)
