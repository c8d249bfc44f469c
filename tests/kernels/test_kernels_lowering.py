"""Cross-platform lowering of the real (non-interpret) Pallas kernels from a CPU host.

``jit(...).trace(...).lower(lowering_platforms=("tpu",))`` runs the Mosaic-TPU Python lowering
(block-shape tiling rules, supported primitives) and ``("cuda",)`` the Triton lowering
(power-of-two tensor sizes, supported primitives). It does not run the device compilers, so it
is a necessary, not a sufficient, check that the kernels will build on hardware.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from coop_jax.kernels import fused_logprobs, fused_sample

N, D, V, B = 512, 200, 1000, 64  # ragged vocab tiles and (for Triton) a ragged hidden chunk
VALID = 500  # valid_vocab < V: fewer computed vocab tiles than unembed (TPU dW) spans
PLATFORMS = {"pallas_tpu": ("tpu", "tpu_custom_call"), "pallas_gpu": ("cuda", "triton")}


def _lower(fn, args, platform: str) -> str:
    return jax.jit(fn).trace(*args).lower(lowering_platforms=(platform,)).as_text()


@pytest.mark.parametrize("impl", list(PLATFORMS))
@pytest.mark.parametrize("dtype, valid_vocab", [(jnp.float32, None), (jnp.bfloat16, VALID)])
def test_logprobs_value_and_grad_lowers(impl, dtype, valid_vocab):
    platform, marker = PLATFORMS[impl]

    def step(hidden, unembed, targets):
        def loss(h, w):
            logp, ent = fused_logprobs(h, w, targets, temperature=0.9, impl=impl,
                                       valid_vocab=valid_vocab)
            return jnp.sum(logp) + jnp.sum(ent)
        return jax.value_and_grad(loss, argnums=(0, 1))(hidden, unembed)

    args = (jax.ShapeDtypeStruct((N, D), dtype), jax.ShapeDtypeStruct((D, V), dtype),
            jax.ShapeDtypeStruct((N,), jnp.int32))
    text = _lower(step, args, platform)
    assert text.count(marker) >= 2  # forward and backward kernels


@pytest.mark.parametrize("impl", list(PLATFORMS))
@pytest.mark.parametrize("top_k, top_p, valid_vocab", [(0, 1.0, None), (50, 0.95, VALID)])
def test_sampler_lowers(impl, top_k, top_p, valid_vocab):
    platform, marker = PLATFORMS[impl]

    def step(key, hidden, unembed, temp):
        return fused_sample(key, hidden, unembed, temp, top_k, top_p, impl=impl,
                            valid_vocab=valid_vocab)

    args = (jax.ShapeDtypeStruct((2,), jnp.uint32), jax.ShapeDtypeStruct((B, D), jnp.bfloat16),
            jax.ShapeDtypeStruct((D, V), jnp.bfloat16), jax.ShapeDtypeStruct((B,), jnp.float32))
    assert marker in _lower(step, args, platform)
