"""Streaming XLA implementations: ``lax.scan`` over vocab tiles, never an [N, V] array.

The last tile is clamped to ``[V - tile, V)`` instead of padding the unembedding (a copy of
[D, V]); columns it shares with the previous tile are masked out via ``cols >= j * tile``.
``vocab`` is the number of usable columns (``valid_vocab``): the scan only reads columns below
it from the full ``unembed`` (one tile covering them all reads the whole matrix in place and masks
the rest), and dW is 0 beyond it.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from coop_jax.kernels import _common
from coop_jax.kernels import filtering
from coop_jax.kernels import rng

_NT = (((1,), (1,)), ((), ()))  # a @ b.T
_TN = (((0,), (0,)), ((), ()))  # a.T @ b


def _geometry(vocab: int, tile: int, width: int) -> tuple[int, int]:
    """(tile, number of tiles). A tile that covers the usable columns is the whole matrix: one
    step reads ``unembed`` in place, where slicing [D, vocab] out of [D, width] is a copy."""
    if tile >= vocab:
        return width, 1
    return tile, _common.cdiv(vocab, tile)


def _tile(unembed: jax.Array, j: jax.Array, tile: int, vocab: int):
    if tile == unembed.shape[1]:  # the whole matrix; columns >= vocab (padding) are masked
        cols = jnp.arange(tile, dtype=jnp.int32)[None, :]
        return unembed, cols, cols < vocab, jnp.int32(0)
    start = jnp.minimum(j * tile, vocab - tile)
    w_t = lax.dynamic_slice_in_dim(unembed, start, tile, axis=1)
    cols = start + jnp.arange(tile, dtype=jnp.int32)[None, :]
    return w_t, cols, cols >= j * tile, start


def _rows(hidden: jax.Array, fill: float, cols: int = 1, dtype=jnp.float32) -> jax.Array:
    """[N, cols] constant carry sharded like ``hidden``'s rows (explicit-sharding safe)."""
    return jnp.broadcast_to(jnp.full_like(hidden[:, :1], fill, dtype=dtype),
                            (hidden.shape[0], cols))


def _cast_inputs(hidden: jax.Array, unembed: jax.Array) -> tuple[jax.Array, jax.Array]:
    dtype = jnp.promote_types(hidden.dtype, unembed.dtype)
    return hidden.astype(dtype), unembed.astype(dtype)


