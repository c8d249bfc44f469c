"""DAPO overlong masking / soft punishment against hand numbers."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coop_jax.rl import OVERLONG, apply_overlong, overlong_loss_mask, overlong_reward_penalty

# max_len 10, cache_len 4: free up to 6, linear in (6, 10], -factor beyond 10
LENGTHS = jnp.array([5, 6, 7, 8, 10, 12])


def test_penalty_hand_numbers():
    np.testing.assert_allclose(
        overlong_reward_penalty(LENGTHS, 10, 4), [0, 0, -0.25, -0.5, -1.0, -1.0], rtol=1e-6
    )
    np.testing.assert_allclose(
        overlong_reward_penalty(LENGTHS, 10, 4, factor=2.0),
        [0, 0, -0.5, -1.0, -2.0, -2.0],
        rtol=1e-6,
    )


def test_loss_mask():
    weights = overlong_loss_mask(jnp.array([True, False, True]))
    np.testing.assert_array_equal(weights, [0.0, 1.0, 0.0])


def test_apply_overlong_modes_under_jit():
    rewards = jnp.array([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    truncated = LENGTHS >= 10
    out = {}
    for name in sorted(OVERLONG):
        fn = jax.jit(functools.partial(apply_overlong, name, max_len=10, cache_len=4, factor=0.5))
        out[name] = fn(rewards, LENGTHS, truncated)
    np.testing.assert_array_equal(out["none"][0], rewards)
    np.testing.assert_array_equal(out["none"][1], np.ones(6))
    np.testing.assert_array_equal(out["mask"][0], rewards)
    np.testing.assert_array_equal(out["mask"][1], [1, 1, 1, 1, 0, 0])
    np.testing.assert_allclose(out["penalty"][0], [1.0, 0.0, 0.875, 0.75, -0.5, 0.5], rtol=1e-6)
    np.testing.assert_array_equal(out["penalty"][1], np.ones(6))


def test_errors():
    with pytest.raises(ValueError, match="overlong='cut'"):
        apply_overlong("cut", jnp.ones(2), jnp.ones(2), jnp.ones(2, bool), max_len=10, cache_len=4)
    with pytest.raises(ValueError, match="cache_len"):
        overlong_reward_penalty(LENGTHS, 10, 0)
    with pytest.raises(ValueError, match="max_len"):
        overlong_reward_penalty(LENGTHS, 0, 0)
    with pytest.raises(ValueError, match="lengths"):
        apply_overlong("none", jnp.ones(2), jnp.ones(3), jnp.ones(2, bool), max_len=10, cache_len=4)
