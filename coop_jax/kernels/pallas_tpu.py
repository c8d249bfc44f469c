"""Pallas Mosaic-TPU kernels (also run on CPU in interpret mode).

Layout: row vectors travel as [rows, 1] f32 blocks; the grid is (row blocks, vocab tiles).
  * forward: vocab axis "arbitrary", online (m, s, t, target logit) in VMEM scratch;
  * dh: same grid, f32 [bn, D] accumulator over vocab tiles;
  * dW: grid (vocab tiles, row blocks), f32 [D, bv] accumulator over row blocks;
  * sampler: both axes "parallel", one set of partial results per (row block, vocab tile),
    merged in XLA (decode batches are small, so the vocab axis provides the parallelism).
The last vocab block may run past V; those columns are masked in-kernel (padded reads are
garbage, NaN under interpret mode) instead of padding the [D, V] unembedding. The mask bound is
the static ``valid_vocab`` (<= V): columns at or beyond it are treated as absent, and vocab tiles
lying wholly beyond it are skipped (except by dW, which writes their zero gradient). Rows are
padded in the wrapper (cheap: [N, D]). Untested on TPU hardware: only interpret mode runs in CI.
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

DEFAULT_ROW_TILE = 256
DEFAULT_VOCAB_TILE = 512
DEFAULT_SAMPLE_ROW_TILE = 64
DEFAULT_SAMPLE_VOCAB_TILE = 512
# The dW kernel holds a [D, bv] f32 accumulator plus double-buffered [D, bv] W and dW blocks
# (~17 MiB at D=1536, bv=512), above the 16 MiB default scoped VMEM of v4/v5e.
VMEM_LIMIT_BYTES = 32 * 2 ** 20
_NN = (((1,), (0,)), ((), ()))
_NT = (((1,), (1,)), ((), ()))
_TN = (((0,), (0,)), ((), ()))


def _dot(a: jax.Array, b: jax.Array, dims) -> jax.Array:
    return lax.dot_general(a, b, dims, preferred_element_type=jnp.float32)


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


def _params(*semantics: str) -> pltpu.CompilerParams:
    return pltpu.CompilerParams(dimension_semantics=semantics, vmem_limit_bytes=VMEM_LIMIT_BYTES)


# ----------------------------------------------------------------------------- log-probs

def _fwd_kernel(temp_ref, h_ref, w_ref, tgt_ref, logp_ref, ent_ref, lse_ref, ez_ref,
                m_sc, s_sc, t_sc, zt_sc, *, vocab, bv):
    j = pl.program_id(1)

    @pl.when(j == 0)
    def _init():
        m_sc[...] = jnp.full(m_sc.shape, _common.M_INIT, jnp.float32)
        s_sc[...] = jnp.zeros(s_sc.shape, jnp.float32)
        t_sc[...] = jnp.zeros(t_sc.shape, jnp.float32)
        zt_sc[...] = jnp.zeros(zt_sc.shape, jnp.float32)

    z = _dot(h_ref[...], w_ref[...], _NN) / temp_ref[0]
    cols = j * bv + lax.broadcasted_iota(jnp.int32, z.shape, 1)
    valid = cols < vocab
    tgt = tgt_ref[...]
    m, s, t = _common.update_stats(m_sc[...], s_sc[...], t_sc[...], z, valid)
    m_sc[...], s_sc[...], t_sc[...] = m, s, t
    zt_sc[...] += jnp.sum(jnp.where(valid & (cols == tgt), z, 0.0), axis=1, keepdims=True)

    @pl.when(j == pl.num_programs(1) - 1)
    def _finish():
        lse, ez, ent = _common.finish_stats(m_sc[...], s_sc[...], t_sc[...])
        ok = (tgt >= 0) & (tgt < vocab)
        logp_ref[...] = jnp.where(ok, zt_sc[...] - lse, 0.0)
        ent_ref[...] = jnp.where(ok, ent, 0.0)
        lse_ref[...] = lse
        ez_ref[...] = ez


def logprobs_fwd(hidden: jax.Array, unembed: jax.Array, targets: jax.Array,
                 temperature: jax.Array, *, row_tile: int, vocab_tile: int, interpret,
                 valid_vocab: int) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    n, dim = hidden.shape
    bn, n_pad, bv, n_tiles = _geometry(n, unembed.shape[1], valid_vocab, row_tile, vocab_tile)
    row = pl.BlockSpec((bn, 1), lambda i, j: (i, 0))
    out = pl.pallas_call(
        functools.partial(_fwd_kernel, vocab=valid_vocab, bv=bv),
        grid=(n_pad // bn, n_tiles),
        in_specs=[_SMEM, pl.BlockSpec((bn, dim), lambda i, j: (i, 0)),
                  pl.BlockSpec((dim, bv), lambda i, j: (0, j)), row],
        out_specs=[row] * 4,
        out_shape=[jax.ShapeDtypeStruct((n_pad, 1), jnp.float32)] * 4,
        scratch_shapes=[pltpu.VMEM((bn, 1), jnp.float32)] * 4,
        compiler_params=_params("parallel", "arbitrary"),
        interpret=interpret,
        name="fused_logprobs_fwd",
    )(temperature.reshape(1), _pad_rows(hidden, n_pad), unembed, _col(targets, n_pad, -1))
    return tuple(o[:n, 0] for o in out)


def _tile_dx(temp_ref, h_ref, w_ref, tgt_ref, lse_ref, ez_ref, glp_ref, gent_ref, col0, vocab):
    """Recompute one logits tile and return (dx [bn, bv] f32, W tile with padded columns = 0)."""
    temp = temp_ref[0]
    w = w_ref[...]
    z = _dot(h_ref[...], w, _NN) / temp
    cols = col0 + lax.broadcasted_iota(jnp.int32, z.shape, 1)
    valid = cols < vocab
    dx = _common.dlogits(z, valid, cols == tgt_ref[...], lse_ref[...], ez_ref[...],
                         glp_ref[...], gent_ref[...], temp)
    w_cols = col0 + lax.broadcasted_iota(jnp.int32, w.shape, 1)
    return dx, jnp.where(w_cols < vocab, w, jnp.zeros_like(w))


def _dh_kernel(temp_ref, h_ref, w_ref, tgt_ref, lse_ref, ez_ref, glp_ref, gent_ref, dh_ref,
               acc_sc, *, vocab, bv):
    j = pl.program_id(1)

    @pl.when(j == 0)
    def _init():
        acc_sc[...] = jnp.zeros(acc_sc.shape, jnp.float32)

    dx, w = _tile_dx(temp_ref, h_ref, w_ref, tgt_ref, lse_ref, ez_ref, glp_ref, gent_ref,
                     j * bv, vocab)
    acc_sc[...] += _dot(dx.astype(w.dtype), w, _NT)

    @pl.when(j == pl.num_programs(1) - 1)
    def _finish():
        dh_ref[...] = acc_sc[...].astype(dh_ref.dtype)


def _dw_kernel(temp_ref, h_ref, w_ref, tgt_ref, lse_ref, ez_ref, glp_ref, gent_ref, dw_ref,
               acc_sc, *, vocab, bv):
    j, i = pl.program_id(0), pl.program_id(1)

    @pl.when(i == 0)
    def _init():
        acc_sc[...] = jnp.zeros(acc_sc.shape, jnp.float32)

    h = h_ref[...]
    dx, _ = _tile_dx(temp_ref, h_ref, w_ref, tgt_ref, lse_ref, ez_ref, glp_ref, gent_ref,
                     j * bv, vocab)
    acc_sc[...] += _dot(h, dx.astype(h.dtype), _TN)

    @pl.when(i == pl.num_programs(1) - 1)
    def _finish():
        dw_ref[...] = acc_sc[...].astype(dw_ref.dtype)


def logprobs_bwd(hidden: jax.Array, unembed: jax.Array, targets: jax.Array,
                 temperature: jax.Array, lse: jax.Array, ez: jax.Array, g_lp: jax.Array,
                 g_ent: jax.Array, *, row_tile: int, vocab_tile: int, interpret,
                 valid_vocab: int) -> tuple[jax.Array, jax.Array]:
    n, dim = hidden.shape
    vocab = unembed.shape[1]
    bn, n_pad, bv, n_tiles = _geometry(n, vocab, valid_vocab, row_tile, vocab_tile)
    args = (temperature.reshape(1), _pad_rows(hidden, n_pad), unembed, _col(targets, n_pad, -1),
            _col(lse, n_pad), _col(ez, n_pad), _col(g_lp, n_pad), _col(g_ent, n_pad))

    def specs(ij):  # ij maps grid indices to (row block, vocab tile)
        row = pl.BlockSpec((bn, 1), lambda a, b: (ij(a, b)[0], 0))
        return [_SMEM, pl.BlockSpec((bn, dim), lambda a, b: (ij(a, b)[0], 0)),
                pl.BlockSpec((dim, bv), lambda a, b: (0, ij(a, b)[1]))] + [row] * 5

    dh = pl.pallas_call(
        functools.partial(_dh_kernel, vocab=valid_vocab, bv=bv),
        grid=(n_pad // bn, n_tiles),
        in_specs=specs(lambda i, j: (i, j)),
        out_specs=pl.BlockSpec((bn, dim), lambda i, j: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((n_pad, dim), hidden.dtype),
        scratch_shapes=[pltpu.VMEM((bn, dim), jnp.float32)],
        compiler_params=_params("parallel", "arbitrary"),
        interpret=interpret,
        name="fused_logprobs_dh",
    )(*args)
    dw = pl.pallas_call(  # every block of dW is written: those past valid_vocab get dx = 0
        functools.partial(_dw_kernel, vocab=valid_vocab, bv=bv),
        grid=(_common.cdiv(vocab, bv), n_pad // bn),
        in_specs=specs(lambda j, i: (i, j)),
        out_specs=pl.BlockSpec((dim, bv), lambda j, i: (0, j)),
        out_shape=jax.ShapeDtypeStruct((dim, vocab), unembed.dtype),
        scratch_shapes=[pltpu.VMEM((dim, bv), jnp.float32)],
        compiler_params=_params("parallel", "arbitrary"),
        interpret=interpret,
        name="fused_logprobs_dw",
    )(*args)
    return dh[:n], dw


# ----------------------------------------------------------------------------- sampler

def _sample_kernel(key_ref, temp_ref, h_ref, w_ref, m_ref, s_ref, t_ref, bs_ref, bi_ref, bz_ref,
                   *cand_refs, vocab, bv, num_cand):
    i, j = pl.program_id(0), pl.program_id(1)
    temp = temp_ref[...]
    greedy = temp <= _common.GREEDY_TEMPERATURE
    z = _dot(h_ref[...], w_ref[...], _NN) / jnp.where(greedy, 1.0, temp)
    cols = j * bv + lax.broadcasted_iota(jnp.int32, z.shape, 1)
    rows = i * z.shape[0] + lax.broadcasted_iota(jnp.int32, z.shape, 0)
    valid = cols < vocab
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
                    temperature: jax.Array, num_cand: int, *, row_tile: int, vocab_tile: int,
                    interpret, valid_vocab: int):
    """Per-vocab-tile partials: ((m, s, t), best_score, best_idx, best_z) as [tiles, B, 1] and
    candidates [tiles, B, c] (or None), over the first ``valid_vocab`` columns."""
    b, dim = hidden.shape
    bb, b_pad, bv, n_tiles = _geometry(b, unembed.shape[1], valid_vocab, row_tile, vocab_tile)
    rng.check_counter_range(b_pad, valid_vocab)
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
        functools.partial(_sample_kernel, vocab=valid_vocab, bv=bv, num_cand=c),
        grid=(b_pad // bb, n_tiles),
        in_specs=[_SMEM, pl.BlockSpec((bb, 1), lambda i, j: (i, 0)),
                  pl.BlockSpec((bb, dim), lambda i, j: (i, 0)),
                  pl.BlockSpec((dim, bv), lambda i, j: (0, j))],
        out_specs=out_specs,
        out_shape=out_shape,
        compiler_params=_params("parallel", "parallel"),
        interpret=interpret,
        name="fused_sample",
    )(words, _col(temperature, b_pad, 1.0), _pad_rows(hidden, b_pad), unembed)
    out = [o[:, :b] for o in out]
    m, s, t, best_s, best_i, best_z = out[:6]
    cands = (out[6], out[7]) if c else None
    return (m, s, t), best_s, best_i, best_z, cands
