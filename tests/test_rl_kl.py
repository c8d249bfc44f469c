"""KL estimators and KL-in-reward folding against hand numbers."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coop_jax.rl import KL_ESTIMATORS, fold_kl_into_rewards, kl_penalty

LN2 = math.log(2.0)
# log r = logp - ref_logp = (-ln 2, 0, 1)
LOGP = jnp.array([0.0, -1.0, 1.0])
REF = jnp.array([LN2, -1.0, 0.0])


@pytest.mark.parametrize(
    "name,expected",
    [
        ("k1", [-LN2, 0.0, 1.0]),
        ("k2", [0.5 * LN2**2, 0.0, 0.5]),
        # exp(ln 2) - 1 - ln 2 ; 0 ; exp(-1) - 1 + 1
        ("k3_unclamped", [1.0 - LN2, 0.0, math.exp(-1.0)]),
        ("k3", [1.0 - LN2, 0.0, math.exp(-1.0)]),
        ("low_var_kl", [1.0 - LN2, 0.0, math.exp(-1.0)]),
    ],
)
def test_estimators_hand_numbers(name, expected):
    np.testing.assert_allclose(kl_penalty(name, LOGP, REF), expected, rtol=1e-6, atol=1e-7)


def test_low_var_kl_clamps_like_verl():
    log_r = jnp.array([-15.0, 40.0, 5.0, -30.0])
    k3 = kl_penalty("k3_unclamped", log_r, jnp.zeros(4))
    expected = [math.exp(15.0) - 16.0, 39.0, math.exp(-5.0) + 4.0]
    np.testing.assert_allclose(k3[:3], expected, rtol=1e-5)
    # -15 and 40 exceed 10 after k3; -30 is first clamped to -20, still > 10; 5 stays unclamped
    low = kl_penalty("low_var_kl", log_r, jnp.zeros(4))
    np.testing.assert_allclose(low, [10.0, 10.0, math.exp(-5.0) + 4.0, 10.0], rtol=1e-6)
    # verl's "k3" is its clamped low_var_kl: the same name means the same estimator here
    np.testing.assert_array_equal(kl_penalty("k3", log_r, jnp.zeros(4)), low)


def test_low_var_kl_gradient_finite_far_from_reference():
    # exp(100) overflows float32; the inner clamp keeps the gradient 0 instead of inf * 0 = NaN
    fn = lambda lp: kl_penalty("low_var_kl", lp, jnp.zeros(3)).sum()  # noqa: E731
    grad = jax.grad(fn)(jnp.array([-100.0, 100.0, 0.5]))
    np.testing.assert_allclose(grad, [0.0, 0.0, 1.0 - math.exp(-0.5)], rtol=1e-6)


def test_fold_kl_into_rewards_ignores_masked_nan():
    rewards = jnp.array([1.0, 0.5])
    kl = jnp.array([[0.1, 0.2, jnp.nan], [0.3, 7.0, 7.0]])
    mask = jnp.array([[1, 1, 0], [1, 0, 0]], bool)
    # 1 - 0.5 * (0.1 + 0.2) ; 0.5 - 0.5 * 0.3
    folded = fold_kl_into_rewards(rewards, kl, mask, 0.5)
    np.testing.assert_allclose(folded, [0.85, 0.35], rtol=1e-6)


def test_errors():
    with pytest.raises(ValueError, match="kl_estimator='k4'"):
        kl_penalty("k4", LOGP, REF)
    with pytest.raises(ValueError, match="ref_logp shape"):
        kl_penalty("k1", LOGP, REF[:2])
    with pytest.raises(ValueError, match="rewards must be"):
        fold_kl_into_rewards(jnp.ones(3), jnp.ones((2, 2)), jnp.ones((2, 2)), 0.1)
    assert set(KL_ESTIMATORS) == {"k1", "k2", "k3", "k3_unclamped", "low_var_kl"}
