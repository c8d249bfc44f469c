"""KL estimators and KL-in-reward folding against hand numbers."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coop_jax.rl import KL_CONTROLLERS, KL_ESTIMATORS, fold_kl_into_rewards, kl_penalty, reward_kl

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
        ("abs", [LN2, 0.0, 1.0]),
        ("k1+", [-LN2, 0.0, 1.0]),
        ("k3+", [1.0 - LN2, 0.0, math.exp(-1.0)]),
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
    assert set(KL_ESTIMATORS) == {"k1", "k2", "k3", "k3_unclamped", "low_var_kl", "abs", "k1+",
                                  "k3+"}


@pytest.mark.parametrize("name", ["k1+", "k3+"])
def test_straight_through_estimators_take_the_gradient_of_k2(name):
    # d/dlogp of 1/2 (logp - ref)^2 is log r = (-ln 2, 0, 1), whatever the value's estimator
    grad = jax.grad(lambda lp: kl_penalty(name, lp, REF).sum())(LOGP)
    np.testing.assert_allclose(grad, [-LN2, 0.0, 1.0], rtol=1e-6, atol=1e-7)
    # without the "+": k1's gradient is 1 everywhere, k3's is 1 - exp(-log r)
    plain = jax.grad(lambda lp: kl_penalty(name[:-1], lp, REF).sum())(LOGP)
    assert not np.allclose(plain, grad)


def test_abs_kl_gradient_is_the_sign():
    # logp (0, 1) against ref (ln 2, -1): log r = (-ln 2, 2)
    grad = jax.grad(lambda lp: kl_penalty("abs", lp, REF[:2]).sum())(jnp.array([0.0, 1.0]))
    np.testing.assert_allclose(grad, [-1.0, 1.0])


def test_adaptive_controller_hand_numbers():
    adaptive = KL_CONTROLLERS["adaptive"]
    # KL 0.15 against target 0.1: error +0.5 clipped to +0.2; 32 rollouts over a horizon of 100
    np.testing.assert_allclose(adaptive(0.1, 0.15, 32, 0.1, 100), 0.1 * (1 + 0.2 * 0.32),
                               rtol=1e-6)
    # KL 0.09: error -0.1, inside the clip
    np.testing.assert_allclose(adaptive(0.1, 0.09, 32, 0.1, 100), 0.1 * (1 - 0.1 * 0.32),
                               rtol=1e-6)
    assert KL_CONTROLLERS["fixed"](0.1, 5.0, 32, 0.1, 100) == 0.1


def test_reward_kl_is_the_mean_of_each_rollouts_token_mean():
    kl = jnp.array([[0.1, 0.3, jnp.nan], [2.0, 9.0, 9.0]])
    mask = jnp.array([[1, 1, 0], [1, 0, 0]], bool)
    np.testing.assert_allclose(reward_kl(kl, mask), (0.2 + 2.0) / 2, rtol=1e-6)
