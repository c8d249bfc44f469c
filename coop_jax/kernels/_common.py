"""Shared pieces of the fused kernels: impl selection, tile sizes, online softmax statistics.

The online statistics of one row over the logits seen so far are
``m`` (running max), ``s = sum exp(z - m)`` and ``t = sum exp(z - m) (z - m)``, from which
``lse = m + log s``, ``E_p[z] = m + t / s`` and ``entropy = log s - t / s``. All helpers keep a
trailing singleton axis (shape ``[rows, 1]``) so the same code runs in XLA and in Pallas kernels.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax

from coop_jax.registry import Registry

M_INIT = -1e30  # finite "minus infinity": keeps (m_old - m_new) * 0 free of NaN
GREEDY_TEMPERATURE = 1e-6
IMPLS = Registry("kernels.impl")
for _name, _doc in (
        ("auto", "Pallas (Mosaic) on TPU where the mesh is known, XLA elsewhere"),
        ("reference", "the plain jnp reference (materialises the logits)"),
        ("xla", "the chunked XLA fallback"),
        ("pallas", "the Pallas kernel of the backend (TPU or GPU)"),
        ("pallas_tpu", "the Mosaic TPU kernel"),
        ("pallas_gpu", "the Triton GPU kernel")):
    IMPLS.register(_name, _name, doc=_doc)
del _name, _doc
CONCRETE_IMPLS = ("reference", "xla", "pallas_tpu", "pallas_gpu")


def resolve_impl(impl: str, interpret: object, on_mesh: bool = False,
                 backend: str | None = None) -> str:
    """Map ``impl`` (see ``IMPLS``) to a concrete one: reference, xla, pallas_tpu or pallas_gpu.

    ``on_mesh``: the arrays' mesh is known, so the Pallas kernels can be wrapped in shard_map.
    Otherwise, with several devices XLA might still partition the call, which a Mosaic/Triton
    kernel cannot survive, so ``auto`` takes the xla path there.
    On GPU ``auto`` takes the xla path too: measured on an H200 (docs/results/gpu), the Triton
    kernels were 4-6x slower than XLA's scan for log-prob value-and-grad and 2.3x for sampling.
    ``backend``: the platform to resolve for (default ``jax.default_backend()``), e.g. "tpu" when
    compiling for TPU topologies ahead of time on a CPU host.
    """
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {list(IMPLS)}, got {impl!r}")
    backend = backend or jax.default_backend()
    if impl == "auto":
        if not on_mesh and jax.device_count() > 1:
            return "xla"
        return "pallas_tpu" if backend == "tpu" else "xla"
    if impl == "pallas":
        if backend in ("tpu", "gpu"):
            return f"pallas_{backend}"
        if not interpret:
            raise ValueError("impl='pallas' needs a TPU/GPU backend or interpret=True on CPU")
        return "pallas_tpu"  # CPU interpret mode: the TPU flavour unless asked for pallas_gpu
    # explicit pallas_tpu / pallas_gpu are not checked here so they can be exported
    # cross-platform (jax.export with platforms=["tpu"] / ["cuda"]) from a CPU host
    return impl


def resolve_valid_vocab(valid_vocab: int | None, vocab: int) -> int:
    """Static bound on the usable columns of ``unembed``: ``None`` means all ``vocab`` of them."""
    if valid_vocab is None:
        return vocab
    if not isinstance(valid_vocab, int) or isinstance(valid_vocab, bool) \
            or not 1 <= valid_vocab <= vocab:
        raise ValueError(f"valid_vocab must be a static Python int in [1, V={vocab}] or None, "
                         f"got {valid_vocab!r}")
    return valid_vocab


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def round_up(a: int, b: int) -> int:
    return cdiv(a, b) * b


def default_xla_vocab_tile(num_rows: int, vocab: int) -> int:
    """Tile so that one [rows, tile] f32 temporary is about 8 MiB, in [512, 8192], lane aligned."""
    tile = 2 ** int(math.floor(math.log2(max(1, (2 ** 21) // max(num_rows, 1)))))
    return min(max(tile, 512), 8192, round_up(vocab, 128))


def check_tile(name: str, tile: int, multiple: int) -> None:
    if not isinstance(tile, int) or tile <= 0 or tile % multiple:
        raise ValueError(f"{name} must be a positive multiple of {multiple}, got {tile!r}")


def init_stats(rows: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    return (jnp.full((rows, 1), M_INIT, jnp.float32), jnp.zeros((rows, 1), jnp.float32),
            jnp.zeros((rows, 1), jnp.float32))


def update_stats(m: jax.Array, s: jax.Array, t: jax.Array, z: jax.Array, valid: jax.Array
                 ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Fold a [rows, tile] block of logits ``z`` (``valid`` marks real columns) into (m, s, t)."""
    m_tile = jnp.max(jnp.where(valid, z, -jnp.inf), axis=1, keepdims=True)
    m_new = jnp.maximum(m, m_tile)
    d = jnp.where(valid, z - m_new, 0.0)
    p = jnp.where(valid, jnp.exp(d), 0.0)
    a = jnp.exp(m - m_new)
    s_new = a * s + jnp.sum(p, axis=1, keepdims=True)
    t_new = a * (t + (m - m_new) * s) + jnp.sum(p * d, axis=1, keepdims=True)
    return m_new, s_new, t_new


