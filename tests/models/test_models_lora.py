"""`lora.delta` on [batch, seq, in] activations: the value and the adapters' gradients equal the
per-axis einsum form, and the compiled gradient of a LoRA'd SwiGLU MLP holds no transposed
[out, tokens] copy of an output gradient (the layout that made XLA:CPU's gradient pass 3.5x
slower; benchmarks/profile_gradient_pass.py)."""
from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np

from coop_jax.models import lora

B, T, D, F, R = 4, 24, 64, 160, 8
SCALE = 2.0


def _einsum_delta(x, a, b):
    xa = jnp.einsum("...i,ir->...r", x, a, preferred_element_type=jnp.float32)
    return SCALE * jnp.einsum("...r,ro->...o", xa, b, preferred_element_type=jnp.float32)


def _inputs():
    k = jax.random.split(jax.random.key(0), 6)
    x = jax.random.normal(k[0], (B, T, D))
    w = jax.random.normal(k[1], (2, D, F)) / np.sqrt(D)
    adapters = [jax.random.normal(k[2], (D, R)), jax.random.normal(k[3], (R, F)),
                jax.random.normal(k[4], (D, R)), jax.random.normal(k[5], (R, F))]
    return x, w, adapters


def _swiglu_sum(delta, x, w, a_gate, b_gate, a_up, b_up):
    gate = x @ w[0] + delta(x, a_gate, b_gate)
    up = x @ w[1] + delta(x, a_up, b_up)
    return (jax.nn.silu(gate) * up).sum()


def _delta(x, a, b):
    return lora.delta(x, a, b, SCALE, jnp.float32)


def test_delta_and_its_gradients_equal_the_einsum_form():
    x, w, adapters = _inputs()
    assert lora.delta(x, *adapters[:2], SCALE, jnp.float32).shape == (B, T, F)
    np.testing.assert_allclose(_delta(x, *adapters[:2]), _einsum_delta(x, *adapters[:2]),
                               rtol=1e-5, atol=1e-5)
    grads = [jax.grad(lambda ad, d=d: _swiglu_sum(d, x, w, *ad))(adapters)
             for d in (_delta, _einsum_delta)]
    for ours, reference in zip(*grads):
        np.testing.assert_allclose(ours, reference, rtol=1e-4,
                                   atol=1e-5 * float(np.abs(reference).max()))


def test_the_compiled_gradient_keeps_output_gradients_in_token_major_layout():
    x, w, adapters = _inputs()
    transposed = re.compile(rf"f32\[{F},{B * T}\]|f32\[{F},{B},{T}\]")

    def copies(delta):
        grad = jax.jit(jax.grad(lambda ad: _swiglu_sum(delta, x, w, *ad)))
        return [line for line in grad.lower(adapters).compile().as_text().splitlines()
                if transposed.search(line)]
    assert copies(_einsum_delta), "the einsum form no longer shows the transposed copy"
    assert copies(_delta) == []
