"""`metrics.bootstrap_ci` above `BOOT_COUNTS_FROM` values with many distinct ones takes the
percentiles of the bootstrap distribution of the mean from its Cornish-Fisher expansion
instead of drawing resamples. The claim (its docstring, docs/user-guide.md,
docs/PERFORMANCE.md): at those n it differs from a real percentile bootstrap by less than the
Monte Carlo error of the 2,000 resamples reports draw. Checked here against percentile
bootstraps of many resamples on uniform, exponential, two-point, heavy-tailed and discrete
values (scores on a grid of 101 or 1,001 levels, as rubric scores are)."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from assay import metrics

LEVEL = 0.95
DRAWS = 40_000_000  # resampled values per reference bootstrap (bounds each case's time)


def _percentile_bootstrap(vals: np.ndarray, resamples: int, seed: int) -> tuple[float, float]:
    """A plain percentile bootstrap of the mean: n indices per resample, in batches."""
    rng = np.random.default_rng(seed)
    n = vals.size
    means = np.empty(resamples)
    per = max(1, 2_000_000 // n)
    for s in range(0, resamples, per):
        e = min(resamples, s + per)
        means[s:e] = vals[rng.integers(0, n, size=(e - s, n))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
    return float(lo), float(hi)


def _mc_sd(resamples: int) -> float:
    """Monte Carlo sd of a percentile bootstrap's 2.5% (or 97.5%) end, in standard errors:
    sqrt(p (1 - p) / R) / phi(z) for a near-normal distribution of the means."""
    p = (1 - LEVEL) / 2
    return math.sqrt(p * (1 - p) / resamples) / NormalDist().pdf(NormalDist().inv_cdf(p))


def _values(dist: str, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dist == "uniform":
        return rng.random(n)
    if dist == "exponential":  # skewness 2
        return rng.exponential(1.0, n)
    if dist == "two-point":  # 0 or 1 (one in ten), jittered by < 0.01 so every value is distinct
        return (rng.random(n) < 0.1).astype(float) + rng.random(n) / 100
    if dist == "101-levels":  # multiples of 0.01 in [0, 1], skewed towards 0
        return np.round(rng.random(n) ** 2, 2)
    if dist == "1001-levels":  # multiples of 0.001, one in five exactly 0
        return np.where(rng.random(n) < 0.2, 0.0, np.round(rng.random(n), 3))
    if dist == "heavy-tail":  # lognormal(0, 1): skewness ~6, kurtosis ~110
        return rng.lognormal(0.0, 1.0, n)
    raise AssertionError(dist)


def test_monte_carlo_error_of_the_reports_resamples() -> None:
    """The yardstick: 2,000 resamples leave each end of a 95% interval ~0.06 se off."""
    assert _mc_sd(2000) == pytest.approx(0.06, abs=0.003)


@pytest.mark.parametrize("n", [5001, 12_000, 50_000])
@pytest.mark.parametrize("dist", ["uniform", "exponential", "two-point", "heavy-tail", "101-levels",
                                  "1001-levels"])
def test_expansion_agrees_with_a_percentile_bootstrap(dist: str, n: int) -> None:
    vals = _values(dist, n, seed=n)
    assert np.unique(vals).size > metrics.BOOT_COUNTS_LEVELS and n > metrics.BOOT_COUNTS_FROM  # the expansion's case
    lo, hi = metrics.bootstrap_ci(vals, resamples=2000)  # nothing drawn (bench/bench_timings.py times it)
    resamples = max(800, DRAWS // n)
    ref_lo, ref_hi = _percentile_bootstrap(vals, resamples, seed=1)
    se = float(vals.std()) / math.sqrt(n)
    # Tolerance: the 2,000-resample bootstrap's own Monte Carlo error (0.06 se) plus four sd
    # of the reference's Monte Carlo error (0.04 se at n = 5,001, 0.09 se at 50,000).
    tol = (_mc_sd(2000) + 4 * _mc_sd(resamples)) * se
    assert abs(lo - ref_lo) <= tol, (lo, ref_lo, tol / se)
    assert abs(hi - ref_hi) <= tol, (hi, ref_hi, tol / se)
    # The skewness term matters on skewed data: the interval is not symmetric about the mean.
    m = float(vals.mean())
    if dist in ("exponential", "heavy-tail"):
        assert hi - m > m - lo
    assert metrics.bootstrap_ci(vals, resamples=2000) == (lo, hi)  # deterministic


def test_expansion_equals_the_formula() -> None:
    vals = _values("exponential", 8000, seed=5)
    n, m, sd = vals.size, float(vals.mean()), float(vals.std())
    skew = float(np.mean((vals - m) ** 3)) / sd**3
    z = NormalDist().inv_cdf(0.975)
    want_hi = m + sd / math.sqrt(n) * (z + skew / (6 * math.sqrt(n)) * (z * z - 1))
    want_lo = m + sd / math.sqrt(n) * (-z + skew / (6 * math.sqrt(n)) * (z * z - 1))
    lo, hi = metrics.bootstrap_ci(vals, resamples=2000)
    assert lo == pytest.approx(want_lo, rel=1e-12) and hi == pytest.approx(want_hi, rel=1e-12)


def test_at_and_below_the_threshold_resamples_are_drawn() -> None:
    """Up to `BOOT_COUNTS_FROM` values the interval depends on the seed (a real bootstrap)."""
    vals = _values("uniform", metrics.BOOT_COUNTS_FROM, seed=2)
    assert metrics.bootstrap_ci(vals, resamples=500, seed=0) != metrics.bootstrap_ci(vals, resamples=500, seed=1)


def test_few_levels_draw_their_counts() -> None:
    """At most `BOOT_COUNTS_LEVELS` distinct values: a real bootstrap (of the counts), seeded."""
    vals = np.round(_values("uniform", 20_000, seed=3) * 40) / 40  # 41 levels
    assert np.unique(vals).size <= metrics.BOOT_COUNTS_LEVELS
    lo, hi = metrics.bootstrap_ci(vals, resamples=2000, seed=0)
    assert (lo, hi) != metrics.bootstrap_ci(vals, resamples=2000, seed=1)
    ref_lo, ref_hi = _percentile_bootstrap(vals, 2000, seed=1)
    tol = 3 * _mc_sd(2000) * float(vals.std()) / math.sqrt(vals.size)
    assert abs(lo - ref_lo) <= tol and abs(hi - ref_hi) <= tol
