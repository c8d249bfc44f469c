"""Fused decode sampler: logits tile by tile, Gumbel-max with jax.random's exact noise."""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from coop_jax.kernels import _common
from coop_jax.kernels import filtering
from coop_jax.kernels import pallas_gpu
from coop_jax.kernels import pallas_tpu
from coop_jax.kernels import partition
from coop_jax.kernels import reference
from coop_jax.kernels import rng
from coop_jax.kernels import xla_impl
from coop_jax.kernels.partition import COLS, REPLICATED, ROWS

DEFAULT_MAX_CANDIDATES = 128


def _merge_partials(stats, best_s, best_i, best_z, cands, num_cand):
    """Reduce partials stacked on axis 0 (per vocab tile or per vocab shard, lowest columns
    first; [parts, B, 1], candidates [parts, B, c]) to one [B, 1] / [B, num_cand] set."""
    m, s, t = _common.merge_stats(*stats, axis=0)
    part = jnp.argmax(best_s, axis=0)[None]  # first part wins ties = lowest vocab index
    best_s = jnp.take_along_axis(best_s, part, axis=0)[0]
    best_i = jnp.take_along_axis(best_i, part, axis=0)[0]
    best_z = jnp.take_along_axis(best_z, part, axis=0)[0]
    if cands is None:
        return (m, s, t), best_s, best_i, best_z, None
    cz, ci = (jnp.swapaxes(c, 0, 1).reshape(c.shape[1], -1) for c in cands)
    cand_z, pos = lax.top_k(cz, min(num_cand, cz.shape[1]))
    return (m, s, t), best_s, best_i, best_z, (cand_z, jnp.take_along_axis(ci, pos, axis=1))


def _pallas(module):
    def run(words, hidden, unembed, temperature, num_cand, vocab_tile, row_tile, interpret,
            vocab):
        lay = partition.layout(hidden, unembed)
        merge = lambda *parts: _merge_partials(*parts, num_cand)

        def local(words, h, w, temp):
            offsets, local_valid = partition.local_columns(lay, h.shape[0], w.shape[1], vocab)
            parts = module.sample_partials(words, h, w, temp, offsets, num_cand,
                                           row_tile=row_tile, vocab_tile=vocab_tile,
                                           interpret=interpret, local_valid=local_valid,
                                           valid_vocab=vocab)
            return partition.combine_vocab(lay, merge(*parts), merge)

        stats, _, best_i, best_z, cands = partition.run(
            lay, local, (words, hidden, unembed, temperature), (REPLICATED, ROWS, COLS, ROWS),
            ROWS)
        return (stats, best_i, best_z) + (cands if cands is not None else (None, None))
    return run


def _xla(words, hidden, unembed, temperature, num_cand, vocab_tile, row_tile, interpret, vocab):
    del row_tile, interpret
    unembed = partition.unsplit_vocab(unembed)
    tile = vocab_tile or _common.default_xla_vocab_tile(hidden.shape[0], vocab)
    return xla_impl.sample(words, hidden, unembed, temperature, num_cand, tile, vocab)


_BACKENDS = {
    "xla": _xla,
    "pallas_tpu": _pallas(pallas_tpu),
    "pallas_gpu": _pallas(pallas_gpu),
}


def _reference(key, per_row, hidden, unembed, temperature, top_k, top_p, max_candidates, vocab):
    def ref(key, hidden, temperature):
        return reference.sample(key, hidden, unembed, temperature, top_k, top_p, max_candidates,
                                vocab)
    if not per_row:
        return ref(key, hidden, temperature)
    rows = jax.vmap(lambda k, h, t: ref(k, h[None], t[None]))(key, hidden, temperature)
    return tuple(x[:, 0] for x in rows)


