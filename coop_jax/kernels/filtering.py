"""Top-k / top-p filtering over a per-row candidate list, shared by every sampler impl.

Semantics (identical for reference, xla and pallas):
  * candidates are the ``C`` largest temperature-scaled logits of a row, sorted descending, ties
    by lower vocab index; ``C = top_k`` when top-k is on, else ``min(max_candidates, V)``;
  * top-k keeps the first ``top_k`` candidates;
  * top-p then keeps the shortest prefix whose probability reaches ``top_p``: probabilities are
    renormalised over the top-k survivors when top-k is on, else they are the full-vocabulary
    softmax. Without top-k the nucleus is truncated to the ``max_candidates`` most likely tokens;
  * the token is the Gumbel-max over the survivors with the same noise ``jax.random.categorical``
    would add at those columns.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from coop_jax.kernels import rng


def num_candidates(top_k: int, top_p: float, max_candidates: int, vocab: int) -> int:
    """Validate the filter arguments and return the candidate count C."""
    if not isinstance(top_k, int) or isinstance(top_k, bool) or not 0 <= top_k <= vocab:
        raise ValueError(
            f"top_k must be an int in [0, vocab={vocab}] (0 = off), got {top_k!r}")
    if not isinstance(top_p, (int, float)) or not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be a Python float in (0, 1] (1.0 = off), got {top_p!r}")
    if not isinstance(max_candidates, int) or max_candidates < 1:
        raise ValueError(f"max_candidates must be a positive int, got {max_candidates!r}")
    if top_k > 0:
        return top_k
    return min(max_candidates, vocab)


def keep_mask(cand_z: jax.Array, lse: jax.Array, top_k: int, top_p: float) -> jax.Array:
    """Boolean [B, C] survivors among descending candidates ``cand_z``; ``lse`` is over the vocab."""
    keep = cand_z > -jnp.inf
    if top_p < 1.0:
        if top_k > 0:
            norm = jax.nn.logsumexp(jnp.where(keep, cand_z, -jnp.inf), axis=-1, keepdims=True)
        else:
            norm = lse[:, None]
        probs = jnp.where(keep, jnp.exp(cand_z - norm), 0.0)
        before = jnp.cumsum(probs, axis=-1) - probs
        keep = keep & (before < top_p)
    return keep


def pick(words: jax.Array, cand_z: jax.Array, cand_i: jax.Array, keep: jax.Array, vocab: int
         ) -> tuple[jax.Array, jax.Array]:
    """Gumbel-max over the kept candidates; returns (token, its scaled logit)."""
    k0, k1, rows = rng.draw_coords(words, cand_z.shape[0])
    noise = rng.gumbel_at(k0, k1, rows, cand_i, vocab)
    score = jnp.where(keep, cand_z + noise, -jnp.inf)
    pos = jnp.argmax(score, axis=-1)[:, None]
    token = jnp.take_along_axis(cand_i, pos, axis=-1)[:, 0]
    return token.astype(jnp.int32), jnp.take_along_axis(cand_z, pos, axis=-1)[:, 0]


def merge_top(vals: jax.Array, idx: jax.Array, new_vals: jax.Array, new_idx: jax.Array, k: int
              ) -> tuple[jax.Array, jax.Array]:
    """Keep the k largest of two candidate lists; earlier entries win ties (lower vocab index)."""
    all_v = jnp.concatenate([vals, new_vals], axis=-1)
    all_i = jnp.concatenate([idx, new_idx], axis=-1)
    top_v, pos = jax.lax.top_k(all_v, k)
    return top_v, jnp.take_along_axis(all_i, pos, axis=-1)
