"""Pallas Mosaic-TPU kernels (also run on CPU in interpret mode).

Layout: row vectors travel as [rows, 1] f32 blocks; the grid is (row blocks, vocab tiles).
  * forward: vocab axis "arbitrary", online (m, s, t, target logit) in VMEM scratch;
  * dh: same grid, f32 [bn, D] accumulator over vocab tiles;
  * dW: grid (vocab tiles, row blocks), f32 [D, bv] accumulator over row blocks;
  * sampler: both axes "parallel", one set of partial results per (row block, vocab tile),
    merged in XLA (decode batches are small, so the vocab axis provides the parallelism).
The last vocab block may run past V; those columns are masked in-kernel (padded reads are
garbage, NaN under interpret mode) instead of padding the [D, V] unembedding. Each kernel may see
one shard of a vocabulary-sharded unembedding (see ``partition.py``): ``offsets`` (SMEM int32[2])
holds the global index of its first row and first column, ``local_valid`` (static) bounds the
local columns worth computing, and ``valid_vocab`` (static, global) marks columns at or beyond it
as absent. Vocab tiles wholly beyond ``local_valid`` are skipped (except by dW, which writes their
zero gradient). Rows are padded in the wrapper (cheap: [N, D]).

Tile sizes default to the largest that fit the chip's VMEM (``pltpu.get_tpu_info()``, read from
the mesh being compiled for) for the kernel and dtype; off TPU (interpret mode) the 16 MiB of the
smallest TensorCore is assumed. Untested on TPU hardware: interpret mode runs in CI, and
``benchmarks/tpu_compile.py`` compiles the kernels for v4 / v5e / v5p / v6e through libtpu.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from coop_jax.kernels import _common
from coop_jax.kernels import rng

FALLBACK_VMEM_BYTES = 16 * 2 ** 20  # per TensorCore on v4; assumed when not compiling for TPU
_ROW_TILES = (512, 256, 128, 64, 32, 16)
_VOCAB_TILES = (1024, 512, 256, 128)
# Mosaic unrolls vector code over a tile's vregs: [512, 2048] f32 tiles took minutes to compile on
# v5e for no gain in HBM traffic worth having, so a tile holds at most 512 x 512 elements.
_MAX_TILE_ELEMS = 512 * 512
_TILE_BUDGET = 0.6  # share of the VMEM limit for the estimated blocks; the rest is headroom
_NN = (((1,), (0,)), ((), ()))
_NT = (((1,), (1,)), ((), ()))
_TN = (((0,), (0,)), ((), ()))


def _dot(a: jax.Array, b: jax.Array, dims) -> jax.Array:
    return lax.dot_general(a, b, dims, preferred_element_type=jnp.float32)


def vmem_capacity() -> int:
    """VMEM bytes per TensorCore of the chip being compiled for (the abstract mesh's device kind,
    else the default device); ``FALLBACK_VMEM_BYTES`` off TPU."""
    try:
        return pltpu.get_tpu_info().vmem_capacity_bytes
    except ValueError:  # not a TPU device kind (CPU interpret mode)
        return FALLBACK_VMEM_BYTES


def vmem_limit(capacity: int) -> int:
    """Scoped VMEM limit: all of a 16 MiB core, 3/4 of larger ones (v5e/v6e 96, v5p 48 MiB)."""
    return min(capacity, max(FALLBACK_VMEM_BYTES, capacity * 3 // 4))


def _footprint(kernel: str, bn: int, bv: int, dim: int, itemsize: int) -> int:
    """Estimated VMEM bytes of one grid step: double-buffered blocks, scratch, f32 temporaries."""
    h, w, z = bn * dim * itemsize, dim * bv * itemsize, bn * bv * 4
    return {"fwd": 2 * h + 2 * w + 6 * z,
            "dh": 4 * h + 2 * w + bn * dim * 4 + 8 * z,  # h in, dh out, f32 accumulator
            "dw": 2 * h + 4 * w + dim * bv * 4 + 8 * z,  # W in, dW out, f32 accumulator
            "sample": 2 * h + 2 * w + 16 * z}[kernel]  # threefry keeps many [bn, bv] words live


def choose_tiles(kernel: str, rows: int, dim: int, dtype, capacity: int
                 ) -> tuple[int, int]:
    """(row tile, vocab tile) fitting the VMEM budget with the least HBM traffic: W is re-read
    once per row block and the hidden rows once per vocab tile, so traffic ~ 1/bn + 1/bv. Rows
    beyond the (16-rounded) row count buy nothing, so the row tile is capped there."""
    budget = _TILE_BUDGET * vmem_limit(capacity)
    itemsize = jnp.dtype(dtype).itemsize
    cap = _common.round_up(max(rows, 1), 16)
    fits = [(min(bn, cap), bv) for bn in _ROW_TILES for bv in _VOCAB_TILES
            if min(bn, cap) * bv <= _MAX_TILE_ELEMS
            and _footprint(kernel, min(bn, cap), bv, dim, itemsize) <= budget]
    if not fits:
        return _ROW_TILES[-1], _VOCAB_TILES[-1]  # the compiler reports what does not fit
    return min(fits, key=lambda t: (1 / t[0] + 1 / t[1], -t[1]))


def _tiles(kernel: str, rows: int, dim: int, dtype, row_tile: int | None,
           vocab_tile: int | None) -> tuple[int, int, int]:
    """(row tile, vocab tile, VMEM limit): explicit tiles win over the VMEM-derived ones."""
    capacity = vmem_capacity()
    auto_rows, auto_vocab = choose_tiles(kernel, rows, dim, dtype, capacity)
    return row_tile or auto_rows, vocab_tile or auto_vocab, vmem_limit(capacity)


def _geometry(rows: int, vocab: int, valid: int, row_tile: int, vocab_tile: int
              ) -> tuple[int, int, int, int]:
    """(row block, padded rows, vocab block, vocab tiles covering the first ``valid`` columns)."""
    _common.check_tile("row_tile", row_tile, 8)
    _common.check_tile("vocab_tile", vocab_tile, 128)
    bn = min(row_tile, _common.round_up(rows, 16))
    bv = vocab if vocab <= vocab_tile else vocab_tile  # block dim: 128-multiple or the full V
    return bn, _common.round_up(rows, bn), bv, _common.cdiv(valid, bv)


def _pad_rows(x: jax.Array, rows: int, value=0) -> jax.Array:
    return jnp.pad(x, [(0, rows - x.shape[0])] + [(0, 0)] * (x.ndim - 1), constant_values=value)


def _col(x: jax.Array, rows: int, value=0) -> jax.Array:
    return _pad_rows(x.reshape(-1, 1), rows, value)


_SMEM = pl.BlockSpec(memory_space=pltpu.SMEM)


def _params(vmem_bytes: int, *semantics: str) -> pltpu.CompilerParams:
    return pltpu.CompilerParams(dimension_semantics=semantics, vmem_limit_bytes=vmem_bytes)


def _columns(off_ref, j, bv: int, shape, local_valid: int, vocab: int
             ) -> tuple[jax.Array, jax.Array]:
    """Global column ids of vocab tile ``j`` and the mask of columns that exist."""
    local = j * bv + lax.broadcasted_iota(jnp.int32, shape, 1)
    cols = off_ref[1] + local
    return cols, (local < local_valid) & (cols < vocab)


# ----------------------------------------------------------------------------- log-probs

def _fwd_kernel(temp_ref, off_ref, h_ref, w_ref, tgt_ref, m_ref, s_ref, t_ref, zt_ref,
                *, local_valid, vocab, bv):
    j = pl.program_id(1)

    @pl.when(j == 0)
    def _init():
        m_ref[...] = jnp.full(m_ref.shape, _common.M_INIT, jnp.float32)
        s_ref[...] = jnp.zeros(s_ref.shape, jnp.float32)
        t_ref[...] = jnp.zeros(t_ref.shape, jnp.float32)
        zt_ref[...] = jnp.zeros(zt_ref.shape, jnp.float32)

    z = _dot(h_ref[...], w_ref[...], _NN) / temp_ref[0]
    cols, valid = _columns(off_ref, j, bv, z.shape, local_valid, vocab)
    m, s, t = _common.update_stats(m_ref[...], s_ref[...], t_ref[...], z, valid)
    m_ref[...], s_ref[...], t_ref[...] = m, s, t
    zt_ref[...] += jnp.sum(jnp.where(valid & (cols == tgt_ref[...]), z, 0.0), axis=1,
                           keepdims=True)


def logprobs_stats(hidden: jax.Array, unembed: jax.Array, targets: jax.Array,
                   temperature: jax.Array, offsets: jax.Array, *, row_tile: int | None,
                   vocab_tile: int | None, interpret, local_valid: int, valid_vocab: int
                   ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Online statistics (m, s, t, target logit), each [N] f32, over this shard's columns."""
    n, dim = hidden.shape
    row_tile, vocab_tile, vmem = _tiles("fwd", n, dim, hidden.dtype, row_tile, vocab_tile)
    bn, n_pad, bv, n_tiles = _geometry(n, unembed.shape[1], local_valid, row_tile, vocab_tile)
    row = pl.BlockSpec((bn, 1), lambda i, j: (i, 0))  # resident across j: the accumulators
    out = pl.pallas_call(
        functools.partial(_fwd_kernel, local_valid=local_valid, vocab=valid_vocab, bv=bv),
        grid=(n_pad // bn, n_tiles),
        in_specs=[_SMEM, _SMEM, pl.BlockSpec((bn, dim), lambda i, j: (i, 0)),
                  pl.BlockSpec((dim, bv), lambda i, j: (0, j)), row],
        out_specs=[row] * 4,
        out_shape=[jax.ShapeDtypeStruct((n_pad, 1), jnp.float32)] * 4,
        compiler_params=_params(vmem, "parallel", "arbitrary"),
        interpret=interpret,
        name="fused_logprobs_fwd",
    )(temperature.reshape(1), offsets, _pad_rows(hidden, n_pad), unembed,
      _col(targets, n_pad, -1))
    return tuple(o[:n, 0] for o in out)


def _tile_dx(temp_ref, off_ref, h_ref, w_ref, tgt_ref, lse_ref, ez_ref, glp_ref, gent_ref, j,
             bv, local_valid, vocab):
    """Recompute one logits tile and return (dx [bn, bv] f32, W tile with absent columns = 0)."""
    temp = temp_ref[0]
    w = w_ref[...]
    z = _dot(h_ref[...], w, _NN) / temp
    cols, valid = _columns(off_ref, j, bv, z.shape, local_valid, vocab)
    dx = _common.dlogits(z, valid, cols == tgt_ref[...], lse_ref[...], ez_ref[...],
                         glp_ref[...], gent_ref[...], temp)
    _, w_valid = _columns(off_ref, j, bv, w.shape, local_valid, vocab)
    return dx, jnp.where(w_valid, w, jnp.zeros_like(w))


def _dh_kernel(*refs, local_valid, vocab, bv):
    *ins, dh_ref, acc_sc = refs
    j = pl.program_id(1)

    @pl.when(j == 0)
    def _init():
        acc_sc[...] = jnp.zeros(acc_sc.shape, jnp.float32)

    dx, w = _tile_dx(*ins, j, bv, local_valid, vocab)
    acc_sc[...] += _dot(dx.astype(w.dtype), w, _NT)

    @pl.when(j == pl.num_programs(1) - 1)
    def _finish():
        dh_ref[...] = acc_sc[...].astype(dh_ref.dtype)


def _dw_kernel(*refs, local_valid, vocab, bv):
    *ins, dw_ref, acc_sc = refs
    j, i = pl.program_id(0), pl.program_id(1)

    @pl.when(i == 0)
    def _init():
        acc_sc[...] = jnp.zeros(acc_sc.shape, jnp.float32)

    h = ins[2][...]
    dx, _ = _tile_dx(*ins, j, bv, local_valid, vocab)
    acc_sc[...] += _dot(h, dx.astype(h.dtype), _TN)

    @pl.when(i == pl.num_programs(1) - 1)
    def _finish():
        dw_ref[...] = acc_sc[...].astype(dw_ref.dtype)


def logprobs_bwd(hidden: jax.Array, unembed: jax.Array, targets: jax.Array,
                 temperature: jax.Array, offsets: jax.Array, lse: jax.Array, ez: jax.Array,
                 g_lp: jax.Array, g_ent: jax.Array, *, row_tile: int | None,
                 vocab_tile: int | None, interpret, local_valid: int, valid_vocab: int
                 ) -> tuple[jax.Array, jax.Array]:
    """(dh over this shard's columns, dW of this shard's columns over these rows)."""
    n, dim = hidden.shape
    vocab = unembed.shape[1]

    def call(kind, kernel, grid, ij, out_spec, out_shape, scratch):
        """``grid(row blocks, computed vocab tiles, all vocab tiles)``; ``ij`` maps grid ids to
        (row block, vocab tile)."""
        rt, vt, vmem = _tiles(kind, n, dim, hidden.dtype, row_tile, vocab_tile)
        bn, n_pad, bv, n_tiles = _geometry(n, vocab, local_valid, rt, vt)
        row = pl.BlockSpec((bn, 1), lambda a, b: (ij(a, b)[0], 0))
        return pl.pallas_call(
            functools.partial(kernel, local_valid=local_valid, vocab=valid_vocab, bv=bv),
            grid=grid(n_pad // bn, n_tiles, _common.cdiv(vocab, bv)),
            in_specs=[_SMEM, _SMEM, pl.BlockSpec((bn, dim), lambda a, b: (ij(a, b)[0], 0)),
                      pl.BlockSpec((dim, bv), lambda a, b: (0, ij(a, b)[1]))] + [row] * 5,
            out_specs=out_spec(bn, bv),
            out_shape=out_shape(n_pad),
            scratch_shapes=[scratch(bn, bv)],
            compiler_params=_params(vmem, "parallel", "arbitrary"),
            interpret=interpret,
            name=f"fused_logprobs_{kind}",
        )(temperature.reshape(1), offsets, _pad_rows(hidden, n_pad), unembed,
          _col(targets, n_pad, -1), *(_col(x, n_pad) for x in (lse, ez, g_lp, g_ent)))

    dh = call("dh", _dh_kernel, lambda rows, tiles, _: (rows, tiles), lambda i, j: (i, j),
              lambda bn, bv: pl.BlockSpec((bn, dim), lambda i, j: (i, 0)),
              lambda n_pad: jax.ShapeDtypeStruct((n_pad, dim), hidden.dtype),
              lambda bn, bv: pltpu.VMEM((bn, dim), jnp.float32))
    dw = call(  # every block of dW is written: those past local_valid get dx = 0
        "dw", _dw_kernel, lambda rows, _, all_tiles: (all_tiles, rows), lambda j, i: (i, j),
        lambda bn, bv: pl.BlockSpec((dim, bv), lambda j, i: (0, j)),
        lambda n_pad: jax.ShapeDtypeStruct((dim, vocab), unembed.dtype),
        lambda bn, bv: pltpu.VMEM((dim, bv), jnp.float32))
    return dh[:n], dw


# ----------------------------------------------------------------------------- sampler

def _sample_kernel(key_ref, off_ref, temp_ref, h_ref, w_ref, m_ref, s_ref, t_ref, bs_ref,
                   bi_ref, bz_ref, *cand_refs, local_valid, vocab, bv, num_cand):
    i, j = pl.program_id(0), pl.program_id(1)
    temp = temp_ref[...]
    greedy = temp <= _common.GREEDY_TEMPERATURE
    z = _dot(h_ref[...], w_ref[...], _NN) / jnp.where(greedy, 1.0, temp)
    cols, valid = _columns(off_ref, j, bv, z.shape, local_valid, vocab)
    rows = off_ref[0] + i * z.shape[0] + lax.broadcasted_iota(jnp.int32, z.shape, 0)
    m, s, t = _common.update_stats(*_common.init_stats(z.shape[0]), z, valid)
    m_ref[...], s_ref[...], t_ref[...] = m, s, t
    noise = rng.gumbel_at(key_ref[0], key_ref[1], rows, cols, vocab)
    score = jnp.where(valid, jnp.where(greedy, z, noise + z), -jnp.inf)
    best = jnp.max(score, axis=1, keepdims=True)
    pos = jnp.min(jnp.where(score == best, cols, _common.INT_MAX), axis=1, keepdims=True)
    bs_ref[...] = best
    bi_ref[...] = pos
    bz_ref[...] = jnp.sum(jnp.where(cols == pos, z, 0.0), axis=1, keepdims=True)
    if num_cand:
        cz_ref, ci_ref = cand_refs
        c = cz_ref.shape[-1]
        cz, ci = _common.tile_candidates(jnp.where(valid, z, -jnp.inf), cols,
                                         lax.broadcasted_iota(jnp.int32, (z.shape[0], c), 1), c)
        cz_ref[...], ci_ref[...] = cz, ci


def sample_partials(words: jax.Array, hidden: jax.Array, unembed: jax.Array,
                    temperature: jax.Array, offsets: jax.Array, num_cand: int, *,
                    row_tile: int | None, vocab_tile: int | None, interpret, local_valid: int,
                    valid_vocab: int):
    """Per-vocab-tile partials: ((m, s, t), best_score, best_idx, best_z) as [tiles, B, 1] and
    candidates [tiles, B, c] (or None), over this shard's columns (global ids)."""
    b, dim = hidden.shape
    row_tile, vocab_tile, vmem = _tiles("sample", b, dim, hidden.dtype, row_tile, vocab_tile)
    bb, b_pad, bv, n_tiles = _geometry(b, unembed.shape[1], local_valid, row_tile, vocab_tile)
    c = min(num_cand, bv)
    part = pl.BlockSpec((None, bb, 1), lambda i, j: (j, i, 0))
    f32 = jax.ShapeDtypeStruct((n_tiles, b_pad, 1), jnp.float32)
    out_specs = [part] * 6
    out_shape = [f32] * 4 + [jax.ShapeDtypeStruct((n_tiles, b_pad, 1), jnp.int32), f32]
    if c:
        out_specs += [pl.BlockSpec((None, bb, c), lambda i, j: (j, i, 0))] * 2
        out_shape += [jax.ShapeDtypeStruct((n_tiles, b_pad, c), jnp.float32),
                      jax.ShapeDtypeStruct((n_tiles, b_pad, c), jnp.int32)]
    out = pl.pallas_call(
        functools.partial(_sample_kernel, local_valid=local_valid, vocab=valid_vocab, bv=bv,
                          num_cand=c),
        grid=(b_pad // bb, n_tiles),
        in_specs=[_SMEM, _SMEM, pl.BlockSpec((bb, 1), lambda i, j: (i, 0)),
                  pl.BlockSpec((bb, dim), lambda i, j: (i, 0)),
                  pl.BlockSpec((dim, bv), lambda i, j: (0, j))],
        out_specs=out_specs,
        out_shape=out_shape,
        compiler_params=_params(vmem, "parallel", "parallel"),
        interpret=interpret,
        name="fused_sample",
    )(words, offsets, _col(temperature, b_pad, 1.0), _pad_rows(hidden, b_pad), unembed)
    out = [o[:, :b] for o in out]
    m, s, t, best_s, best_i, best_z = out[:6]
    cands = (out[6], out[7]) if c else None
    return (m, s, t), best_s, best_i, best_z, cands
