"""Materialised [rows, vocab] reference implementations (tests and tiny models only)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from coop_jax.kernels import _common
from coop_jax.kernels import filtering


def logits(hidden: jax.Array, unembed: jax.Array) -> jax.Array:
    """[N, V] float32 logits with f32 accumulation."""
    return jnp.dot(hidden, unembed, preferred_element_type=jnp.float32)


def logprobs(hidden: jax.Array, unembed: jax.Array, targets: jax.Array,
             temperature: jax.Array, vocab: int) -> tuple[jax.Array, jax.Array]:
    """log p(target) and entropy of softmax(hidden @ unembed[:, :vocab] / T); masked rows: 0, 0."""
    z = logits(hidden, unembed)[:, :vocab] / temperature
    logp_all = jax.nn.log_softmax(z, axis=-1)
    valid = (targets >= 0) & (targets < vocab)
    safe_t = jnp.where(valid, targets, 0)
    logp = jnp.take_along_axis(logp_all, safe_t[:, None], axis=-1)[:, 0]
    entropy = -jnp.sum(jnp.exp(logp_all) * logp_all, axis=-1)
    zero = jnp.zeros_like(logp)
    return jnp.where(valid, logp, zero), jnp.where(valid, entropy, zero)


def sample(key: jax.Array, hidden: jax.Array, unembed: jax.Array, temperature: jax.Array,
           top_k: int, top_p: float, max_candidates: int, vocab: int
           ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Materialised sampler with the same semantics as ``fused_sample`` (see filtering.py)."""
    x = logits(hidden, unembed)[:, :vocab]
    greedy = temperature <= _common.GREEDY_TEMPERATURE
    z = x / jnp.where(greedy, 1.0, temperature)[:, None]
    lse = jax.nn.logsumexp(z, axis=-1)
    logp_all = z - lse[:, None]
    entropy = -jnp.sum(jnp.exp(logp_all) * logp_all, axis=-1)
    if top_k > 0 or top_p < 1.0:
        num_cand = filtering.num_candidates(top_k, top_p, max_candidates, x.shape[1])
        cand_z, cand_i = lax.top_k(z, num_cand)
        keep = filtering.keep_mask(cand_z, lse, top_k, top_p)
        allowed = jnp.zeros_like(z, dtype=bool).at[jnp.arange(z.shape[0])[:, None], cand_i].set(
            keep, out_sharding=jax.typeof(z).sharding)
        z_sample = jnp.where(allowed, z, -jnp.inf)
    else:
        z_sample = z
    sampled = jax.random.categorical(key, z_sample, axis=-1)
    tokens = jnp.where(greedy, jnp.argmax(x, axis=-1), sampled).astype(jnp.int32)
    logp = jnp.take_along_axis(logp_all, tokens[:, None], axis=-1)[:, 0]
    zero = jnp.zeros_like(logp)
    return tokens, jnp.where(greedy, zero, logp), jnp.where(greedy, zero, entropy)
