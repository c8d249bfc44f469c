"""The xla paths under a data-parallel mesh, in both Auto and Explicit sharding modes."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from coop_jax.kernels import fused_logprobs, fused_sample

N, D, V = 64, 32, 300


@pytest.mark.parametrize("axis_type", [AxisType.Auto, AxisType.Explicit])
def test_row_sharded_logprobs_and_sampler(axis_type):
    if jax.device_count() < 2:
        pytest.skip("needs several (simulated) devices")
    ks = jax.random.split(jax.random.key(0), 3)
    hidden = jax.random.normal(ks[0], (N, D))
    unembed = jax.random.normal(ks[1], (D, V)) * 0.3
    targets = jax.random.randint(ks[2], (N,), 0, V).at[5].set(-1)
    temp = jnp.linspace(0.5, 1.5, N)

    def grads(h, w, t, impl):
        def loss(h, w):
            logp, ent = fused_logprobs(h, w, t, impl=impl, vocab_tile=128)
            return jnp.sum(logp * jnp.cos(jnp.arange(N))) + jnp.sum(ent)
        return jax.jit(jax.grad(loss, argnums=(0, 1)))(h, w)

    def sample(h, w, t, impl):
        return jax.jit(lambda key, h, w, t: fused_sample(key, h, w, t, 7, 0.9, impl=impl,
                                                         vocab_tile=128))(ks[2], h, w, t)[0]

    want_g = grads(hidden, unembed, targets, "reference")
    want_tok = sample(hidden, unembed, temp, "reference")
    mesh = jax.make_mesh((jax.device_count(),), ("data",), axis_types=(axis_type,))
    with jax.set_mesh(mesh):
        rows = NamedSharding(mesh, P("data"))
        h, t, tp = (jax.device_put(x, rows) for x in (hidden, targets, temp))
        w = jax.device_put(unembed, NamedSharding(mesh, P()))
        got_g = grads(h, w, t, "xla")
        got_tok = sample(h, w, tp, "xla")
    for got, want in zip(got_g, want_g):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * float(jnp.max(jnp.abs(want))))
    np.testing.assert_array_equal(np.asarray(got_tok), np.asarray(want_tok))
