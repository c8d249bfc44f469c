"""fused_logprobs: forward and GRPO-loss gradient parity with the materialised reference.

Tiny shapes (V=300 with 128-wide tiles, so the last vocab tile is ragged; N=40 with 16-row
blocks, so the last row block is padded). Pallas kernels run in interpret mode on CPU.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas import tpu as pltpu

from coop_jax.kernels import fused_logprobs

N, D, V = 40, 32, 300
TEMP = 0.7
MASKED_ROWS = (3, 17, 38)
CLIP_EPS = 0.2


def grpo_loss(logp, ent, old_logp, adv, mask, ent_coef=0.05):
    """Clipped surrogate (PPO/GRPO) with an entropy bonus, token-mean over the mask."""
    ratio = jnp.exp(logp - old_logp)
    surrogate = jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - CLIP_EPS, 1 + CLIP_EPS) * adv)
    return -jnp.sum((surrogate + ent_coef * ent) * mask) / jnp.sum(mask)


@pytest.fixture(scope="module")
def problem():
    ks = jax.random.split(jax.random.key(0), 4)
    hidden = jax.random.normal(ks[0], (N, D), jnp.float32)
    unembed = jax.random.normal(ks[1], (D, V), jnp.float32) * 0.4
    targets = jax.random.randint(ks[2], (N,), 0, V)
    targets = targets.at[MASKED_ROWS[0]].set(-1).at[MASKED_ROWS[1]].set(-100)
    targets = targets.at[MASKED_ROWS[2]].set(V + 3)  # out of range counts as masked too
    mask = jnp.ones((N,)).at[jnp.array(MASKED_ROWS)].set(0.0)
    ref_logp, _ = fused_logprobs(hidden, unembed, targets, temperature=TEMP, impl="reference")
    # ratios exp(delta) of 0.55 / 0.9 / 1.1 / 1.8 against advantages of both signs
    delta = jnp.tile(jnp.array([-0.6, -0.1, 0.1, 0.6]), N // 4)
    adv = jnp.tile(jnp.array([1.0, -1.0, 0.5]), N // 3 + 1)[:N]
    old = ref_logp - delta
    return dict(hidden=hidden, unembed=unembed, targets=targets, old=old, adv=adv, mask=mask)


def _value_and_grad(p, impl, **kw):
    def loss(hidden, unembed):
        logp, ent = fused_logprobs(hidden, unembed, p["targets"], temperature=TEMP, impl=impl,
                                   **kw)
        return grpo_loss(logp, ent, p["old"], p["adv"], p["mask"]), (logp, ent)
    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))(
        p["hidden"], p["unembed"])


@pytest.fixture(scope="module")
def reference(problem):
    return _value_and_grad(problem, "reference")


def test_loss_exercises_both_clip_branches(problem, reference):
    (_, (logp, _)), _ = reference
    ratio = np.exp(np.asarray(logp - problem["old"]))
    adv, live = np.asarray(problem["adv"]), np.asarray(problem["mask"]) > 0
    assert np.any(live & (ratio > 1 + CLIP_EPS) & (adv > 0)), "upper clip branch unused"
    assert np.any(live & (ratio < 1 - CLIP_EPS) & (adv < 0)), "lower clip branch unused"
    assert np.any(live & (np.abs(ratio - 1) < CLIP_EPS)), "unclipped branch unused"


def _races_found() -> bool | None:
    try:
        from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc
    except ImportError:
        return None
    return None if ipc.races is None else bool(ipc.races.races_found)


TPU_PARAMS = pltpu.InterpretParams(detect_races=True, uninitialized_memory="nan",
                                   num_cores_or_threads=2)
CASES = {
    "xla-tile128": ("xla", dict(vocab_tile=128)),
    "xla-tile100-exact": ("xla", dict(vocab_tile=100)),
    "xla-tile-gt-vocab": ("xla", dict(vocab_tile=512)),
    "pallas_tpu-interpret": ("pallas_tpu", dict(interpret=True, vocab_tile=128, row_tile=16)),
    "pallas_tpu-interpret-params": ("pallas_tpu", dict(interpret=TPU_PARAMS, vocab_tile=128,
                                                       row_tile=16)),
    "pallas_gpu-interpret": ("pallas_gpu", dict(interpret=True, vocab_tile=128, row_tile=16)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_forward_and_grad_parity(problem, reference, case):
    impl, kw = CASES[case]
    (loss, (logp, ent)), (dh, dw) = _value_and_grad(problem, impl, **kw)
    (ref_loss, (ref_logp, ref_ent)), (ref_dh, ref_dw) = reference
    np.testing.assert_allclose(logp, ref_logp, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ent, ref_ent, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5, atol=1e-6)
    for got, want in ((dh, ref_dh), (dw, ref_dw)):
        scale = float(jnp.max(jnp.abs(want)))
        assert scale > 0
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * scale)
    rows = np.array(MASKED_ROWS)
    assert np.all(np.asarray(logp)[rows] == 0) and np.all(np.asarray(ent)[rows] == 0)
    assert np.all(np.asarray(dh)[rows] == 0), "masked rows must not receive gradient"
    if isinstance(kw.get("interpret"), pltpu.InterpretParams):
        assert _races_found() is not True, "TPU interpret mode detected a data race"


def test_masked_rows_do_not_touch_unembed_gradient(problem):
    """Gradient of sum(logp + entropy) over masked rows only is exactly zero."""
    p = problem
    only_masked = jnp.full((N,), -1, jnp.int32)

    def f(unembed):
        logp, ent = fused_logprobs(p["hidden"], unembed, only_masked, impl="xla", vocab_tile=128)
        return jnp.sum(logp + ent)

    assert float(jnp.max(jnp.abs(jax.grad(f)(p["unembed"])))) == 0.0


def test_bf16_inputs_accumulate_in_f32(problem):
    h = problem["hidden"].astype(jnp.bfloat16)
    w = problem["unembed"].astype(jnp.bfloat16)
    tgt = problem["targets"]

    def run(impl, **kw):
        def f(h, w):
            logp, ent = fused_logprobs(h, w, tgt, temperature=TEMP, impl=impl, **kw)
            return jnp.sum(logp) + 0.1 * jnp.sum(ent), (logp, ent)
        return jax.jit(jax.value_and_grad(f, argnums=(0, 1), has_aux=True))(h, w)

    (_, (logp, ent)), (dh, dw) = run("xla", vocab_tile=128)
    (_, (ref_logp, ref_ent)), (ref_dh, ref_dw) = run("reference")
    assert logp.dtype == jnp.float32 and dh.dtype == jnp.bfloat16 and dw.dtype == jnp.bfloat16
    # logits accumulate in f32 from the same bf16 products: only summation order differs
    np.testing.assert_allclose(logp, ref_logp, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ent, ref_ent, rtol=1e-4, atol=1e-4)
    for got, want in ((dh, ref_dh), (dw, ref_dw)):
        got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
        assert np.max(np.abs(got - want)) <= 2e-2 * np.max(np.abs(want))


def test_traced_temperature_and_auto_impl(problem):
    p = problem

    @jax.jit
    def f(temp):
        return fused_logprobs(p["hidden"], p["unembed"], p["targets"], temperature=temp)

    logp, ent = f(jnp.float32(TEMP))  # impl="auto" is the xla scan on CPU
    ref_logp, ref_ent = fused_logprobs(p["hidden"], p["unembed"], p["targets"],
                                       temperature=TEMP, impl="reference")
    np.testing.assert_allclose(logp, ref_logp, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ent, ref_ent, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bad, match", [
    (dict(hidden=jnp.zeros((2, 4, D))), "hidden"),
    (dict(unembed=jnp.zeros((D + 1, V))), "unembed"),
    (dict(targets=jnp.zeros((N,), jnp.float32)), "targets"),
    (dict(targets=jnp.zeros((N + 1,), jnp.int32)), "targets"),
    (dict(temperature=0.0), "temperature"),
    (dict(impl="cuda"), "impl"),
    (dict(impl="pallas"), "interpret"),  # CPU without interpret mode
    (dict(impl="xla", vocab_tile=0), "vocab_tile"),
    (dict(impl="pallas_tpu", interpret=True, vocab_tile=100), "vocab_tile"),
    (dict(impl="pallas_gpu", interpret=True, row_tile=24), "row_tile"),
])
def test_bad_input_names_the_field(problem, bad, match):
    args = dict(hidden=problem["hidden"], unembed=problem["unembed"],
                targets=problem["targets"], temperature=TEMP)
    args.update(bad)
    call = functools.partial(fused_logprobs, args.pop("hidden"), args.pop("unembed"),
                             args.pop("targets"))
    with pytest.raises(ValueError, match=match):
        call(**args)
