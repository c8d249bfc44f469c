"""Advantage estimators against hand-computed numbers."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coop_jax.rl import ADVANTAGES, compute_advantages, informative_groups, ragged_advantages
from coop_jax.rl.advantages import GROUP_RELATIVE, group_layout


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


@pytest.mark.parametrize("name", GROUP_RELATIVE)
def test_constant_groups_are_exactly_zero(name):
    r = jnp.array([[0.1, 0.1, 0.1], [1.0, 1.0, 1.0], [0.7, 0.3, 0.3]])
    adv = np.asarray(compute_advantages(name, r))
    assert np.all(np.isfinite(adv))
    assert np.array_equal(adv[:2], np.zeros((2, 3)))
    assert np.all(adv[2] != 0)


@pytest.mark.parametrize("name", GROUP_RELATIVE)
def test_single_rollout_groups_are_zero(name):
    adv = np.asarray(compute_advantages(name, jnp.array([[0.3], [1.0]])))
    assert np.array_equal(adv, np.zeros((2, 1)))


def test_jit_int_rewards_and_errors():
    fn = jax.jit(compute_advantages, static_argnames=("name",))
    r = jnp.array([[1, 0, 0, 1]])
    np.testing.assert_allclose(fn("grpo", r), compute_advantages("grpo", r.astype(jnp.float32)))
    with pytest.raises(ValueError, match="advantage='ppo'.*drgrpo.*grpo.*reinforce.*rloo"):
        compute_advantages("ppo", r)
    with pytest.raises(ValueError, match="num_groups, G"):
        compute_advantages("grpo", jnp.ones(4))
    with pytest.raises(ValueError, match="present must have shape"):
        compute_advantages("grpo", r, present=jnp.ones((1, 3), bool))


def test_every_estimator_is_either_group_relative_or_batch_whitened():
    assert set(ADVANTAGES) == set(GROUP_RELATIVE) | {"reinforce_plus_plus",
                                                     "reinforce_plus_plus_baseline"}


def test_reinforce_plus_plus_whitens_over_the_batch_by_tokens():
    # rewards 1, 0, 0 with 1, 2, 1 tokens: token values (1, 0, 0, 0), mean 1/4,
    # unbiased var = (9/16 + 3 * 1/16) / 3 = 1/4, so A = (r - 1/4) / sqrt(1/4 + 1e-8)
    r, tok = jnp.array([[1.0, 0.0], [0.0, 0.0]]), jnp.array([[1, 2], [1, 0]])
    present = jnp.array([[True, True], [True, False]])
    adv = compute_advantages("reinforce_plus_plus", r, present=present, tokens=tok)
    s = np.sqrt(0.25 + 1e-8)
    np.testing.assert_allclose(adv, [[0.75 / s, -0.25 / s], [-0.25 / s, 0.0]], rtol=1e-6)
    # one weight per rollout without tokens: values (1, 0, 0, 0) again, the same numbers
    four = compute_advantages("reinforce_plus_plus", jnp.array([[1.0, 0.0, 0.0, 0.0]]))
    np.testing.assert_allclose(four, [[0.75 / s, -0.25 / s, -0.25 / s, -0.25 / s]], rtol=1e-6)


def test_reinforce_plus_plus_baseline_subtracts_the_group_mean_first():
    # groups (1, 0) and (1, 1): centred (0.5, -0.5) and (0, 0); batch mean 0, unbiased var
    # (0.25 + 0.25) / 3 = 1/6 over the four rollouts
    adv = compute_advantages("reinforce_plus_plus_baseline", jnp.array([[1.0, 0.0], [1.0, 1.0]]))
    s = np.sqrt(1 / 6 + 1e-8)
    np.testing.assert_allclose(adv, [[0.5 / s, -0.5 / s], [0.0, 0.0]], rtol=1e-6, atol=1e-7)


def test_groups_of_different_sizes_in_one_call():
    # groups a: (1, 0, 0), b: (2, 4), c: (5) in verl's flat layout with ids
    rewards = [1.0, 2.0, 0.0, 4.0, 0.0, 5.0]
    ids = ["a", "b", "a", "b", "a", "c"]
    rows, cols, n = group_layout(ids)
    assert n == 3 and rows.tolist() == [0, 1, 0, 1, 0, 2] and cols.tolist() == [0, 0, 1, 1, 2, 0]
    # grpo: a has mean 1/3, std sqrt(1/3); b mean 3, std sqrt(2); c alone: no signal, 0
    adv = ragged_advantages("grpo", rewards, ids, eps=0.0)
    sa, sb = np.sqrt(1 / 3), np.sqrt(2.0)
    np.testing.assert_allclose(adv, [(2 / 3) / sa, -1 / sb, (-1 / 3) / sa, 1 / sb,
                                     (-1 / 3) / sa, 0.0], rtol=1e-6)
    # rloo on b: 2 - 4, 4 - 2; drgrpo on a: r - 1/3
    np.testing.assert_allclose(np.asarray(ragged_advantages("rloo", rewards, ids))[[1, 3]],
                               [-2.0, 2.0])
    np.testing.assert_allclose(np.asarray(ragged_advantages("drgrpo", rewards, ids))[[0, 2, 4]],
                               [2 / 3, -1 / 3, -1 / 3], rtol=1e-6)
    with pytest.raises(ValueError, match="group_ids must both be"):
        ragged_advantages("grpo", rewards, ids[:3])


def test_a_padded_row_equals_the_same_group_unpadded():
    r = jnp.array([[3.0, 1.0, 2.0, 0.0]])
    present = jnp.array([[True, True, True, False]])
    for name in GROUP_RELATIVE:
        padded = compute_advantages(name, r, present=present)
        np.testing.assert_allclose(padded[0, :3], compute_advantages(name, r[:, :3])[0],
                                   rtol=1e-6)
        assert padded[0, 3] == 0.0


@pytest.mark.parametrize("name", GROUP_RELATIVE)
def test_dynamic_sampling_keeps_exactly_the_groups_with_an_advantage(name):
    # one rule for both: a spread of a few float32 ulps is a signal, exact equality is not.
    # grpo on (1, 1 + u, 1 + u, 1), u = 2^-20: mean 1 + u/2, deviations -+u/2 (exact in
    # float32), std(ddof=1) = sqrt(4 (u/2)^2 / 3) = u / sqrt(3); with eps = 0 the advantages are
    # -+sqrt(3)/2, full size
    u = np.float32(2.0**-20)
    r = np.array([[1.0, 1.0 + u, 1.0 + u, 1.0], [0.25] * 4, [1.0, 0.0, 1.0, 0.0]], np.float32)
    adv = np.asarray(compute_advantages(name, jnp.asarray(r), eps=0.0))
    np.testing.assert_array_equal(informative_groups(r), np.any(adv != 0, axis=1))
    np.testing.assert_array_equal(informative_groups(r), [True, False, True])
    if name == "grpo":
        np.testing.assert_allclose(adv[0], np.array([-1, 1, 1, -1]) * np.sqrt(3) / 2, rtol=1e-6)