def fused_sample(key: jax.Array, hidden: jax.Array, unembed: jax.Array,
                 temperature: jax.Array | float, top_k: int = 0, top_p: float = 1.0, *,
                 impl: str = "auto", interpret: Any = False, vocab_tile: int | None = None,
                 row_tile: int | None = None,
                 max_candidates: int = DEFAULT_MAX_CANDIDATES,
                 valid_vocab: int | None = None
                 ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Sample one token per row from ``softmax(hidden @ unembed / temperature)``.

    Unfiltered sampling returns exactly ``jax.random.categorical(key, logits / T)`` for the same
    key (threefry, default config). Rows with ``temperature <= 1e-6`` are greedy (argmax).
    Top-k / top-p follow ``filtering.py``: top-k first, then top-p over the (renormalised)
    survivors; without top-k the nucleus is capped at ``max_candidates`` tokens.

    Args:
      key: one PRNG key (typed or raw uint32[2], threefry2x32), or one per row (typed [B] or
        raw uint32[B, 2]): then row b is exactly ``fused_sample(key[b], hidden[b:b+1], ...)``,
        in one batched pass (impl 'xla' or 'reference'; the Pallas kernels take one key).
      hidden: [B, D]; unembed: [D, V]; temperature: [B] or scalar.
      top_k: static int, 0 = off. top_p: static float in (0, 1], 1.0 = off.
      impl / interpret / vocab_tile / row_tile: as in ``fused_logprobs`` (also the shard_map
        partitioning of the Pallas kernels on a mesh).
      valid_vocab: static Python int in [1, V] (None = V). The result is identical to passing
        ``unembed[:, :valid_vocab]`` (same tokens for the same key: the noise is that of a
        (B, valid_vocab) draw), without copying [D, V]; ids >= valid_vocab are never sampled.

    Returns:
      tokens [B] int32; logp [B] and entropy [B] (float32) of the temperature-scaled,
      *unfiltered* distribution (the behaviour log-prob a learner at the same temperature
      recomputes); both are 0 for greedy rows (the T -> 0 limit).
    """
    if hidden.ndim != 2 or unembed.ndim != 2 or unembed.shape[0] != hidden.shape[1]:
        raise ValueError(f"hidden must be [B, D] and unembed [D, V]; got {hidden.shape}, "
                         f"{unembed.shape}")
    b, vocab = hidden.shape[0], _common.resolve_valid_vocab(valid_vocab, unembed.shape[1])
    temperature = jnp.broadcast_to(jnp.asarray(temperature, jnp.float32), (b,))
    num_cand = filtering.num_candidates(top_k, top_p, max_candidates, vocab)
    filtered = top_k > 0 or top_p < 1.0
    per_row = rng.per_row_keys(key)
    if per_row and key.shape[0] != b:
        raise ValueError(f"key: {key.shape[0]} per-row keys for {b} rows of hidden")
    impl = partition.resolve_impl(impl, hidden, unembed, interpret)
    if per_row and impl.startswith("pallas"):
        raise ValueError(f"key: per-row keys run on impl 'xla' or 'reference', not {impl!r}")
    if impl == "reference":
        return _reference(key, per_row, hidden, unembed, temperature, top_k, top_p,
                          max_candidates, vocab)
    rng.check_rng_config()
    rng.check_counter_range(1 if per_row else b, vocab)
    words = rng.key_words(key)
    dtype = jnp.promote_types(hidden.dtype, unembed.dtype)
    stats, best_i, best_z, cand_z, cand_i = _BACKENDS[impl](
        words, hidden.astype(dtype), unembed.astype(dtype), temperature,
        num_cand if filtered else 0, vocab_tile, row_tile, interpret, vocab)
    lse, _, entropy = _common.finish_stats(*stats)
    best_i, best_z, lse, entropy = best_i[:, 0], best_z[:, 0], lse[:, 0], entropy[:, 0]
    greedy = temperature <= _common.GREEDY_TEMPERATURE
    if filtered:
        keep = filtering.keep_mask(cand_z, lse, top_k, top_p)
        tok_f, z_f = filtering.pick(words, cand_z, cand_i, keep, vocab)
        tokens = jnp.where(greedy, best_i, tok_f)
        z_tok = jnp.where(greedy, best_z, z_f)
    else:
        tokens, z_tok = best_i, best_z
    zero = jnp.zeros_like(lse)
    return (tokens.astype(jnp.int32), jnp.where(greedy, zero, z_tok - lse),
            jnp.where(greedy, zero, entropy))
