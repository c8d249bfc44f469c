"""Per-token KL estimators between the policy and a reference (Schulman's k1/k2/k3).

With ``log r = logp - ref_logp`` (r = pi / pi_ref, tokens sampled from pi):
k1 = log r, k2 = 1/2 (log r)^2, k3 = exp(-log r) - 1 + log r (>= 0, unbiased, low variance).
``low_var_kl`` is k3 as verl computes it: log r clamped to [-20, 20], result clamped to [-10, 10].
The names follow verl's `kl_penalty`: there "k3" IS the clamped ``low_var_kl``, so here too;
Schulman's k3 without the clamps is ``k3_unclamped``. ``abs`` is |log r|.

``k1+`` / ``k3+`` (verl): the value of k1 / k3 with the gradient of k2. The expected value of k1
and k3 is the KL, but their expected gradient is not the KL's gradient; k2's is (Schulman 2020),
so a straight-through estimator takes k2's gradient under k1's or k3's value.
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


def abs_kl(logp: jax.Array, ref_logp: jax.Array) -> jax.Array:
    """|log r|."""
    return jnp.abs(logp - ref_logp)


def straight_through(value_fn: KLFn) -> KLFn:
    """``value_fn``'s value with k2's gradient: k2 - sg(k2) + sg(value)."""
    def estimator(logp: jax.Array, ref_logp: jax.Array) -> jax.Array:
        grad_part = k2(logp, ref_logp)
        sg = jax.lax.stop_gradient
        return grad_part - sg(grad_part) + sg(value_fn(logp, ref_logp))
    estimator.__doc__ = f"the value of {value_fn.__name__}, the gradient of k2 (straight-through)"
    return estimator


KL_ESTIMATORS: Registry[KLFn] = Registry(
    "rl.kl_estimator", {"k1": k1, "k2": k2, "k3_unclamped": k3_unclamped, "low_var_kl": low_var_kl,
                        "abs": abs_kl})
KL_ESTIMATORS.register("k3", low_var_kl, doc="verl's name for low_var_kl (the clamped k3)")
KL_ESTIMATORS.register("k1+", straight_through(k1))
KL_ESTIMATORS.register("k3+", straight_through(low_var_kl))


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


# --- the KL-in-reward coefficient, step to step -----------------------------------------------
# fn(coef, current_kl, n_steps, target, horizon) -> the next step's coefficient

def fixed_kl_coef(coef, current_kl, n_steps, target, horizon):
    """The coefficient stays `rl.kl_coef`."""
    del current_kl, n_steps, target, horizon
    return coef


def adaptive_kl_coef(coef, current_kl, n_steps, target, horizon):
    """Ziegler et al. 2019's proportional controller (verl's AdaptiveKLController):
    coef * (1 + clip(KL / target - 1, -0.2, 0.2) * n_steps / horizon)."""
    error = jnp.clip(current_kl / target - 1.0, -0.2, 0.2)
    return coef * (1.0 + error * n_steps / horizon)


KL_CONTROLLERS: Registry[Callable] = Registry(
    "rl.kl_controller", {"fixed": fixed_kl_coef, "adaptive": adaptive_kl_coef})


def reward_kl(kl: jax.Array, mask: jax.Array) -> jax.Array:
    """The KL a controller reads: each rollout's token mean of ``kl [B, T]`` over ``mask``, averaged
    over the rollouts (verl's ``current_kl``)."""
    m = jnp.asarray(mask).astype(jnp.float32)
    per_seq = jnp.sum(jnp.where(m > 0, kl * m, 0.0), axis=-1) / jnp.maximum(m.sum(-1), 1.0)
    return jnp.mean(per_seq)
