"""Small statistics for evaluation reports and held-out RM accuracy (numpy; scipy only for the t
quantile).

* ``bootstrap_ci``: percentile bootstrap over problems (the unit that was sampled);
  ``BOOTSTRAP`` is the reports' setting and ``ci`` the bootstrap interval as JSON.
* ``mean_ci``: Student-t interval, for aggregating a handful of seeds.
* ``pass_at_k``: the unbiased pass@k estimator of Chen et al. (2021).
* ``roc_auc``: rank-based (Mann-Whitney) AUC with tied scores given their average rank.
* ``ols_slope``: the least-squares slope of y on x (a trend per seed).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

Interval = dict[str, float]

BOOTSTRAP = {"resamples": 1000, "seed": 0, "alpha": 0.05}


def _check_alpha(alpha: float) -> None:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")


def bootstrap_ci(values, *, statistic: Callable[[np.ndarray], float] | None = None,
                 resamples: int = 1000, seed: int = 0, alpha: float = 0.05) -> Interval:
    """``{"mean", "ci_low", "ci_high"}``: the statistic on ``values`` and its percentile bootstrap
    (1 - alpha) interval, resampling the rows of ``values`` with replacement.

    ``statistic`` (default: the mean, vectorised) maps a resampled array to a float; NaN results
    (e.g. an AUC of a one-class resample) are dropped. The interval is widened to contain the
    point estimate, which a percentile bootstrap of a skewed small sample can miss by a hair.
    """
    _check_alpha(alpha)
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 0 or len(values) == 0:
        raise ValueError("bootstrap_ci needs a non-empty 1-D (or [n, d]) array of values")
    n = len(values)
    rng = np.random.default_rng(seed)
    if statistic is None:
        if values.ndim != 1:
            raise ValueError(f"the default (mean) statistic needs 1-D values, got {values.shape}")
        point = float(values.mean())
        stats = np.empty(resamples)
        chunk = max(1, 2_000_000 // n)  # bound the index matrix to ~16 MB
        for lo in range(0, resamples, chunk):
            hi = min(resamples, lo + chunk)
            stats[lo:hi] = values[rng.integers(0, n, size=(hi - lo, n))].mean(axis=1)
    else:
        point = float(statistic(values))
        stats = np.array([statistic(values[rng.integers(0, n, size=n)])
                          for _ in range(resamples)], dtype=np.float64)
    stats = stats[np.isfinite(stats)]
    if not stats.size or not math.isfinite(point):
        return {"mean": point, "ci_low": math.nan, "ci_high": math.nan}
    low, high = np.quantile(stats, [alpha / 2, 1 - alpha / 2])
    return {"mean": point, "ci_low": float(min(low, point)), "ci_high": float(max(high, point))}


def mean_ci(values, *, alpha: float = 0.05) -> dict[str, float]:
    """``{"mean", "ci_low", "ci_high", "half_width", "std", "n"}`` with a Student-t interval.

    NaN / inf values are dropped; with fewer than two values the interval is NaN.
    """
    _check_alpha(alpha)
    x = np.asarray(values, dtype=np.float64).ravel()
    x = x[np.isfinite(x)]
    n = int(x.size)
    if n == 0:
        return {"mean": math.nan, "ci_low": math.nan, "ci_high": math.nan,
                "half_width": math.nan, "std": math.nan, "n": 0}
    mean = float(x.mean())
    if n < 2:
        return {"mean": mean, "ci_low": math.nan, "ci_high": math.nan, "half_width": math.nan,
                "std": math.nan, "n": 1}
    from scipy import stats as sps  # a dependency of jax

    std = float(x.std(ddof=1))
    half = float(sps.t.ppf(1 - alpha / 2, df=n - 1) * std / math.sqrt(n))
    return {"mean": mean, "ci_low": mean - half, "ci_high": mean + half, "half_width": half,
            "std": std, "n": n}


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct: 1 - C(n-c, k) / C(n, k)."""
    for name, v in (("n", n), ("c", c), ("k", k)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"pass_at_k: {name} must be an int, got {v!r}")
    if n < 1 or not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs n >= 1, 0 <= c <= n, 1 <= k <= n; got n={n}, c={c}, "
                         f"k={k}")
    if n - c < k:
        return 1.0
    # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i), stable for large n.
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def average_ranks(x) -> np.ndarray:
    """1-based ranks of ``x`` with ties given the mean of the ranks they span."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="mergesort")
    sorted_x = x[order]
    # Start index of each run of equal values, and the run each sorted element belongs to.
    starts = np.flatnonzero(np.r_[True, sorted_x[1:] != sorted_x[:-1]])
    ends = np.r_[starts[1:], len(x)]
    run_rank = (starts + 1 + ends) / 2.0  # mean of ranks starts+1 .. ends
    ranks = np.empty(len(x))
    ranks[order] = np.repeat(run_rank, ends - starts)
    return ranks


def roc_auc(scores, labels) -> float:
    """P(score of a random positive > score of a random negative), ties counting 1/2.

    NaN when ``labels`` holds a single class.
    """
    scores = np.asarray(scores, dtype=np.float64).ravel()
    labels = np.asarray(labels).ravel()
    if scores.shape != labels.shape:
        raise ValueError(f"scores {scores.shape} and labels {labels.shape} differ in length")
    if not np.all(np.isfinite(scores)):
        raise ValueError("roc_auc: scores contain NaN or inf")
    pos = labels.astype(bool)
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        return math.nan
    ranks = average_ranks(scores)
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def ols_slope(x, y) -> float:
    """The ordinary least-squares slope of ``y`` on ``x`` (NaN pairs dropped); NaN with fewer
    than two distinct x."""
    x, y = np.asarray(x, dtype=np.float64).ravel(), np.asarray(y, dtype=np.float64).ravel()
    if x.shape != y.shape:
        raise ValueError(f"x {x.shape} and y {y.shape} differ in length")
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if x.size < 2 or np.all(x == x[0]):
        return math.nan
    dx = x - x.mean()
    return float((dx * (y - y.mean())).sum() / (dx * dx).sum())


def interval_to_json(interval: dict) -> dict:
    """NaN -> None so the dict is valid JSON."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in interval.items()}


def ci(values, statistic: Callable[[np.ndarray], float] | None = None) -> dict:
    """``bootstrap_ci`` with the reports' ``BOOTSTRAP`` setting, as JSON (NaN -> None)."""
    return interval_to_json(bootstrap_ci(values, statistic=statistic, **BOOTSTRAP))


def finite_number(value) -> float:
    """`value` as a float; NaN for anything but a number (bools included)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def values_by_step(rows_of_runs, key: str) -> dict[float, list[float]]:
    """{step: the finite values of `key` the runs logged there} of runs' metric rows."""
    by_step: dict[float, list[float]] = {}
    for rows in rows_of_runs:
        for row in rows:
            v = finite_number(row.get(key))
            if math.isfinite(v):
                by_step.setdefault(float(row["step"]), []).append(v)
    return by_step
