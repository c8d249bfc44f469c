"""Pallas Triton (GPU) kernels (also run on CPU in interpret mode).

Triton tensors need power-of-two sizes, so every in-kernel tile is [bn, bd] x [bd, bv] with the
hidden size walked in ``bd`` chunks and masked loads at the edges (D and V need not be powers of
two). Design:
  * forward: grid (row blocks, vocab splits); each program loops over ``tiles_per_program``
    vocab tiles keeping (m, s, t, target logit) in registers; splits are merged in XLA;
  * backward: grid (row blocks, vocab tiles); each program recomputes its logits tile once and
    atomically adds dx @ W^T into a padded f32 dh and h^T @ dx into a padded f32 dW (the
    cut-cross-entropy scheme); the accumulators are zero inputs aliased to the outputs;
  * sampler: grid (row blocks, vocab tiles), one set of partials per program, merged in XLA.
As in ``pallas_tpu``, a kernel may see one vocabulary shard: ``offsets`` int32[2] holds the
global index of its first row and column; only local columns below ``local_valid`` whose global
index is below ``valid_vocab`` (both static) are loaded and computed; the rest are absent (their
dW stays at the zero the accumulator starts from).
f32 matmuls use Triton's default TF32 precision, as XLA does on GPU. Untested on GPU hardware:
only interpret mode runs in CI.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from coop_jax.kernels import _common
from coop_jax.kernels import rng

DEFAULT_ROW_TILE = 64
DEFAULT_VOCAB_TILE = 128
DEFAULT_SAMPLE_ROW_TILE = 16
DEFAULT_SAMPLE_VOCAB_TILE = 256  # wider tiles: fewer per-tile top-k candidates to merge
DIM_TILE = 64
TILES_PER_PROGRAM = 8


def _pow2(name: str, value: int) -> None:
    if not isinstance(value, int) or value < 16 or value & (value - 1):
        raise ValueError(
            f"{name} must be a power of two >= 16 for the Triton kernels, got {value!r}")


class _Geo:
    """Static tiling of an [n, dim] x [dim, vocab] problem using the first ``valid`` local
    columns of a vocabulary whose global ids stop at ``total``."""

    def __init__(self, n: int, dim: int, vocab: int, valid: int, total: int, row_tile: int,
                 vocab_tile: int):
        _pow2("row_tile", row_tile)
        _pow2("vocab_tile", vocab_tile)
        self.n, self.dim, self.vocab, self.valid, self.total = n, dim, vocab, valid, total
        self.bn = min(row_tile, max(16, pl.next_power_of_2(n)))
        self.bv = min(vocab_tile, max(16, pl.next_power_of_2(valid)))
        self.bd = min(DIM_TILE, max(16, pl.next_power_of_2(dim)))
        self.n_pad = _common.round_up(n, self.bn)
        self.d_pad = _common.round_up(dim, self.bd)
        self.tiles = _common.cdiv(valid, self.bv)  # tiles that are computed
        self.v_pad = _common.round_up(vocab, self.bv)  # block width covering all of unembed


def _pad_rows(x: jax.Array, rows: int, value=0) -> jax.Array:
    return jnp.pad(x, [(0, rows - x.shape[0])] + [(0, 0)] * (x.ndim - 1), constant_values=value)


def _params(num_warps: int = 4) -> plgpu.CompilerParams:
    return plgpu.CompilerParams(num_warps=num_warps, num_stages=2)


def _columns(off_ref, col0, g: _Geo) -> tuple[jax.Array, jax.Array]:
    """Global ids [bv] of local columns [col0, col0 + bv) and the mask of those that exist."""
    local = col0 + jnp.arange(g.bv, dtype=jnp.int32)
    cols = off_ref[1] + local
    return cols, (local < g.valid) & (cols < g.total)


def _logits_tile(h_ref, w_ref, off_ref, row0, col0, g: _Geo, bn: int
                 ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """f32 [bn, bv] logits of local rows [row0, row0 + bn) and columns [col0, col0 + bv), with
    the global column ids and the column mask broadcast to [bn, bv]."""
    cols, col_ok = _columns(off_ref, col0, g)

    def body(k, acc):
        dk = k * g.bd + jnp.arange(g.bd, dtype=jnp.int32)
        d_ok = dk < g.dim
        h = plgpu.load(h_ref.at[pl.ds(row0, bn), pl.ds(k * g.bd, g.bd)],
                       mask=d_ok[None, :], other=0.0)
        w = plgpu.load(w_ref.at[pl.ds(k * g.bd, g.bd), pl.ds(col0, g.bv)],
                       mask=d_ok[:, None] & col_ok[None, :], other=0.0)
        return acc + jnp.dot(h, w, preferred_element_type=jnp.float32)

    acc = lax.fori_loop(0, g.d_pad // g.bd, body, jnp.zeros((bn, g.bv), jnp.float32))
    return (acc, jnp.broadcast_to(cols[None, :], (bn, g.bv)),
            jnp.broadcast_to(col_ok[None, :], (bn, g.bv)))


def _full(shape) -> pl.BlockSpec:
    return pl.BlockSpec(shape, lambda *_: (0,) * len(shape))


# ----------------------------------------------------------------------------- log-probs

def _fwd_kernel(temp_ref, off_ref, h_ref, w_ref, tgt_ref, m_ref, s_ref, t_ref, zt_ref, *,
                g: _Geo):
    i, sp = pl.program_id(0), pl.program_id(1)
    temp = temp_ref[0]
    tgt = tgt_ref[...][:, None]
    lo = sp * TILES_PER_PROGRAM
    hi = jnp.minimum(lo + TILES_PER_PROGRAM, g.tiles)

    def body(jt, carry):
        m, s, t, zt = carry
        x, cols, valid = _logits_tile(h_ref, w_ref, off_ref, i * g.bn, jt * g.bv, g, g.bn)
        z = x / temp
        m, s, t = _common.update_stats(m, s, t, z, valid)
        zt = zt + jnp.sum(jnp.where(valid & (cols == tgt), z, 0.0), axis=1, keepdims=True)
        return m, s, t, zt

    init = (*_common.init_stats(g.bn), jnp.zeros((g.bn, 1), jnp.float32))
    outs = lax.fori_loop(lo, hi, body, init)
    for ref, val in zip((m_ref, s_ref, t_ref, zt_ref), outs):
        ref[...] = jnp.squeeze(val, 1)


def logprobs_stats(hidden: jax.Array, unembed: jax.Array, targets: jax.Array,
                   temperature: jax.Array, offsets: jax.Array, *, row_tile: int | None,
                   vocab_tile: int | None, interpret, local_valid: int, valid_vocab: int
                   ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Same contract as ``pallas_tpu.logprobs_stats``."""
    n, dim = hidden.shape
    g = _Geo(n, dim, unembed.shape[1], local_valid, valid_vocab, row_tile or DEFAULT_ROW_TILE,
             vocab_tile or DEFAULT_VOCAB_TILE)
    splits = _common.cdiv(g.tiles, TILES_PER_PROGRAM)
    part = pl.BlockSpec((None, g.bn), lambda i, sp: (sp, i))
    m, s, t, zt = pl.pallas_call(
        functools.partial(_fwd_kernel, g=g),
        grid=(g.n_pad // g.bn, splits),
        in_specs=[_full((1,)), _full((2,)), _full((g.n_pad, g.d_pad)), _full((g.d_pad, g.v_pad)),
                  pl.BlockSpec((g.bn,), lambda i, sp: (i,))],
        out_specs=[part] * 4,
        out_shape=[jax.ShapeDtypeStruct((splits, g.n_pad), jnp.float32)] * 4,
        compiler_params=_params(),
        interpret=interpret,
        name="fused_logprobs_fwd_triton",
    )(temperature.reshape(1), offsets, _pad_rows(hidden, g.n_pad), unembed,
      _pad_rows(targets, g.n_pad, -1))
    m, s, t = _common.merge_stats(m, s, t, axis=0)
    return m[:n], s[:n], t[:n], jnp.sum(zt, axis=0)[:n]


def _bwd_kernel(temp_ref, off_ref, h_ref, w_ref, tgt_ref, lse_ref, ez_ref, glp_ref, gent_ref,
                dh_in, dw_in, dh_ref, dw_ref, *, g: _Geo):
    del dh_in, dw_in  # aliased to dh_ref / dw_ref
    i, j = pl.program_id(0), pl.program_id(1)
    temp = temp_ref[0]
    row0, col0 = i * g.bn, j * g.bv
    x, cols, valid = _logits_tile(h_ref, w_ref, off_ref, row0, col0, g, g.bn)
    col = lambda r: r[...][:, None]
    dx = _common.dlogits(x / temp, valid, cols == col(tgt_ref), col(lse_ref),
                         col(ez_ref), col(glp_ref), col(gent_ref), temp)
    dx = dx.astype(w_ref.dtype)
    _, col_ok = _columns(off_ref, col0, g)

    def body(k, carry):
        dk = k * g.bd + jnp.arange(g.bd, dtype=jnp.int32)
        d_ok = dk < g.dim
        h = plgpu.load(h_ref.at[pl.ds(row0, g.bn), pl.ds(k * g.bd, g.bd)],
                       mask=d_ok[None, :], other=0.0)
        w = plgpu.load(w_ref.at[pl.ds(k * g.bd, g.bd), pl.ds(col0, g.bv)],
                       mask=d_ok[:, None] & col_ok[None, :], other=0.0)
        plgpu.atomic_add(dh_ref, (pl.ds(row0, g.bn), pl.ds(k * g.bd, g.bd)),
                         jnp.dot(dx, w.T, preferred_element_type=jnp.float32))
        plgpu.atomic_add(dw_ref, (pl.ds(k * g.bd, g.bd), pl.ds(col0, g.bv)),
                         jnp.dot(h.T, dx, preferred_element_type=jnp.float32))
        return carry

    lax.fori_loop(0, g.d_pad // g.bd, body, 0)


def logprobs_bwd(hidden: jax.Array, unembed: jax.Array, targets: jax.Array,
                 temperature: jax.Array, offsets: jax.Array, lse: jax.Array, ez: jax.Array,
                 g_lp: jax.Array, g_ent: jax.Array, *, row_tile: int | None,
                 vocab_tile: int | None, interpret, local_valid: int, valid_vocab: int
                 ) -> tuple[jax.Array, jax.Array]:
    n, dim = hidden.shape
    g = _Geo(n, dim, unembed.shape[1], local_valid, valid_vocab, row_tile or DEFAULT_ROW_TILE,
             vocab_tile or DEFAULT_VOCAB_TILE)
    row = pl.BlockSpec((g.bn,), lambda i, j: (i,))
    pad = functools.partial(_pad_rows, rows=g.n_pad)
    dh, dw = pl.pallas_call(
        functools.partial(_bwd_kernel, g=g),
        grid=(g.n_pad // g.bn, g.tiles),
        in_specs=[_full((1,)), _full((2,)), _full((g.n_pad, g.d_pad)), _full((g.d_pad, g.v_pad))]
        + [row] * 5 + [_full((g.n_pad, g.d_pad)), _full((g.d_pad, g.v_pad))],
        out_specs=[_full((g.n_pad, g.d_pad)), _full((g.d_pad, g.v_pad))],
        out_shape=[jax.ShapeDtypeStruct((g.n_pad, g.d_pad), jnp.float32),
                   jax.ShapeDtypeStruct((g.d_pad, g.v_pad), jnp.float32)],
        input_output_aliases={9: 0, 10: 1},
        compiler_params=_params(num_warps=8),  # dx tile + two partial products live at once
        interpret=interpret,
        name="fused_logprobs_bwd_triton",
    )(temperature.reshape(1), offsets, pad(hidden), unembed, pad(targets, value=-1), pad(lse),
      pad(ez),
      pad(g_lp), pad(g_ent), jnp.zeros((g.n_pad, g.d_pad), jnp.float32),
      jnp.zeros((g.d_pad, g.v_pad), jnp.float32))
    return dh[:n, :dim].astype(hidden.dtype), dw[:dim, :g.vocab].astype(unembed.dtype)


# ----------------------------------------------------------------------------- sampler

def _sample_kernel(key_ref, off_ref, temp_ref, h_ref, w_ref, m_ref, s_ref, t_ref, bs_ref,
                   bi_ref, bz_ref, *cand_refs, g: _Geo, num_cand: int):
    i, j = pl.program_id(0), pl.program_id(1)
    temp = temp_ref[...][:, None]
    greedy = temp <= _common.GREEDY_TEMPERATURE
    x, cols, valid = _logits_tile(h_ref, w_ref, off_ref, i * g.bn, j * g.bv, g, g.bn)
    z = x / jnp.where(greedy, 1.0, temp)
    rows = off_ref[0] + i * g.bn + jnp.arange(g.bn, dtype=jnp.int32)[:, None]
    m, s, t = _common.update_stats(*_common.init_stats(g.bn), z, valid)
    noise = rng.gumbel_at(key_ref[0], key_ref[1], rows, cols, g.total)
    score = jnp.where(valid, jnp.where(greedy, z, noise + z), -jnp.inf)
    best = jnp.max(score, axis=1, keepdims=True)
    pos = jnp.min(jnp.where(score == best, cols, _common.INT_MAX), axis=1, keepdims=True)
    bz = jnp.sum(jnp.where(cols == pos, z, 0.0), axis=1, keepdims=True)
    for ref, val in zip((m_ref, s_ref, t_ref, bs_ref, bi_ref, bz_ref), (m, s, t, best, pos, bz)):
        ref[...] = jnp.squeeze(val, 1)
    if num_cand:
        cz_ref, ci_ref = cand_refs
        width = cz_ref.shape[-1]  # power of two >= num_cand; extra lanes hold -inf
        lane = jnp.arange(width, dtype=jnp.int32)[None, :]
        cz, ci = _common.tile_candidates(jnp.where(valid, z, -jnp.inf), cols, lane, num_cand)
        cz_ref[...], ci_ref[...] = cz, ci


def sample_partials(words: jax.Array, hidden: jax.Array, unembed: jax.Array,
                    temperature: jax.Array, offsets: jax.Array, num_cand: int, *,
                    row_tile: int | None, vocab_tile: int | None, interpret, local_valid: int,
                    valid_vocab: int):
    """Same contract as ``pallas_tpu.sample_partials``."""
    b, dim = hidden.shape
    g = _Geo(b, dim, unembed.shape[1], local_valid, valid_vocab,
             row_tile or DEFAULT_SAMPLE_ROW_TILE, vocab_tile or DEFAULT_SAMPLE_VOCAB_TILE)
    c = min(num_cand, g.bv)
    part = pl.BlockSpec((None, g.bn), lambda i, j: (j, i))
    f32 = jax.ShapeDtypeStruct((g.tiles, g.n_pad), jnp.float32)
    out_specs = [part] * 6
    out_shape = [f32] * 4 + [jax.ShapeDtypeStruct((g.tiles, g.n_pad), jnp.int32), f32]
    if c:
        width = max(16, pl.next_power_of_2(c))
        out_specs += [pl.BlockSpec((None, g.bn, width), lambda i, j: (j, i, 0))] * 2
        out_shape += [jax.ShapeDtypeStruct((g.tiles, g.n_pad, width), jnp.float32),
                      jax.ShapeDtypeStruct((g.tiles, g.n_pad, width), jnp.int32)]
    out = pl.pallas_call(
        functools.partial(_sample_kernel, g=g, num_cand=c),
        grid=(g.n_pad // g.bn, g.tiles),
        in_specs=[_full((2,)), _full((2,)), pl.BlockSpec((g.bn,), lambda i, j: (i,)),
                  _full((g.n_pad, g.d_pad)), _full((g.d_pad, g.v_pad))],
        out_specs=out_specs,
        out_shape=out_shape,
        compiler_params=_params(),
        interpret=interpret,
        name="fused_sample_triton",
    )(words, offsets, _pad_rows(temperature, g.n_pad, 1.0), _pad_rows(hidden, g.n_pad), unembed)
    m, s, t, best_s, best_i, best_z = (o[:, :b, None] for o in out[:6])
    cands = (out[6][:, :b, :c], out[7][:, :b, :c]) if c else None
    return (m, s, t), best_s, best_i, best_z, cands
