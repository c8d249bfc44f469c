"""The fused kernels on a device mesh: every impl equals its single-device result.

The Pallas kernels (interpret mode) run per shard under shard_map: rows split like the batch,
the unembedding replicated or split over its vocabulary (partials combined across shards).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from coop_jax import parallel
from coop_jax.kernels import _common, fused_logprobs, fused_sample, pallas_tpu, partition

N, D, V, B = 32, 16, 512, 16
VALID = 300  # with 8 vocab shards of 64 columns, shards 5-7 hold no valid column
TILE = 128  # several vocab tiles per shard when the vocabulary is split in two


def _inputs():
    ks = jax.random.split(jax.random.key(0), 5)
    hidden = jax.random.normal(ks[0], (N, D))
    unembed = jax.random.normal(ks[1], (D, V)) * 0.5
    targets = jax.random.randint(ks[2], (N,), 0, VALID).at[3].set(-1).at[9].set(VALID + 5)
    decode = jax.random.normal(ks[3], (B, D)) * 2.0  # the sampler's rows
    temp = jnp.linspace(0.0, 1.5, B)  # row 0 greedy
    return (hidden, unembed, targets, decode, temp), ks[4]


def _run(impl, hidden, unembed, targets, decode, temp, key):
    """logp, entropy, their gradients, and filtered + unfiltered samples, in one jit."""
    kw = dict(impl=impl, interpret=impl.startswith("pallas"), vocab_tile=TILE, row_tile=16,
              valid_vocab=VALID)

    def loss(h, w, targets):
        logp, ent = fused_logprobs(h, w, targets, temperature=0.8, **kw)
        return jnp.sum(logp * jnp.cos(jnp.arange(N))) + jnp.sum(ent), (logp, ent)

    def step(h, w, targets, decode, temp):
        (_, values), grads = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(h, w,
                                                                                   targets)
        samples = [fused_sample(key, decode, w, temp, top_k, top_p, **kw)
                   for top_k, top_p in ((0, 1.0), (7, 0.9))]
        return values, grads, samples

    return jax.jit(step)(hidden, unembed, targets, decode, temp)


@functools.cache
def _single_device(impl):
    arrays, key = _inputs()
    return jax.device_get(_run(impl, *jax.device_put(arrays, jax.devices()[0]), key))


def _assert_equal(got, want):
    (values, grads, samples), (w_values, w_grads, w_samples) = got, want
    for g, w in zip(jax.tree_util.tree_leaves((values, grads)),
                    jax.tree_util.tree_leaves((w_values, w_grads))):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * float(np.max(np.abs(w))))
    for (tok, logp, ent), (w_tok, w_logp, w_ent) in zip(samples, w_samples):
        np.testing.assert_array_equal(tok, w_tok)
        np.testing.assert_allclose(logp, w_logp, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(ent, w_ent, rtol=1e-5, atol=1e-5)


def _vocab_axis(shape):
    """The axis the unembedding is split over: tensor if used, else the largest batch axis."""
    return "tensor" if shape[2] > 1 else ("fsdp" if shape[1] > 1 else "data")


CASES = [(shape, w, "pallas_tpu") for shape in ((8, 1, 1), (2, 4, 1), (2, 2, 2))
         for w in ("replicated", "vocab")]
CASES += [((2, 2, 2), "vocab", "pallas_gpu")]  # same partitioning code, costlier interpreter
CASES += [((2, 2, 2), "vocab", "xla")]  # an explicitly split vocabulary is gathered for the scan


@pytest.mark.parametrize("shape, w_layout, impl", CASES)
def test_explicit_mesh_equals_single_device(shape, w_layout, impl):
    """Explicit axes: the kernels follow the arrays' own shardings."""
    mesh = jax.make_mesh(shape, parallel.AXES, axis_types=(AxisType.Explicit,) * 3)
    (hidden, unembed, targets, decode, temp), key = _inputs()
    vocab = _vocab_axis(shape) if w_layout == "vocab" else None
    rows = tuple(a for a in ("data", "fsdp") if a != vocab and mesh.shape[a] > 1) or None
    with jax.set_mesh(mesh):
        put = lambda x, *spec: jax.device_put(x, NamedSharding(mesh, P(*spec)))
        args = (put(hidden, rows), put(unembed, None, vocab), put(targets, rows),
                put(decode, rows), put(temp, rows))
        lay = partition.layout(args[0], args[1])
        # a replicated unembedding is still split over the otherwise idle "vocab" rule axis
        want_vocab = (vocab,) if vocab else (("tensor",) if shape[2] > 1 else ())
        assert lay.vocab == want_vocab and lay.rows == (rows or ())
        got = jax.device_get(_run(impl, *args, key))
    _assert_equal(got, _single_device(impl))


def test_auto_mesh_follows_logical_rules(impl="pallas_tpu"):
    """Auto axes (the train step's jit with in_shardings, no ambient mesh): rows over the
    "batch" rule's axes, the vocabulary over the "vocab" rule's."""
    mesh = parallel.make_mesh((2, 2, 2))
    (hidden, unembed, targets, decode, temp), key = _inputs()
    rows = parallel.batch_sharding(mesh, 2)
    w_sharding = parallel.logical_sharding(mesh, ("embed", "vocab"))
    assert partition.layout(jax.device_put(hidden, rows),
                            jax.device_put(unembed, w_sharding)) == \
        partition.Layout(mesh.abstract_mesh, ("data", "fsdp"), ("tensor",))
    args = (jax.device_put(hidden, rows), jax.device_put(unembed, w_sharding),
            jax.device_put(targets, parallel.batch_sharding(mesh, 1)),
            jax.device_put(decode, rows), jax.device_put(temp, parallel.batch_sharding(mesh, 1)))
    _assert_equal(jax.device_get(_run(impl, *args, key)), _single_device(impl))


def test_auto_never_picks_an_unpartitionable_kernel(monkeypatch):
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    assert jax.device_count() > 1
    assert _common.resolve_impl("auto", False, on_mesh=False) == "xla"
    assert _common.resolve_impl("auto", False, on_mesh=True) == "pallas_tpu"


def test_auto_takes_xla_on_gpu(monkeypatch):
    """The Triton kernels lost to XLA's scan on an H200 (docs/results/gpu); `pallas` still runs them."""
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert _common.resolve_impl("auto", False, on_mesh=True) == "xla"
    assert _common.resolve_impl("pallas", False, on_mesh=True) == "pallas_gpu"


def test_vmem_tiles_follow_capacity_and_dtype():
    """v4's 16 MiB VMEM gets tiles with more HBM traffic (1/bn + 1/bv) than v5e's 128 MiB, bf16
    no more than f32, and every choice fits the VMEM limit (the compile check is
    benchmarks/tpu_compile.py)."""
    mib = 2 ** 20
    for kernel in ("fwd", "dh", "dw", "sample"):
        traffic = {}
        for cap in (16 * mib, 128 * mib):
            for dtype in (jnp.float32, jnp.bfloat16):
                bn, bv = pallas_tpu.choose_tiles(kernel, 4096, 1536, dtype, cap)
                used = pallas_tpu._footprint(kernel, bn, bv, 1536, jnp.dtype(dtype).itemsize)
                assert used <= pallas_tpu.vmem_limit(cap), (kernel, cap, dtype)
                traffic[cap, dtype] = 1 / bn + 1 / bv
        assert traffic[16 * mib, jnp.float32] > traffic[128 * mib, jnp.float32], kernel
        assert traffic[16 * mib, jnp.bfloat16] <= traffic[16 * mib, jnp.float32], kernel
