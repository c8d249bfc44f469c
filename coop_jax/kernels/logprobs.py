"""Fused log-prob + entropy of the unembedding, with a custom VJP that never builds [N, V]."""
from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from coop_jax.kernels import _common
from coop_jax.kernels import pallas_gpu
from coop_jax.kernels import partition
from coop_jax.kernels import pallas_tpu
from coop_jax.kernels import reference
from coop_jax.kernels import xla_impl
from coop_jax.kernels.partition import COLS, REPLICATED, ROWS


class _Spec(NamedTuple):
    impl: str
    vocab_tile: int | None  # None: the Pallas kernel's VMEM/dtype-derived choice
    row_tile: int | None
    interpret: Any
    valid_vocab: int  # static bound: columns >= it do not exist


def _xla_fwd(spec, h, w, tgt, temp):
    return xla_impl.logprobs_fwd(h, w, tgt, temp, spec.vocab_tile, spec.valid_vocab)


def _xla_bwd(spec, h, w, tgt, temp, lse, ez, g_lp, g_ent):
    return xla_impl.logprobs_bwd(h, w, tgt, temp, lse, ez, g_lp, g_ent, spec.vocab_tile,
                                 spec.valid_vocab)


def _merge_shards(m, s, t, zt):
    """Statistics of the vocabulary shards stacked on axis 0 -> one set per row."""
    return (*_common.merge_stats(m, s, t, axis=0), jnp.sum(zt, axis=0))


def _pallas_fwd(module):
    def run(spec, hidden, unembed, targets, temperature):
        lay = partition.layout(hidden, unembed)

        def local(h, w, tgt, temp):
            offsets, local_valid = partition.local_columns(lay, h.shape[0], w.shape[1],
                                                           spec.valid_vocab)
            stats = module.logprobs_stats(h, w, tgt, temp, offsets, row_tile=spec.row_tile,
                                          vocab_tile=spec.vocab_tile, interpret=spec.interpret,
                                          local_valid=local_valid, valid_vocab=spec.valid_vocab)
            return partition.combine_vocab(lay, stats, _merge_shards)

        stats = partition.run(lay, local, (hidden, unembed, targets, temperature),
                              (ROWS, COLS, ROWS, REPLICATED), ROWS)
        return _common.finish_logprobs(*stats, targets, spec.valid_vocab)
    return run


def _pallas_bwd(module):
    def run(spec, hidden, unembed, targets, temperature, lse, ez, g_lp, g_ent):
        lay = partition.layout(hidden, unembed)

        def local(h, w, tgt, temp, *row_args):
            offsets, local_valid = partition.local_columns(lay, h.shape[0], w.shape[1],
                                                           spec.valid_vocab)
            dh, dw = module.logprobs_bwd(h, w, tgt, temp, offsets, *row_args,
                                         row_tile=spec.row_tile, vocab_tile=spec.vocab_tile,
                                         interpret=spec.interpret, local_valid=local_valid,
                                         valid_vocab=spec.valid_vocab)
            return partition.psum(lay, dh, COLS), partition.psum(lay, dw, ROWS)

        dh, dw = partition.run(lay, local, (hidden, unembed, targets, temperature, lse, ez, g_lp,
                                            g_ent), (ROWS, COLS, ROWS, REPLICATED) + (ROWS,) * 4,
                               (ROWS, COLS))
        return partition.like(dh, hidden), partition.like(dw, unembed)
    return run


# impl -> (forward: (logp, entropy, lse, E[z]), backward: (dh, dW)); Pallas tiles default to
# per-kernel choices of the kernel modules (None), xla's to default_xla_vocab_tile.
_BACKENDS = {
    "xla": (_xla_fwd, _xla_bwd),
    "pallas_tpu": (_pallas_fwd(pallas_tpu), _pallas_bwd(pallas_tpu)),
    "pallas_gpu": (_pallas_fwd(pallas_gpu), _pallas_bwd(pallas_gpu)),
}


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _fused(spec: _Spec, hidden, unembed, targets, temperature):
    logp, ent, _, _ = _BACKENDS[spec.impl][0](spec, hidden, unembed, targets, temperature)
    return logp, ent


def _fused_fwd(spec, hidden, unembed, targets, temperature):
    logp, ent, lse, ez = _BACKENDS[spec.impl][0](spec, hidden, unembed, targets, temperature)
    return (logp, ent), (hidden, unembed, targets, temperature, lse, ez)


