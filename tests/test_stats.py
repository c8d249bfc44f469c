"""Hand-checked values for the evaluation statistics (pure numpy, no model)."""
import itertools
import math

import numpy as np
import pytest

from coop_jax.stats import average_ranks, bootstrap_ci, mean_ci, pass_at_k, roc_auc


@pytest.mark.parametrize("n,c,k,expected", [
    (5, 0, 1, 0.0),
    (5, 5, 3, 1.0),
    (4, 1, 1, 0.25),
    (4, 2, 2, 1 - 1 / 6),       # 1 - C(2,2)/C(4,2)
    (10, 3, 5, 1 - 21 / 252),   # 1 - C(7,5)/C(10,5)
    (8, 1, 8, 1.0),             # n - c < k
])
def test_pass_at_k_hand_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_matches_binomial_formula_and_k1_is_fraction_correct():
    for n in range(1, 9):
        for c, k in itertools.product(range(n + 1), range(1, n + 1)):
            exact = 1 - math.comb(n - c, k) / math.comb(n, k)
            assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)
        assert pass_at_k(n, 1, 1) == pytest.approx(1 / n)


@pytest.mark.parametrize("n,c,k", [(4, 5, 1), (4, -1, 1), (4, 2, 0), (4, 2, 5), (0, 0, 1)])
def test_pass_at_k_rejects_bad_counts(n, c, k):
    with pytest.raises(ValueError, match="pass_at_k"):
        pass_at_k(n, c, k)


def test_bootstrap_ci_constant_and_binary_values():
    const = bootstrap_ci([0.0] * 7)
    assert const == {"mean": 0.0, "ci_low": 0.0, "ci_high": 0.0}
    # 200 zeros and 200 ones: mean 0.5, normal-approximation half-width 1.96 * 0.5 / sqrt(400).
    values = np.r_[np.zeros(200), np.ones(200)]
    ci = bootstrap_ci(values, resamples=2000, seed=3)
    assert ci["mean"] == 0.5
    assert ci["ci_low"] < 0.5 < ci["ci_high"]
    assert (ci["ci_high"] - ci["ci_low"]) / 2 == pytest.approx(1.96 * 0.5 / 20, rel=0.12)


def test_bootstrap_ci_is_seeded_and_ordered():
    values = np.random.default_rng(0).exponential(size=13)
    a, b = bootstrap_ci(values, seed=5), bootstrap_ci(values, seed=5)
    assert a == b
    assert bootstrap_ci(values, seed=6) != a
    for seed in range(5):
        ci = bootstrap_ci(values[:3], resamples=50, seed=seed)
        assert ci["ci_low"] <= ci["mean"] <= ci["ci_high"]


def test_bootstrap_ci_custom_statistic_and_errors():
    data = np.array([[1.0, 1], [0.2, 0], [0.7, 1], [0.4, 0], [0.6, 0], [0.9, 1]])
    ci = bootstrap_ci(data, statistic=lambda a: roc_auc(a[:, 0], a[:, 1]), resamples=200)
    assert ci["mean"] == 1.0 and ci["ci_low"] <= 1.0 == ci["ci_high"]
    with pytest.raises(ValueError, match="non-empty"):
        bootstrap_ci([])
    with pytest.raises(ValueError, match="alpha"):
        bootstrap_ci([1.0], alpha=1.5)


def test_mean_ci_t_interval_hand_value():
    ci = mean_ci([1.0, 2.0, 3.0])
    t_975_df2 = 4.302652729911275
    assert ci["mean"] == 2.0 and ci["std"] == 1.0 and ci["n"] == 3
    assert ci["half_width"] == pytest.approx(t_975_df2 / math.sqrt(3), rel=1e-9)
    assert ci["ci_low"] == pytest.approx(2.0 - t_975_df2 / math.sqrt(3), rel=1e-9)
    single = mean_ci([0.4, float("nan")])
    assert single["mean"] == 0.4 and single["n"] == 1 and math.isnan(single["half_width"])
    assert mean_ci([])["n"] == 0


def test_average_ranks_ties():
    np.testing.assert_allclose(average_ranks([3, 1, 4, 1, 5]), [3, 1.5, 4, 1.5, 5])
    np.testing.assert_allclose(average_ranks([2, 2, 2]), [2, 2, 2])


def test_roc_auc_hand_values_and_ties():
    assert roc_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == pytest.approx(0.75)
    assert roc_auc([0.5, 0.5, 0.2, 0.9], [1, 0, 0, 1]) == pytest.approx(3.5 / 4)
    assert roc_auc([1, 2, 3], [0, 1, 1]) == 1.0
    assert roc_auc([3, 2, 1], [0, 1, 1]) == 0.0
    assert roc_auc([1, 1], [True, False]) == 0.5
    assert math.isnan(roc_auc([1, 2], [1, 1]))
    with pytest.raises(ValueError, match="differ"):
        roc_auc([1, 2, 3], [1, 0])


def test_roc_auc_equals_pairwise_count():
    rng = np.random.default_rng(1)
    scores = rng.integers(0, 5, size=40).astype(float)  # many ties
    labels = rng.integers(0, 2, size=40)
    pos, neg = scores[labels == 1], scores[labels == 0]
    pairwise = ((pos[:, None] > neg[None]) + 0.5 * (pos[:, None] == neg[None])).mean()
    assert roc_auc(scores, labels) == pytest.approx(pairwise, abs=1e-12)