def logprobs_fwd(hidden: jax.Array, unembed: jax.Array, targets: jax.Array,
                 temperature: jax.Array, tile: int, vocab: int
                 ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Returns (logp, entropy, lse, E[z]), each [N] float32."""
    hidden, unembed = _cast_inputs(hidden, unembed)
    tile, num_tiles = _geometry(vocab, tile, unembed.shape[1])
    tgt = targets[:, None]

    def step(carry, j):
        m, s, t, zt = carry
        w_t, cols, valid, _ = _tile(unembed, j, tile, vocab)
        z = jnp.dot(hidden, w_t, preferred_element_type=jnp.float32) / temperature
        m, s, t = _common.update_stats(m, s, t, z, valid)
        zt = zt + jnp.sum(jnp.where(valid & (cols == tgt), z, 0.0), axis=1, keepdims=True)
        return (m, s, t, zt), None

    init = (_rows(hidden, _common.M_INIT), _rows(hidden, 0.0), _rows(hidden, 0.0),
            _rows(hidden, 0.0))
    (m, s, t, zt), _ = lax.scan(step, init, jnp.arange(num_tiles, dtype=jnp.int32))
    lse, ez, ent = _common.finish_stats(m, s, t)
    row_ok = ((targets >= 0) & (targets < vocab))[:, None]
    logp = jnp.where(row_ok, zt - lse, 0.0)
    ent = jnp.where(row_ok, ent, 0.0)
    return logp[:, 0], ent[:, 0], lse[:, 0], ez[:, 0]


def logprobs_bwd(hidden: jax.Array, unembed: jax.Array, targets: jax.Array,
                 temperature: jax.Array, lse: jax.Array, ez: jax.Array, g_lp: jax.Array,
                 g_ent: jax.Array, tile: int, vocab: int) -> tuple[jax.Array, jax.Array]:
    """(dh, dW) with dW written tile by tile into the scan carry (peak O(D V + N tile))."""
    h_dtype, w_dtype = hidden.dtype, unembed.dtype
    hidden, unembed = _cast_inputs(hidden, unembed)
    tile, num_tiles = _geometry(vocab, tile, unembed.shape[1])
    overlap = num_tiles > 1 and vocab % tile != 0
    tgt, lse, ez = targets[:, None], lse[:, None], ez[:, None]
    g_lp, g_ent = g_lp[:, None], g_ent[:, None]

    def step(carry, j):
        dh, dw = carry
        w_t, cols, valid, start = _tile(unembed, j, tile, vocab)
        z = jnp.dot(hidden, w_t, preferred_element_type=jnp.float32) / temperature
        dx = _common.dlogits(z, valid, cols == tgt, lse, ez, g_lp, g_ent, temperature)
        dx = dx.astype(hidden.dtype)
        dh = dh + lax.dot_general(dx, w_t, _NT, preferred_element_type=jnp.float32)
        dw_t = lax.dot_general(hidden, dx, _TN, preferred_element_type=jnp.float32,
                               out_sharding=jax.typeof(w_t).sharding)  # sums over rows
        dw_t = dw_t.astype(w_dtype)
        if overlap:  # the clamped last tile re-covers finished columns, where dw_t is 0
            dw_t = dw_t + lax.dynamic_slice_in_dim(dw, start, tile, axis=1)
        return (dh, lax.dynamic_update_slice_in_dim(dw, dw_t, start, axis=1)), None

    init = (jnp.zeros_like(hidden, dtype=jnp.float32), jnp.zeros_like(unembed, dtype=w_dtype))
    (dh, dw), _ = lax.scan(step, init, jnp.arange(num_tiles, dtype=jnp.int32))
    return dh.astype(h_dtype), dw


def sample(words: jax.Array, hidden: jax.Array, unembed: jax.Array, temperature: jax.Array,
           num_cand: int, tile: int, vocab: int):
    """One streaming pass: online stats, Gumbel-max and (if num_cand) a running top-C list.

    Returns ((m, s, t), best_idx, best_z, cand_z, cand_i) with [B, 1] stats/best values.
    """
    hidden, unembed = _cast_inputs(hidden, unembed)
    b = hidden.shape[0]
    tile, num_tiles = _geometry(vocab, tile, unembed.shape[1])
    greedy = (temperature <= _common.GREEDY_TEMPERATURE)[:, None]
    t_eff = jnp.where(greedy, 1.0, temperature[:, None])
    k0, k1, rows = rng.draw_coords(words, b)
    per_tile = min(num_cand, tile)

    def step(carry, j):
        (m, s, t), best_s, best_i, best_z, cand_z, cand_i = carry
        w_t, cols, valid, start = _tile(unembed, j, tile, vocab)
        z = jnp.dot(hidden, w_t, preferred_element_type=jnp.float32) / t_eff
        m, s, t = _common.update_stats(m, s, t, z, valid)
        noise = rng.gumbel_at(k0, k1, rows, cols, vocab)
        score = jnp.where(valid, jnp.where(greedy, z, noise + z), -jnp.inf)
        pos = jnp.argmax(score, axis=1)[:, None]
        tile_best = jnp.take_along_axis(score, pos, axis=1)
        better = tile_best > best_s
        best_s = jnp.where(better, tile_best, best_s)
        best_i = jnp.where(better, start + pos.astype(jnp.int32), best_i)
        best_z = jnp.where(better, jnp.take_along_axis(z, pos, axis=1), best_z)
        if num_cand:
            tv, ti = lax.top_k(jnp.where(valid, z, -jnp.inf), per_tile)
            cand_z, cand_i = filtering.merge_top(cand_z, cand_i, tv, start + ti, num_cand)
        return ((m, s, t), best_s, best_i, best_z, cand_z, cand_i), None

    stats = (_rows(hidden, _common.M_INIT), _rows(hidden, 0.0), _rows(hidden, 0.0))
    init = (stats, _rows(hidden, -jnp.inf), _rows(hidden, 0, dtype=jnp.int32), _rows(hidden, 0.0),
            _rows(hidden, -jnp.inf, num_cand), _rows(hidden, 0, num_cand, jnp.int32))
    (stats, _, best_i, best_z, cand_z, cand_i), _ = lax.scan(
        step, init, jnp.arange(num_tiles, dtype=jnp.int32))
    return stats, best_i, best_z, cand_z, cand_i