def _fused_bwd(spec, res, cotangents):
    hidden, unembed, targets, temperature, lse, ez = res
    ok = (targets >= 0) & (targets < spec.valid_vocab)
    g_lp, g_ent = (jnp.where(ok, g.astype(jnp.float32), 0.0) for g in cotangents)
    dh, dw = _BACKENDS[spec.impl][1](spec, hidden, unembed, targets, temperature, lse, ez,
                                     g_lp, g_ent)
    return dh, dw, None, jnp.zeros_like(temperature)


_fused.defvjp(_fused_fwd, _fused_bwd)


def _validate(hidden: jax.Array, unembed: jax.Array, targets: jax.Array, temperature) -> None:
    if hidden.ndim != 2:
        raise ValueError(f"hidden must be [N, D] (reshape leading dims), got shape {hidden.shape}")
    if unembed.ndim != 2 or unembed.shape[0] != hidden.shape[1]:
        raise ValueError(f"unembed must be [D={hidden.shape[1]}, V], got shape {unembed.shape}")
    if targets.shape != hidden.shape[:1] or not jnp.issubdtype(targets.dtype, jnp.integer):
        raise ValueError(f"targets must be int [N={hidden.shape[0]}], got {targets.dtype} "
                         f"{targets.shape}")
    for name, x in (("hidden", hidden), ("unembed", unembed)):
        if not jnp.issubdtype(x.dtype, jnp.floating):
            raise ValueError(f"{name} must be floating point, got {x.dtype}")
    if isinstance(temperature, (int, float)) and not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")


def fused_logprobs(hidden: jax.Array, unembed: jax.Array, targets: jax.Array, *,
                   temperature: float | jax.Array = 1.0, impl: str = "auto",
                   interpret: Any = False, vocab_tile: int | None = None,
                   row_tile: int | None = None, valid_vocab: int | None = None
                   ) -> tuple[jax.Array, jax.Array]:
    """Log-prob of ``targets`` and entropy under ``softmax(hidden @ unembed / temperature)``.

    Args:
      hidden: [N, D] final hidden states (f32 or bf16; accumulation is always f32).
      unembed: [D, V] unembedding matrix.
      targets: [N] int token ids. Rows whose target is outside [0, valid_vocab) (use -1) are
        masked: logp = entropy = 0 there and they contribute no gradient.
      temperature: > 0, Python float or scalar array (treated as a constant, no gradient).
      impl: "auto" (Pallas on TPU, "xla" elsewhere), "reference" (materialised [N, V]),
        "xla" (scan over vocab tiles), "pallas" (TPU or GPU kernel by backend; on CPU the TPU
        kernel in interpret mode), "pallas_tpu" / "pallas_gpu" (force one kernel flavour).
      interpret: Pallas interpret mode: False, True or ``pltpu.InterpretParams(...)``.
      vocab_tile, row_tile: tile sizes (None: per impl; the Mosaic kernels take the largest that
        fit the chip's VMEM for this dtype).
      valid_vocab: static Python int in [1, V] (None = V). Columns >= valid_vocab are treated as
        absent, exactly like ``unembed[:, :valid_vocab]`` but without copying [D, V]; their dW
        is 0.

    On a device mesh (ambient, or the one the arrays are committed to) the Pallas kernels run
    per shard under ``jax.shard_map``, see ``partition.py``.

    Returns:
      (logp [N], entropy [N]), float32. Differentiable w.r.t. hidden and unembed; the backward
      recomputes logits tile by tile from the saved per-row log-sum-exp and E[z].
    """
    _validate(hidden, unembed, targets, temperature)
    valid_vocab = _common.resolve_valid_vocab(valid_vocab, unembed.shape[1])
    impl = partition.resolve_impl(impl, hidden, unembed, interpret)
    temp = jnp.asarray(temperature, jnp.float32)
    if temp.shape != ():
        raise ValueError(f"temperature must be a scalar, got shape {temp.shape}")
    if impl == "reference":
        return reference.logprobs(hidden, unembed, targets, jax.lax.stop_gradient(temp),
                                  valid_vocab)
    if impl == "xla":
        unembed = partition.unsplit_vocab(unembed)
        if vocab_tile is None:
            vocab_tile = _common.default_xla_vocab_tile(hidden.shape[0], valid_vocab)
        _common.check_tile("vocab_tile", vocab_tile, 1)
    dtype = jnp.promote_types(hidden.dtype, unembed.dtype)
    spec = _Spec(impl, vocab_tile, row_tile, interpret, valid_vocab)
    return _fused(spec, hidden.astype(dtype), unembed.astype(dtype), targets.astype(jnp.int32),
                  jax.lax.stop_gradient(temp))
