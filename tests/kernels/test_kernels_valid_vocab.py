"""``valid_vocab=v``: identical to slicing ``unembed[:, :v]``, without the [D, V] copy.

V=300, v=200 with 128-wide vocab tiles: v ends inside the second tile and the third tile lies
wholly beyond it (skipped, except by the TPU dW kernel, which must write zeros there). A tile
covering v reads the whole matrix and masks columns >= v.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coop_jax.kernels import fused_logprobs, fused_sample

N, D, V, VALID = 16, 32, 300, 200
TEMP = 0.7
GREEDY_ROW = 3
PALLAS_KW = dict(interpret=True, vocab_tile=128, row_tile=16)
CASES = {
    "xla": ("xla", dict(vocab_tile=128)),
    "xla-one-tile": ("xla", dict(vocab_tile=V)),  # the whole [D, V] read in place, v.. masked
    "pallas_tpu-interpret": ("pallas_tpu", PALLAS_KW),
    "pallas_gpu-interpret": ("pallas_gpu", PALLAS_KW),
}


@jax.jit
def _sliced_expectations(key, hidden, unembed, temp):
    """jax.random.categorical on logits[:, :v] / T (argmax where greedy) and the log-softmax."""
    logits = jnp.dot(hidden, unembed, preferred_element_type=jnp.float32)[:, :VALID]
    greedy = temp <= 1e-6
    scaled = logits / jnp.where(greedy, 1.0, temp)[:, None]
    tokens = jnp.where(greedy, jnp.argmax(logits, -1), jax.random.categorical(key, scaled))
    return tokens, jax.nn.log_softmax(scaled, axis=-1)


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(2)
    targets = rng.integers(0, V, N).astype(np.int32)
    targets[:2] = -1, VALID
    temp = np.linspace(0.5, 1.5, N, dtype=np.float32)
    temp[GREEDY_ROW] = 0.0
    hidden = rng.standard_normal((N, D), np.float32)
    unembed = rng.standard_normal((D, V), np.float32) * np.float32(0.4)
    hidden[:, 0], unembed[0, VALID:] = 2.0, 2.5  # excluded columns dominate: leaks are loud
    p = dict(hidden=hidden, unembed=unembed, targets=targets,
             weights=rng.standard_normal(N, np.float32), temp=temp, key=jax.random.key(9))
    assert np.all(np.argmax(hidden @ unembed, -1) >= VALID)
    p["categorical"], p["log_softmax"] = (np.asarray(x) for x in _sliced_expectations(
        p["key"], p["hidden"], p["unembed"], p["temp"]))
    return p


def _logprobs_value_and_grad(p, unembed, impl, **kw):
    def loss(hidden, unembed):
        logp, ent = fused_logprobs(hidden, unembed, p["targets"], temperature=TEMP, impl=impl,
                                   **kw)
        return jnp.sum(p["weights"] * logp) + 0.1 * jnp.sum(ent), (logp, ent)
    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))(p["hidden"], unembed)


@pytest.fixture(scope="module")
def sliced_logprobs(problem):
    """The explicitly sliced call every impl must reproduce (reference impl: compiles once)."""
    return jax.tree.map(np.asarray, _logprobs_value_and_grad(
        problem, problem["unembed"][:, :VALID], "reference"))


@pytest.mark.parametrize("case", list(CASES))
def test_logprobs_equal_sliced_unembed(problem, sliced_logprobs, case):
    impl, kw = CASES[case]
    p = problem
    (loss, (logp, ent)), (dh, dw) = jax.tree.map(np.asarray, _logprobs_value_and_grad(
        p, p["unembed"], impl, valid_vocab=VALID, **kw))
    (want_loss, (want_logp, want_ent)), (want_dh, want_dw) = sliced_logprobs
    np.testing.assert_allclose(logp, want_logp, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ent, want_ent, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-5)
    np.testing.assert_allclose(dh, want_dh, rtol=0, atol=1e-5 * np.abs(want_dh).max())
    assert dw.shape == (D, V)
    np.testing.assert_allclose(dw[:, :VALID], want_dw, rtol=0, atol=1e-5 * np.abs(want_dw).max())
    assert np.all(dw[:, VALID:] == 0), "columns >= valid_vocab got gradient"
    masked = (p["targets"] < 0) | (p["targets"] >= VALID)
    assert masked.sum() >= 2 and np.all(p["targets"][masked] < V)
    assert np.all(logp[masked] == 0) and np.all(dh[masked] == 0)


def _sample(p, unembed, top_k, top_p, impl, **kw):
    fn = jax.jit(lambda key, h, w, t: fused_sample(key, h, w, t, top_k, top_p, impl=impl, **kw))
    return fn(p["key"], p["hidden"], unembed, p["temp"])


# interpret mode is slow: each Pallas kernel gets one setting (in-kernel noise vs. candidates)
@pytest.mark.parametrize("case, top_k, top_p", [
    ("xla", 0, 1.0), ("xla-one-tile", 0, 1.0), ("xla-one-tile", 20, 0.7),
    ("pallas_tpu-interpret", 0, 1.0), ("pallas_gpu-interpret", 20, 0.7)])
def test_sample_equals_sliced_unembed(problem, case, top_k, top_p):
    """Same key, same tokens as with ``unembed[:, :v]``: the noise is that of a (B, v) draw."""
    impl, kw = CASES[case]
    p = problem
    tokens, logp, ent = _sample(p, p["unembed"], top_k, top_p, impl, valid_vocab=VALID, **kw)
    tokens = np.asarray(tokens)
    assert tokens.min() >= 0 and tokens.max() < VALID
    if top_k == 0 and top_p == 1.0:  # the sliced call is jax.random.categorical(key, z[:, :v])
        np.testing.assert_array_equal(tokens, p["categorical"])
    else:
        want_tokens, _, _ = _sample(p, p["unembed"][:, :VALID], top_k, top_p, "reference")
        np.testing.assert_array_equal(tokens, np.asarray(want_tokens))
    # logp / entropy of the unfiltered distribution over the first v columns; 0 if greedy
    logp_all = p["log_softmax"]
    want_logp = np.take_along_axis(logp_all, tokens[:, None], axis=-1)[:, 0]
    want_ent = -np.sum(np.exp(logp_all) * logp_all, axis=-1)
    want_logp[GREEDY_ROW] = want_ent[GREEDY_ROW] = 0.0
    np.testing.assert_allclose(logp, want_logp, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ent, want_ent, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bad", [0, V + 1, 150.0, True, jnp.int32(150)])
def test_valid_vocab_must_be_a_static_int_in_range(problem, bad):
    p = problem
    with pytest.raises(ValueError, match="valid_vocab"):
        fused_logprobs(p["hidden"], p["unembed"], p["targets"], impl="xla", valid_vocab=bad)
    with pytest.raises(ValueError, match="valid_vocab"):
        fused_sample(p["key"], p["hidden"], p["unembed"], 1.0, impl="xla", valid_vocab=bad)
