"""DAPO dynamic sampling: filtering, refill, truncation and the documented shortfall policy."""
import numpy as np
import pytest

from coop_jax.rl import compute_advantages, fill_batch, informative_groups


def _drawer(batches):
    it = iter(batches)
    return lambda: next(it)


def _batch(rewards, first_id):
    rewards = np.asarray(rewards, np.float32)
    n = rewards.shape[0]
    ids = np.arange(first_id, first_id + n)
    return {"rewards": rewards, "ids": ids, "tokens": np.zeros((n, 2, 3))}


DRAW_A = _batch([[1, 1], [0, 1], [1, 0]], 0)  # informative: ids 1, 2
DRAW_B = _batch([[0, 0], [1, 0], [0, 1]], 3)  # informative: ids 4, 5
DRAW_C = _batch([[1, 1], [0, 0], [0.5, 0.5]], 6)  # nothing informative


def test_informative_groups_hand_example():
    r = np.array([[1, 1, 1], [0, 1, 0], [0.5, 0.5 + 1e-8, 0.5], [np.nan, 1, 1]])
    # exact equality decides (a spread of 1e-8 is kept), as the advantages' zero rule
    np.testing.assert_array_equal(informative_groups(r), [False, True, True, False])


def test_fill_stops_when_full_and_truncates_surplus():
    out, stats = fill_batch(_drawer([DRAW_A, DRAW_B, DRAW_C]), target_groups=3, max_draws=5)
    np.testing.assert_array_equal(out["ids"], [1, 2, 4])
    assert out["tokens"].shape == (3, 2, 3) and out["rewards"].shape == (3, 2)
    assert stats == dict(
        draws=2, groups_seen=6, groups_informative=4, groups_kept=3, groups_padded=0
    )


def test_shortfall_pads_with_latest_uninformative_groups():
    out, stats = fill_batch(_drawer([DRAW_A, DRAW_B, DRAW_C]), target_groups=6, max_draws=3)
    # kept 1, 2, 4, 5 then uninformative groups of the latest draw (C: 6, 7) first
    np.testing.assert_array_equal(out["ids"], [1, 2, 4, 5, 6, 7])
    assert stats == dict(
        draws=3, groups_seen=9, groups_informative=4, groups_kept=4, groups_padded=2
    )


def test_no_informative_group_returns_last_draw_with_zero_advantage():
    draws = _drawer([DRAW_C, _batch([[2, 2], [3, 3]], 10)])
    out, stats = fill_batch(draws, target_groups=3, max_draws=2)
    # last draw (ids 10, 11) unfiltered, topped up from the previous draw
    np.testing.assert_array_equal(out["ids"], [10, 11, 6])
    assert stats["groups_kept"] == 0 and stats["groups_padded"] == 3
    assert np.array_equal(np.asarray(compute_advantages("grpo", out["rewards"])), np.zeros((3, 2)))


def test_too_few_groups_overall_are_cycled():
    out, stats = fill_batch(_drawer([DRAW_A]), target_groups=5, max_draws=1)
    # kept 1, 2 then discarded 0, cycled to length 5
    np.testing.assert_array_equal(out["ids"], [1, 2, 0, 1, 2])
    assert stats["groups_seen"] == 3 and stats["groups_padded"] == 3


def test_errors():
    with pytest.raises(ValueError, match="target_groups"):
        fill_batch(_drawer([DRAW_A]), target_groups=0, max_draws=1)
    with pytest.raises(ValueError, match="max_draws"):
        fill_batch(_drawer([DRAW_A]), target_groups=1, max_draws=0)
    with pytest.raises(ValueError, match="'rewards'"):
        fill_batch(_drawer([{"ids": np.arange(2)}]), target_groups=1, max_draws=1)
    bad = dict(DRAW_A, ids=np.arange(2))
    with pytest.raises(ValueError, match="'ids' has leading dim"):
        fill_batch(_drawer([bad]), target_groups=1, max_draws=1)
    other_keys = {"rewards": DRAW_C["rewards"]}
    with pytest.raises(ValueError, match="differ from first draw"):
        fill_batch(_drawer([DRAW_C, other_keys]), target_groups=1, max_draws=2)
    with pytest.raises(ValueError, match="no groups"):
        fill_batch(_drawer([{"rewards": np.zeros((0, 2))}]), target_groups=1, max_draws=1)
    with pytest.raises(ValueError, match=r"\[n, G\]"):
        informative_groups(np.zeros(3))
