"""Advantage estimators against hand-computed numbers."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coop_jax.rl import ADVANTAGES, compute_advantages


def test_grpo_hand_example():
    # mean 0.5; std(ddof=1) = sqrt(4 * 0.25 / 3) = sqrt(1/3)
    adv = compute_advantages("grpo", jnp.array([[1.0, 0.0, 0.0, 1.0]]))
    expected = np.array([[0.5, -0.5, -0.5, 0.5]]) / (np.sqrt(1 / 3) + 1e-6)
    np.testing.assert_allclose(adv, expected, rtol=1e-6)
    # mean 1/3; deviations (-1/3, -1/3, 2/3); std = sqrt((1/9 + 1/9 + 4/9) / 2) = sqrt(1/3)
    adv = compute_advantages("grpo", jnp.array([[0.0, 0.0, 1.0]]), eps=0.0)
    np.testing.assert_allclose(adv, [[-0.57735027, -0.57735027, 1.15470054]], rtol=1e-6)


def test_drgrpo_and_rloo_hand_example():
    r = jnp.array([[1.0, 0.0, 0.0], [3.0, 1.0, 2.0]])
    np.testing.assert_allclose(
        compute_advantages("drgrpo", r), [[2 / 3, -1 / 3, -1 / 3], [1.0, -1.0, 0.0]], rtol=1e-6
    )
    # r_i minus mean of the other two: 1-0, 0-0.5, 0-0.5 ; 3-1.5, 1-2.5, 2-2
    np.testing.assert_allclose(
        compute_advantages("rloo", r), [[1.0, -0.5, -0.5], [1.5, -1.5, 0.0]], rtol=1e-6
    )


@pytest.mark.parametrize("name", sorted(ADVANTAGES))
def test_constant_groups_are_exactly_zero(name):
    r = jnp.array([[0.1, 0.1, 0.1], [1.0, 1.0, 1.0], [0.7, 0.3, 0.3]])
    adv = np.asarray(compute_advantages(name, r))
    assert np.all(np.isfinite(adv))
    assert np.array_equal(adv[:2], np.zeros((2, 3)))
    assert np.all(adv[2] != 0)


@pytest.mark.parametrize("name", sorted(ADVANTAGES))
def test_single_rollout_groups_are_zero(name):
    adv = np.asarray(compute_advantages(name, jnp.array([[0.3], [1.0]])))
    assert np.array_equal(adv, np.zeros((2, 1)))


def test_jit_int_rewards_and_errors():
    fn = jax.jit(compute_advantages, static_argnames=("name",))
    r = jnp.array([[1, 0, 0, 1]])
    np.testing.assert_allclose(fn("grpo", r), compute_advantages("grpo", r.astype(jnp.float32)))
    with pytest.raises(ValueError, match="advantage='ppo'.*drgrpo.*grpo.*rloo"):
        compute_advantages("ppo", r)
    with pytest.raises(ValueError, match="num_groups, G"):
        compute_advantages("grpo", jnp.ones(4))
