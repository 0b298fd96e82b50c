"""The scoring formulas, and nothing else.

Every number assay reports comes from one of these pure functions: rubric scores as in
GDPval / HealthBench (points awarded over positive points, clipped to [0, 1]), economic value
(payment summed over passed deliverables), KPI uplift normalised between a baseline and a
reference policy with the incident penalty, pass@k (Chen et al. 2021, unbiased estimator) and
pass^k (tau-bench), percentile bootstrap intervals, Pearson correlation and the cost/score
Pareto front.

They are kept apart from graders, store and reports so that each formula is written once,
can be checked by hand against the papers and property-tested, and does no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from statistics import NormalDist
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is imported by the functions that use it: listing or validating tasks needs none
    import numpy as np

__all__ = [
    "PASS_THRESHOLD",
    "SCENARIO_FLOOR",
    "SOLVED_THRESHOLD",
    "adjusted_uplift",
    "bootstrap_ci",
    "bootstrap_ci_of_counts",
    "clipped_mean",
    "economic_value",
    "epoch_noise",
    "expert_score",
    "flakiness",
    "floored_score",
    "mean",
    "percentiles_of_counts",
    "mean_run_score",
    "paired_permutation_p",
    "pareto_front",
    "pass_at_k",
    "pass_at_k_curve",
    "pass_hat_k",
    "pass_hat_k_curve",
    "passed",
    "pearson",
    "run_score",
    "solved",
    "tag_scores",
    "unclipped_score",
    "uplift",
    "void_outlier",
]


CAPABILITY_TAGS = ("FI", "AR", "IF", "SF")
"""OneMillion-Bench's rubric item tags (factual information, analytical reasoning, instruction
following, structure and format): every rubric score breaks down by them."""
PASS_THRESHOLD = 0.7
"""A rubric or contract run passes at this score (OneMillion-Bench's pass line)."""
SOLVED_THRESHOLD = 0.8
"""A scenario is solved at this S with no incident (FDE-Gym)."""
SCENARIO_FLOOR = -1.0
"""Scenario uplift is floored here for averaging only (FDE-Gym), so one disaster cannot swamp a mean."""


# --- rubric scores -----------------------------------------------------------------------


def unclipped_score(points_awarded: Iterable[float], weights: Iterable[float]) -> float | None:
    """HealthBench per-example score: ``sum(awarded) / sum(positive weights)``, not clipped.

    Negative-weight criteria (penalties) count in the numerator when awarded but never in the
    denominator, so the result can fall below 0 (or, in principle, above 1). ``None`` when no
    weight is positive (nothing can be earned).
    """
    total = math.fsum(w for w in weights if w > 0)
    if total <= 0:
        return None
    return math.fsum(points_awarded) / total


def expert_score(points_awarded: Iterable[float], weights: Iterable[float]) -> float | None:
    """Rubric score: ``max(0, min(1, sum(awarded) / sum(w for w in weights if w > 0)))``.

    ``None`` when no weight is positive.
    """
    raw = unclipped_score(points_awarded, weights)
    if raw is None:
        return None
    return max(0.0, min(1.0, raw))


def tag_scores(items: Iterable[tuple[float, float, Sequence[str]]], *, clipped: bool = True
               ) -> dict[str, float | None]:
    """Per-tag rubric scores (capability tags, HealthBench axes/themes).

    ``items`` are ``(awarded, weight, tags)`` per criterion; each tag is scored with
    :func:`expert_score` (``clipped``) or :func:`unclipped_score` over the criteria carrying
    that tag, i.e. exactly the formula used for the total. Tags are returned in order of first
    appearance; a tag whose criteria are all penalties scores ``None``.
    """
    score = expert_score if clipped else unclipped_score
    awarded: dict[str, list[float]] = {}
    weights: dict[str, list[float]] = {}
    for a, w, tags in items:
        for tag in dict.fromkeys(tags):  # a tag repeated on one criterion counts once
            awarded.setdefault(tag, []).append(a)
            weights.setdefault(tag, []).append(w)
    return {tag: score(awarded[tag], weights[tag]) for tag in awarded}


def passed(score: float | None, threshold: float = PASS_THRESHOLD) -> bool:
    """A deliverable passes when its score reaches the threshold (``score >= threshold``)."""
    return score is not None and score >= threshold


def economic_value(
    items: Iterable[tuple[float | None, float, str]], threshold: float = PASS_THRESHOLD
) -> dict[str, float]:
    """Sum of ``amount`` per currency over the items whose score passes.

    ``items`` are ``(score, amount, currency)``. Every currency seen appears in the result,
    with 0.0 when none of its items passed; a ``None`` score does not pass.
    """
    out: dict[str, float] = {}
    for score, amount, currency in items:
        out.setdefault(currency, 0.0)
        if passed(score, threshold):
            out[currency] += amount
    return out


# --- operational KPIs --------------------------------------------------------------------


def uplift(kpi: float, baseline: float, reference: float) -> float:
    """Normalised KPI uplift: ``(kpi - baseline) / (reference - baseline)``.

    0 means "as good as the baseline policy", 1 "as good as the reference policy". Raises
    ``ValueError`` when the reference equals the baseline (the scale is undefined).
    """
    if reference == baseline:
        raise ValueError(f"uplift undefined: reference == baseline == {baseline!r}")
    return (kpi - baseline) / (reference - baseline)


def adjusted_uplift(u: float, incident: bool) -> float:
    """An incident caps the uplift at 0: ``min(u, 0)`` if ``incident`` else ``u``."""
    return min(u, 0.0) if incident else u


def run_score(u_adj: float, contact_cost: float) -> float:
    """Score of one operational run: adjusted uplift minus the stakeholder-contact cost."""
    return u_adj - contact_cost


def solved(score: float, incident: bool, threshold: float = SOLVED_THRESHOLD) -> bool:
    """A scenario is solved when there was no incident and ``score >= threshold``."""
    return not incident and score >= threshold


def floored_score(u_adj: float, contact_cost: float) -> float:
    """A scenario run's S as it enters every average: ``max(u_adj, -1) - contact_cost``."""
    return max(u_adj, SCENARIO_FLOOR) - contact_cost


def mean_run_score(runs: Mapping[str, Sequence[tuple[float, float]]]) -> float:
    """``mean_i mean_r (max(u_adj, -1) - contact_cost)`` over tasks ``i`` and repeats ``r``.

    ``runs`` maps a task id to its repeats ``(u_adj, contact_cost)``. The floor at -1 keeps a
    single catastrophic run from dominating the mean. Raises ``ValueError`` when there are no
    tasks or a task has no repeats.
    """
    if not runs:
        raise ValueError("mean_run_score of no tasks")
    per_task: list[float] = []
    for task_id, repeats in runs.items():
        if not repeats:
            raise ValueError(f"task {task_id!r} has no runs")
        per_task.append(math.fsum(floored_score(u, c) for u, c in repeats) / len(repeats))
    return math.fsum(per_task) / len(per_task)


# --- pass@k / pass^k ---------------------------------------------------------------------


def _check_nck(n: int, c: int, k: int) -> None:
    if not (0 <= c <= n):
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not (1 <= k <= n):
        raise ValueError(f"need 1 <= k <= n, got n={n}, k={k}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` passed: ``1 - C(n-c, k) / C(n, k)``.

    Computed exactly on integers (``fractions.Fraction`` of ``math.comb``), then rounded once,
    so e.g. ``pass_at_k(5, 2, 1) == 0.4``. 1.0 when ``n - c < k``.
    """
    _check_nck(n, c, k)
    if n - c < k:
        return 1.0
    return float(1 - Fraction(math.comb(n - c, k), math.comb(n, k)))


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k (tau-bench): probability that ``k`` draws without replacement all passed.

    ``C(c, k) / C(n, k) = prod_{i=0}^{k-1} (c - i) / (n - i)``; 0.0 when ``c < k``.
    """
    _check_nck(n, c, k)
    if c < k:
        return 0.0
    return float(Fraction(math.comb(c, k), math.comb(n, k)))


def pass_at_k_curve(n: int, c: int) -> list[float]:
    """``[pass_at_k(n, c, k) for k in 1..n]`` in O(n) float steps.

    ``C(n-c, k) / C(n, k) = prod_{i<k} (n-c-i) / (n-i)``: each k's ratio is the previous one's
    times ``(n-c-k+1) / (n-k+1)``, so the whole curve costs n multiplications (the exact
    :func:`pass_at_k` builds binomials of n digits for every k: quadratic or worse over a
    curve). Agrees with :func:`pass_at_k` to float rounding.
    """
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    out: list[float] = []
    ratio = 1.0
    for k in range(1, n + 1):
        ratio = 0.0 if n - c < k else ratio * (n - c - k + 1) / (n - k + 1)
        out.append(1.0 - ratio)
    return out


def pass_hat_k_curve(n: int, c: int) -> list[float]:
    """``[pass_hat_k(n, c, k) for k in 1..n]`` in O(n): ``prod_{i<k} (c-i) / (n-i)`` step by step."""
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    out: list[float] = []
    prod = 1.0
    for k in range(1, n + 1):
        prod = 0.0 if c < k else prod * (c - k + 1) / (n - k + 1)
        out.append(prod)
    return out


# --- statistics --------------------------------------------------------------------------


def mean(values: Iterable[float]) -> float:
    """Arithmetic mean (``math.fsum``); ``ValueError`` on no values."""
    vals = list(values)
    if not vals:
        raise ValueError("mean of no values")
    return math.fsum(vals) / len(vals)


def clipped_mean(values: Iterable[float]) -> float:
    """Mean clipped to [0, 1] (HealthBench overall score over unclipped per-example scores)."""
    return max(0.0, min(1.0, mean(values)))


_BOOT_CHUNK = 2_000_000  # resampled values drawn per batch, bounds memory for large inputs
BOOT_COUNTS_FROM = 5000
"""Above this many values `bootstrap_ci` does not draw n indices per resample: with at most
`BOOT_COUNTS_LEVELS` distinct values it draws each resample's counts of them (multinomial,
the same bootstrap); with more it uses the bootstrap distribution's large-sample expansion
(see `bootstrap_ci`)."""
BOOT_COUNTS_LEVELS = 64
""""Few levels" for `BOOT_COUNTS_FROM`: at most this many distinct values (drawing 2,000
multinomial counts of 1,000 levels took 0.17 s, of 64 levels 0.01 s)."""


def bootstrap_ci(
    values: Sequence[float], level: float = 0.95, resamples: int = 10000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean.

    Draws ``resamples`` resamples with replacement using ``numpy.random.default_rng(seed)``
    and returns the ``(1-level)/2`` and ``(1+level)/2`` percentiles of their means, so the
    result is deterministic for a seed. A single value gives ``(v, v)``; no values raise
    ``ValueError``. The interval is widened, if needed, to contain the sample mean (this
    only matters for floating-point rounding on (near-)constant data), and kept within the
    data's range.

    Above ``BOOT_COUNTS_FROM`` (5,000) values:
    - at most ``BOOT_COUNTS_LEVELS`` (64) distinct values: each resample's counts of the
      distinct values are drawn (multinomial): the same bootstrap at O(distinct) per resample;
    - more distinct values: the percentiles of the bootstrap distribution of the mean are
      taken from its large-sample (Cornish-Fisher / Edgeworth) expansion instead of drawn,
      ``mean + se * (z + skew / (6 * sqrt(n)) * (z**2 - 1))`` with ``z`` the normal quantile,
      ``se`` the values' population standard deviation over ``sqrt(n)`` and ``skew`` their
      sample skewness (third central moment over the population sd cubed): the mean and
      the percentiles a bootstrap with infinitely many resamples converges to, up to
      ``O(1/n)``. At these n that error is far below the Monte Carlo error of the 2,000
      resamples reports draw (about 0.06 se for each end of a 95% interval):
      ``tests/test_metrics_bootstrap.py`` checks it against percentile bootstraps of many
      resamples on uniform, exponential, two-point, heavy-tailed and discrete (101 and 1,001
      levels) values at n = 5,001 to
      50,000. ``resamples`` and ``seed`` are then unused (the expansion draws nothing).
    """
    import numpy as np
    arr = np.asarray(list(values), dtype=float)
    if arr.size == 0:
        raise ValueError("bootstrap_ci of no values")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    m = float(arr.mean())
    vmin, vmax = float(arr.min()), float(arr.max())
    if arr.size == 1 or vmin == vmax:
        v = float(arr[0])
        return (v, v)
    n = arr.size
    alpha = (1.0 - level) / 2.0
    if n > BOOT_COUNTS_FROM:
        uniq, counts = np.unique(arr, return_counts=True)
        if uniq.size > BOOT_COUNTS_LEVELS:
            lo, hi = _bootstrap_expansion(arr, m, alpha)
        else:
            lo, hi = _bootstrap_counts(uniq, counts, n, resamples, seed, alpha)
    else:
        rng = np.random.default_rng(seed)
        means = np.empty(resamples, dtype=float)
        per_batch = max(1, _BOOT_CHUNK // n)
        for start in range(0, resamples, per_batch):
            stop = min(resamples, start + per_batch)
            idx = rng.integers(0, n, size=(stop - start, n))
            means[start:stop] = arr[idx].mean(axis=1)
        lo, hi = (float(q) for q in np.quantile(means, [alpha, 1.0 - alpha]))
    # Rounding in the resampled means can step a hair outside the data's range or past the mean.
    return (max(vmin, min(lo, m)), min(vmax, max(hi, m)))


def bootstrap_ci_of_counts(values: Sequence[float], counts: Sequence[int], level: float = 0.95,
                           resamples: int = 10000, seed: int = 0) -> tuple[float, float]:
    """`bootstrap_ci` of more than BOOT_COUNTS_FROM values given as their distinct values and
    how often each occurs (what a database's GROUP BY gives): the same interval, since above
    that many values `bootstrap_ci` reads only the distinct values and their counts (the
    multinomial draw, or the expansion from the moments). ValueError for fewer values: their
    percentile bootstrap resamples them by position."""
    import numpy as np
    order = np.argsort(np.asarray(values, dtype=float), kind="stable")
    uniq = np.asarray(values, dtype=float)[order]
    cnt = np.asarray(counts, dtype=np.int64)[order]
    if uniq.size and np.any(uniq[1:] == uniq[:-1]):
        raise ValueError("bootstrap_ci_of_counts needs distinct values")
    n = int(cnt.sum())
    if n <= BOOT_COUNTS_FROM:
        raise ValueError(f"bootstrap_ci_of_counts of {n} values: at most {BOOT_COUNTS_FROM} are resampled by position")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    m = float(cnt @ uniq / n)
    vmin, vmax = float(uniq[0]), float(uniq[-1])
    if vmin == vmax:
        return (vmin, vmin)
    alpha = (1.0 - level) / 2.0
    if uniq.size > BOOT_COUNTS_LEVELS:
        lo, hi = _expansion(uniq, cnt, n, m, alpha)
    else:
        lo, hi = _bootstrap_counts(uniq, cnt, n, resamples, seed, alpha)
    return (max(vmin, min(lo, m)), min(vmax, max(hi, m)))


def percentiles_of_counts(values: Sequence[float], counts: Sequence[int], qs: Sequence[float]) -> list[float]:
    """numpy's linear percentiles (`np.percentile`, q in 0..100) of the values each repeated
    its count times, without repeating them: the position (n - 1) q / 100 is found in the
    cumulative counts of the sorted distinct values. ValueError for no values."""
    import numpy as np
    order = np.argsort(np.asarray(values, dtype=float), kind="stable")
    uniq = np.asarray(values, dtype=float)[order]
    ends = np.cumsum(np.asarray(counts, dtype=np.int64)[order])  # last position + 1 of each value
    n = int(ends[-1]) if ends.size else 0
    if n == 0:
        raise ValueError("percentiles of no values")
    out = []
    for q in qs:
        h = (n - 1) * q / 100.0
        lo = math.floor(h)
        a = float(uniq[np.searchsorted(ends, lo, side="right")])
        b = float(uniq[np.searchsorted(ends, min(lo + 1, n - 1), side="right")])
        out.append(a + (h - lo) * (b - a))
    return out


def _bootstrap_counts(uniq: np.ndarray, counts: np.ndarray, n: int, resamples: int, seed: int,
                      alpha: float) -> tuple[float, float]:
    """The percentile bootstrap of many values on few levels: a resample's mean depends only
    on how often it drew each distinct value, and those counts are multinomial(n, share of
    each value), so drawing them is the same bootstrap at O(distinct values) per resample."""
    import numpy as np
    rng = np.random.default_rng(seed)
    means = np.empty(resamples, dtype=float)
    per_batch = max(1, _BOOT_CHUNK // uniq.size)
    for start in range(0, resamples, per_batch):
        stop = min(resamples, start + per_batch)
        means[start:stop] = rng.multinomial(n, counts / n, size=stop - start) @ uniq / n
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def _bootstrap_expansion(arr: np.ndarray, m: float, alpha: float) -> tuple[float, float]:
    """The ``alpha`` and ``1 - alpha`` quantiles of the bootstrap distribution of the mean by
    its Cornish-Fisher expansion (see `bootstrap_ci`)."""
    import numpy as np
    uniq, counts = np.unique(arr, return_counts=True)
    return _expansion(uniq, counts, arr.size, m, alpha)


def _expansion(uniq: np.ndarray, counts: np.ndarray, n: int, m: float, alpha: float) -> tuple[float, float]:
    """`_bootstrap_expansion` of values given as distinct values and their counts."""
    dev = uniq - m
    var = float(counts @ (dev * dev)) / n
    sd = math.sqrt(var)
    skew = float(counts @ (dev * dev * dev)) / n / (sd ** 3) if sd > 0 else 0.0
    se = sd / math.sqrt(n)

    def q(p: float) -> float:
        z = NormalDist().inv_cdf(p)
        return m + se * (z + skew / (6.0 * math.sqrt(n)) * (z * z - 1.0))

    return q(alpha), q(1.0 - alpha)


PERMUTATION_EXACT_UP_TO = 20
PERMUTATION_NORMAL_FROM = 5000
"""From this many pairs `paired_permutation_p` takes the sign-flip distribution's large-sample
expansion instead of drawing assignments (100,000 draws of 50,000 signs took 45 s)."""
"""Up to this many pairs the sign-flip test enumerates every assignment (2**20 of them)."""


def paired_permutation_p(diffs: Sequence[float], resamples: int = 100_000, seed: int = 0) -> float:
    """Two-sided paired sign-flip permutation test of "mean difference = 0".

    Under the null each pair's difference is as likely positive as negative, so the p-value
    is the share of sign assignments whose mean is at least as far from 0 as the observed
    one: exact (every assignment) up to ``PERMUTATION_EXACT_UP_TO`` pairs, else ``resamples``
    random assignments drawn with ``numpy.random.default_rng(seed)``, counted with the
    observed one, ``(hits + 1) / (resamples + 1)``. 1.0 when every difference is 0;
    ``ValueError`` for no pairs.

    From ``PERMUTATION_NORMAL_FROM`` (5,000) pairs the p-value is the sign-flip distribution's
    Edgeworth expansion instead of drawn: the sum ``T = sum(s_i d_i)`` of random signs has
    variance ``sum(d**2)`` and excess kurtosis ``-2 sum(d**4) / sum(d**2)**2`` (no skew), so
    ``p = 2 (1 - Phi(z)) + 2 phi(z) k (z**3 - 3 z) / 24`` with ``z = |sum(d)| / sqrt(sum(d**2))``,
    clamped to [0, 1]. At these n its error is about the Monte Carlo error of the draws
    (``tests/test_report_compare.py`` checks it against sampled draws); ``resamples`` and
    ``seed`` are then unused.
    """
    import numpy as np
    d = np.asarray(list(diffs), dtype=float)
    n = d.size
    if n == 0:
        raise ValueError("paired_permutation_p of no pairs")
    observed = abs(float(d.mean()))
    if observed == 0.0:
        return 1.0
    tol = 1e-12 * max(1.0, float(np.abs(d).max()))
    if n >= PERMUTATION_NORMAL_FROM:
        s2 = float(np.sum(d * d))
        kurt = -2.0 * float(np.sum(d**4)) / (s2 * s2)
        z = abs(float(d.sum())) / math.sqrt(s2)
        normal = NormalDist()
        p = 2.0 * (1.0 - normal.cdf(z)) + 2.0 * normal.pdf(z) * kurt * (z**3 - 3.0 * z) / 24.0
        return min(1.0, max(0.0, p))
    if n <= PERMUTATION_EXACT_UP_TO:
        # Every sign assignment as the bits of 0 .. 2**n - 1, in chunks to bound memory.
        total = 1 << n
        hits = 0
        bits = np.arange(n, dtype=np.int64)
        for start in range(0, total, 1 << 16):
            codes = np.arange(start, min(total, start + (1 << 16)), dtype=np.int64)
            signs = 1 - 2 * ((codes[:, None] >> bits) & 1)
            hits += int(np.count_nonzero(np.abs((signs * d).mean(axis=1)) >= observed - tol))
        return hits / total
    rng = np.random.default_rng(seed)
    hits = 0
    per_batch = max(1, _BOOT_CHUNK // n)
    for start in range(0, resamples, per_batch):
        stop = min(resamples, start + per_batch)
        signs = rng.choice(np.array([-1.0, 1.0]), size=(stop - start, n))
        hits += int(np.count_nonzero(np.abs((signs * d).mean(axis=1)) >= observed - tol))
    return (hits + 1) / (resamples + 1)


def pearson(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Pearson correlation ``r`` and its two-sided p-value (``scipy.stats.pearsonr``).

    ``ValueError`` when the lengths differ, there are fewer than 3 points, or either input is
    constant (r undefined).
    """
    import numpy as np
    from scipy import stats

    x = np.asarray(list(xs), dtype=float)
    y = np.asarray(list(ys), dtype=float)
    if x.shape != y.shape:
        raise ValueError(f"pearson needs equal lengths, got {x.size} and {y.size}")
    if x.size < 3:
        raise ValueError(f"pearson needs at least 3 points, got {x.size}")
    if np.all(x == x[0]) or np.all(y == y[0]):
        raise ValueError("pearson undefined for constant input")
    res = stats.pearsonr(x, y)
    return (float(res.statistic), float(res.pvalue))


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the ``(cost, score)`` points no other point dominates.

    Lower cost and higher score are better; ``q`` dominates ``p`` when it is no worse on both
    and strictly better on one, so identical points never dominate each other and are all
    kept. Returned sorted by cost, then index. ``ValueError`` on NaN.
    """
    for i, (c, s) in enumerate(points):
        if math.isnan(c) or math.isnan(s):
            raise ValueError(f"point {i} has NaN: {(c, s)!r}")
    order = sorted(range(len(points)), key=lambda i: (points[i][0], i))
    front: list[int] = []
    best_lower = -math.inf  # best score among points of strictly lower cost
    j = 0
    while j < len(order):
        cost = points[order[j]][0]
        group = []
        while j < len(order) and points[order[j]][0] == cost:
            group.append(order[j])
            j += 1
        top = max(points[i][1] for i in group)
        if top > best_lower:
            front.extend(i for i in group if points[i][1] == top)
            best_lower = top
    return front


VOID_OUTLIER_P = 0.01
"""One-sided binomial p-value under which an agent's void rate is out of line with the others'."""
VOID_OUTLIER_MIN = 3
"""Fewer void runs than this are never an outlier (one unlucky outage is not a pattern)."""


def void_outlier(void: int, runs: int, others_void: int, others_runs: int) -> bool:
    """Whether an agent's `void` of `runs` (on tasks other agents ran too) is out of line with
    the others' `others_void` of `others_runs` on the same tasks: at least `VOID_OUTLIER_MIN`
    void runs, a higher rate, and a one-sided binomial p-value under `VOID_OUTLIER_P` against
    the others' rate (smoothed by one void and one finished run, so 0 of n is not a certainty).
    An agent that makes the harness fail on purpose stands out here; void runs are left out of
    its scores, so the report flags it beside them."""
    if void < VOID_OUTLIER_MIN or runs <= 0 or others_runs <= 0:
        return False
    base = (others_void + 1) / (others_runs + 2)
    if void / runs <= base:
        return False
    from scipy import stats

    return float(stats.binom.sf(void - 1, runs, base)) < VOID_OUTLIER_P


def flakiness(outcomes: Sequence[bool]) -> float:
    """How often a task's pass/fail outcome flips across epochs of one agent: the share of its
    epochs on the minority side, ``min(passes, fails) / epochs`` (0: the same every epoch; 0.5:
    half and half). ValueError for no outcomes."""
    if not outcomes:
        raise ValueError("flakiness of no outcomes")
    passes = sum(1 for o in outcomes if o)
    return min(passes, len(outcomes) - passes) / len(outcomes)


def epoch_noise(tasks: Iterable[Mapping[int, float]]) -> tuple[list[float], float | None, float | None]:
    """Noise of repeated epochs over the tasks scored in every epoch (`tasks`: per task, epoch ->
    score): the mean score of each epoch, the between-epoch variance (the sample variance of
    those means; None below 2 epochs), and the within-task variance (the mean over tasks of the
    sample variance of a task's scores across epochs; None below 2 epochs)."""
    given = list(tasks)
    epochs = sorted({e for by in given for e in by})
    full = [by for by in given if all(e in by for e in epochs)]
    if not full:
        return [], None, None
    means = [sum(by[e] for by in full) / len(full) for e in epochs]
    if len(epochs) < 2:
        return means, None, None
    from statistics import variance

    within = sum(variance([by[e] for e in epochs]) for by in full) / len(full)
    return means, variance(means), within
