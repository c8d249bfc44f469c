"""Per-token KL estimators between the policy and a reference (Schulman's k1/k2/k3).

With ``log r = logp - ref_logp`` (r = pi / pi_ref, tokens sampled from pi):
k1 = log r, k2 = 1/2 (log r)^2, k3 = exp(-log r) - 1 + log r (>= 0, unbiased, low variance).
``low_var_kl`` is k3 as verl computes it: log r clamped to [-20, 20], result clamped to [-10, 10].
The names follow verl's `kl_penalty`: there "k3" IS the clamped ``low_var_kl``, so here too;
Schulman's k3 without the clamps is ``k3_unclamped``.
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from coop_jax.registry import Registry

KLFn = Callable[[jax.Array, jax.Array], jax.Array]


def k1(logp: jax.Array, ref_logp: jax.Array) -> jax.Array:
    """log r."""
    return logp - ref_logp


def k2(logp: jax.Array, ref_logp: jax.Array) -> jax.Array:
    """1/2 (log r)^2."""
    return 0.5 * jnp.square(logp - ref_logp)


def k3_unclamped(logp: jax.Array, ref_logp: jax.Array) -> jax.Array:
    """exp(-log r) - 1 + log r, unclamped (Schulman's k3)."""
    log_r = logp - ref_logp
    return jnp.exp(-log_r) - 1.0 + log_r


def low_var_kl(logp: jax.Array, ref_logp: jax.Array) -> jax.Array:
    """k3 with verl's clamps: log r in [-20, 20], result in [-10, 10]."""
    log_r = jnp.clip(logp - ref_logp, -20.0, 20.0)
    return jnp.clip(jnp.exp(-log_r) - 1.0 + log_r, -10.0, 10.0)


KL_ESTIMATORS: Registry[KLFn] = Registry(
    "rl.kl_estimator", {"k1": k1, "k2": k2, "k3_unclamped": k3_unclamped, "low_var_kl": low_var_kl})
KL_ESTIMATORS.register("k3", low_var_kl, doc="verl's name for low_var_kl (the clamped k3)")


def kl_penalty(name: str, logp: jax.Array, ref_logp: jax.Array) -> jax.Array:
    """Per-token KL estimate ``name`` for same-shaped log-prob arrays."""
    fn = KL_ESTIMATORS.lookup(name, "kl_estimator")
    if jnp.shape(logp) != jnp.shape(ref_logp):
        raise ValueError(f"logp shape {jnp.shape(logp)} != ref_logp shape {jnp.shape(ref_logp)}")
    return fn(logp, ref_logp)


def fold_kl_into_rewards(
    rewards: jax.Array, kl: jax.Array, mask: jax.Array, coef: float
) -> jax.Array:
    """KL-in-the-reward mode: reward ``[B]`` minus ``coef * sum_t kl_t`` over valid tokens.

    ``mask`` may be bool or float weights; masked positions are ignored even if ``kl`` is NaN there.
    """
    rewards, kl, mask = jnp.asarray(rewards), jnp.asarray(kl), jnp.asarray(mask)
    if kl.ndim != 2 or mask.shape != kl.shape:
        raise ValueError(f"kl and mask must both be [B, T], got {kl.shape} and {mask.shape}")
    if rewards.shape != kl.shape[:1]:
        raise ValueError(f"rewards must be [B]={kl.shape[:1]}, got {rewards.shape}")
    m = mask.astype(jnp.float32)
    kl_sum = jnp.sum(jnp.where(m > 0, kl * m, 0.0), axis=-1)
    return rewards - coef * kl_sum