def merge_stats(m: jax.Array, s: jax.Array, t: jax.Array, axis: int = 0
                ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Combine partial statistics stacked along ``axis`` (e.g. one per vocab split)."""
    m_all = jnp.max(m, axis=axis, keepdims=True)
    a = jnp.exp(m - m_all)
    s_all = jnp.sum(a * s, axis=axis)
    t_all = jnp.sum(a * (t + (m - m_all) * s), axis=axis)
    return jnp.squeeze(m_all, axis), s_all, t_all


def finish_stats(m: jax.Array, s: jax.Array, t: jax.Array
                 ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Return (lse, E_p[z], entropy) from the online statistics."""
    log_s = jnp.log(s)
    mean_d = t / s
    return m + log_s, m + mean_d, log_s - mean_d


def finish_logprobs(m: jax.Array, s: jax.Array, t: jax.Array, zt: jax.Array,
                    targets: jax.Array, vocab: int
                    ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """(logp, entropy, lse, E[z]) from the statistics and target logit ``zt``; rows whose
    target is outside [0, vocab) get logp = entropy = 0."""
    lse, ez, ent = finish_stats(m, s, t)
    ok = (targets >= 0) & (targets < vocab)
    return jnp.where(ok, zt - lse, 0.0), jnp.where(ok, ent, 0.0), lse, ez


def dlogits(z: jax.Array, valid: jax.Array, onehot: jax.Array, lse: jax.Array, ez: jax.Array,
            g_lp: jax.Array, g_ent: jax.Array, temperature: jax.Array) -> jax.Array:
    """Cotangent of the raw logits x = z * T for one tile (zero on padded columns).

    d logp / dz = onehot - p and d entropy / dz = -p (z - E[z]); z = x / T adds the 1/T factor.
    """
    p = jnp.where(valid, jnp.exp(jnp.where(valid, z, 0.0) - lse), 0.0)
    dz = g_lp * (onehot.astype(jnp.float32) - p) - g_ent * p * (z - ez)
    return jnp.where(valid, dz, 0.0) / temperature


INT_MAX = 2 ** 31 - 1


def tile_candidates(vals: jax.Array, cols: jax.Array, lane: jax.Array, count: int
                    ) -> tuple[jax.Array, jax.Array]:
    """The `count` largest entries per row of `vals` by repeated max extraction (no sort on
    Mosaic/Triton): (values, column ids) laid out along `lane` ([1 or rows, width] lane ids,
    built the way each backend lowers best); lanes >= count hold -inf / 0."""
    rows, width = vals.shape[0], lane.shape[-1]

    def body(r, carry):
        vals, cz, ci = carry
        mx = jnp.max(vals, axis=1, keepdims=True)
        am = jnp.min(jnp.where(vals == mx, cols, INT_MAX), axis=1, keepdims=True)
        cz = jnp.where(lane == r, mx, cz)
        ci = jnp.where(lane == r, am, ci)
        return jnp.where(cols == am, -jnp.inf, vals), cz, ci

    init = (vals, jnp.full((rows, width), -jnp.inf, jnp.float32),
            jnp.zeros((rows, width), jnp.int32))
    _, cz, ci = lax.fori_loop(0, count, body, init)
    return cz, ci
