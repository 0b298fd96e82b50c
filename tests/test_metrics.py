"""Hand-computed examples and property tests for assay.metrics."""

from __future__ import annotations

import itertools
import math
from math import comb

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from assay import metrics as m

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)


# --- hand-computed examples --------------------------------------------------------------


def test_expert_score_examples() -> None:
    assert m.expert_score([2, 1, 0], [2, 2, 1]) == pytest.approx(3 / 5)
    # a penalty awarded lowers the score but is not in the denominator
    assert m.expert_score([2, -1], [2, -1]) == pytest.approx(1 / 2)
    assert m.expert_score([0, -3], [2, -3]) == 0.0  # clipped at 0
    assert m.expert_score([5], [2]) == 1.0  # clipped at 1
    assert m.expert_score([0], [-1]) is None
    assert m.expert_score([], []) is None


def test_unclipped_and_clipped_mean() -> None:
    assert m.unclipped_score([0, -3], [2, -3]) == pytest.approx(-1.5)
    assert m.unclipped_score([1], [0]) is None
    assert m.clipped_mean([-1.5, 0.5]) == 0.0
    assert m.clipped_mean([0.2, 0.6]) == pytest.approx(0.4)
    assert m.clipped_mean([1.5, 1.0]) == 1.0
    with pytest.raises(ValueError):
        m.clipped_mean([])


def test_tag_scores() -> None:
    items = [
        (2, 2, ["accuracy", "emergency"]),
        (0, 3, ["accuracy"]),
        (-1, -1, ["safety"]),
        (1, 1, ["safety", "emergency"]),
    ]
    got = m.tag_scores(items)
    assert got == {
        "accuracy": pytest.approx(2 / 5),
        "emergency": pytest.approx(3 / 3),
        "safety": pytest.approx(0 / 1),
    }
    assert list(got) == ["accuracy", "emergency", "safety"]
    assert m.tag_scores([(-1, -1, ["x"])]) == {"x": None}
    # the tag covering every criterion equals the total
    total = m.expert_score([a for a, _, _ in items], [w for _, w, _ in items])
    assert m.tag_scores([(a, w, ["all"]) for a, w, _ in items])["all"] == total


def test_passed_and_economic_value() -> None:
    assert m.passed(0.7)
    assert not m.passed(0.69)
    assert m.passed(0.5, threshold=0.5)
    assert not m.passed(None)
    items = [(0.9, 100.0, "USD"), (0.5, 50.0, "USD"), (0.7, 10.0, "EUR"), (None, 5.0, "GBP")]
    assert m.economic_value(items) == {"USD": 100.0, "EUR": 10.0, "GBP": 0.0}
    assert m.economic_value(items, threshold=0.4) == {"USD": 150.0, "EUR": 10.0, "GBP": 0.0}
    assert m.economic_value([]) == {}


def test_uplift_family() -> None:
    assert m.uplift(15, 10, 20) == pytest.approx(0.5)
    assert m.uplift(5, 10, 20) == pytest.approx(-0.5)
    assert m.uplift(30, 10, 20) == pytest.approx(2.0)
    # lower-is-better KPI: reference below baseline
    assert m.uplift(8, 10, 6) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        m.uplift(1, 2, 2)
    assert m.adjusted_uplift(0.8, True) == 0.0
    assert m.adjusted_uplift(-0.3, True) == -0.3
    assert m.adjusted_uplift(0.8, False) == 0.8
    assert m.run_score(0.8, 0.1) == pytest.approx(0.7)
    assert m.solved(0.8, False)
    assert not m.solved(0.79, False)
    assert not m.solved(1.0, True)
    assert m.solved(0.5, False, threshold=0.5)


def test_mean_run_score() -> None:
    runs = {"a": [(0.5, 0.1), (1.0, 0.0)], "b": [(-3.0, 0.0)]}
    # a: mean(0.4, 1.0) = 0.7; b: max(-3, -1) - 0 = -1 -> mean(0.7, -1) = -0.15
    assert m.mean_run_score(runs) == pytest.approx(-0.15)
    with pytest.raises(ValueError):
        m.mean_run_score({})
    with pytest.raises(ValueError):
        m.mean_run_score({"a": []})


def test_pass_at_k_examples() -> None:
    assert m.pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert m.pass_at_k(5, 2, 2) == pytest.approx(1 - comb(3, 2) / comb(5, 2))  # 0.7
    assert m.pass_at_k(5, 4, 2) == 1.0  # n - c < k
    assert m.pass_at_k(5, 0, 3) == 0.0
    assert m.pass_at_k(4, 4, 4) == 1.0
    # large n stays finite and accurate
    assert m.pass_at_k(100_000, 1, 1) == pytest.approx(1e-5)
    assert m.pass_at_k(10_000, 5000, 100) == pytest.approx(1.0)
    for bad in [(5, 6, 1), (5, -1, 1), (5, 2, 0), (5, 2, 6), (0, 0, 1)]:
        with pytest.raises(ValueError):
            m.pass_at_k(*bad)


def test_pass_hat_k_examples() -> None:
    assert m.pass_hat_k(4, 2, 2) == pytest.approx(1 / 6)
    assert m.pass_hat_k(10, 3, 1) == pytest.approx(0.3)
    assert m.pass_hat_k(5, 1, 2) == 0.0
    assert m.pass_hat_k(3, 3, 3) == 1.0
    for bad in [(5, 6, 1), (5, 2, 0), (5, 2, 6)]:
        with pytest.raises(ValueError):
            m.pass_hat_k(*bad)


def test_mean_and_pearson() -> None:
    assert m.mean([1, 2, 3, 4]) == 2.5
    with pytest.raises(ValueError):
        m.mean([])
    r, p = m.pearson([1, 2, 3, 4], [2, 4, 6, 8])
    assert r == pytest.approx(1.0)
    assert p == pytest.approx(0.0, abs=1e-6)
    r, p = m.pearson([1, 2, 3], [1, 3, 2])
    assert r == pytest.approx(0.5)
    assert p == pytest.approx(2 / 3)  # t = 1/sqrt(3), df=1 (Cauchy): p = 1 - 2*atan(t)/pi
    with pytest.raises(ValueError):
        m.pearson([1, 2], [1, 2])
    with pytest.raises(ValueError):
        m.pearson([1, 1, 1], [1, 2, 3])
    with pytest.raises(ValueError):
        m.pearson([1, 2, 3], [1, 2])


def test_bootstrap_examples() -> None:
    assert m.bootstrap_ci([0.4]) == (0.4, 0.4)
    assert m.bootstrap_ci([0.25, 0.25, 0.25]) == (0.25, 0.25)
    with pytest.raises(ValueError):
        m.bootstrap_ci([])
    vals = [0.0] * 50 + [1.0] * 50
    lo, hi = m.bootstrap_ci(vals)
    # normal approx: 0.5 +- 1.96 * 0.05
    assert lo == pytest.approx(0.402, abs=0.02)
    assert hi == pytest.approx(0.598, abs=0.02)
    lo90, hi90 = m.bootstrap_ci(vals, level=0.9)
    assert lo <= lo90 <= hi90 <= hi
    assert m.bootstrap_ci(vals, seed=1) == m.bootstrap_ci(vals, seed=1)
    # chunked draws for a long input still work
    big = np.random.default_rng(3).random(5000)
    lo, hi = m.bootstrap_ci(big, resamples=500)
    assert lo < big.mean() < hi


def test_pareto_examples() -> None:
    pts = [(1.0, 0.5), (2.0, 0.8), (1.5, 0.4), (3.0, 0.8), (0.5, 0.1), (2.0, 0.8), (4.0, 0.9)]
    # (1.5,.4) dominated by (1,.5); (3,.8) dominated by (2,.8); duplicates (2,.8) both kept
    assert m.pareto_front(pts) == [4, 0, 1, 5, 6]
    assert m.pareto_front([]) == []
    assert m.pareto_front([(1.0, 0.5), (1.0, 0.6)]) == [1]
    assert m.pareto_front([(1.0, 0.5), (2.0, 0.5)]) == [0]
    with pytest.raises(ValueError):
        m.pareto_front([(math.nan, 1.0)])


# --- properties --------------------------------------------------------------------------


@given(st.lists(st.tuples(finite, finite), max_size=20))
def test_expert_score_in_unit_interval(pairs: list[tuple[float, float]]) -> None:
    s = m.expert_score([a for a, _ in pairs], [w for _, w in pairs])
    if any(w > 0 for _, w in pairs):
        assert s is not None and 0.0 <= s <= 1.0
    else:
        assert s is None


@st.composite
def nck(draw: st.DrawFn, max_n: int = 60) -> tuple[int, int, int]:
    n = draw(st.integers(1, max_n))
    c = draw(st.integers(0, n))
    k = draw(st.integers(1, n))
    return n, c, k


@given(nck())
def test_pass_at_k_monotone(args: tuple[int, int, int]) -> None:
    n, c, k = args
    p = m.pass_at_k(n, c, k)
    assert 0.0 <= p <= 1.0
    if c < n:
        assert m.pass_at_k(n, c + 1, k) >= p - 1e-12
    if k < n:
        assert m.pass_at_k(n, c, k + 1) >= p - 1e-12
    assert m.pass_at_k(n, c, 1) == pytest.approx(c / n)


@given(nck())
def test_pass_hat_k_bounds(args: tuple[int, int, int]) -> None:
    n, c, k = args
    h = m.pass_hat_k(n, c, k)
    assert 0.0 <= h <= m.pass_at_k(n, c, k) + 1e-12
    assert m.pass_hat_k(n, n, k) == pytest.approx(1.0)
    assert h == pytest.approx(comb(c, k) / comb(n, k))
    assert m.pass_hat_k(n, c, 1) == pytest.approx(c / n)


@given(nck(max_n=9))
def test_pass_at_k_brute_force(args: tuple[int, int, int]) -> None:
    n, c, k = args
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    any_pass = sum(any(samples[i] for i in s) for s in subsets) / len(subsets)
    all_pass = sum(all(samples[i] for i in s) for s in subsets) / len(subsets)
    assert m.pass_at_k(n, c, k) == pytest.approx(any_pass)
    assert m.pass_hat_k(n, c, k) == pytest.approx(all_pass)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(-100, 100, allow_nan=False), min_size=1, max_size=30),
    st.integers(0, 2**32 - 1),
    st.sampled_from([0.5, 0.8, 0.95, 0.99]),
)
def test_bootstrap_contains_mean_and_deterministic(vals: list[float], seed: int, level: float) -> None:
    lo, hi = m.bootstrap_ci(vals, level=level, resamples=300, seed=seed)
    mu = float(np.mean(vals))
    eps = 1e-9 * max(1.0, max(abs(v) for v in vals))  # np.mean itself rounds (mean of [1.6]*3 > 1.6)
    assert lo - eps <= mu <= hi + eps
    assert (lo, hi) == m.bootstrap_ci(vals, level=level, resamples=300, seed=seed)
    assert min(vals) <= lo and hi <= max(vals)


def _dominates(q: tuple[float, float], p: tuple[float, float]) -> bool:
    return q[0] <= p[0] and q[1] >= p[1] and (q[0] < p[0] or q[1] > p[1])


small = st.integers(0, 6).map(float)  # coarse grid, so ties and duplicates are common


@given(st.lists(st.tuples(small, small), max_size=25))
def test_pareto_front_properties(pts: list[tuple[float, float]]) -> None:
    front = m.pareto_front(pts)
    assert front == sorted(front, key=lambda i: (pts[i][0], i))
    assert len(set(front)) == len(front)
    for i in front:
        assert not any(_dominates(q, pts[i]) for q in pts)
    for i in set(range(len(pts))) - set(front):
        assert any(_dominates(pts[j], pts[i]) for j in front)


@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.floats(0, 1)),
            st.floats(0, 1e6),
            st.sampled_from(["USD", "EUR", "GBP"]),
        ),
        max_size=30,
    ),
    st.floats(0, 1),
)
def test_economic_value_counts_only_passed(
    items: list[tuple[float | None, float, str]], threshold: float
) -> None:
    got = m.economic_value(items, threshold)
    assert set(got) == {cur for _, _, cur in items}
    for cur, total in got.items():
        expected = sum(a for s, a, c in items if c == cur and s is not None and s >= threshold)
        assert total == pytest.approx(expected)
    # raising the threshold never increases value
    higher = m.economic_value(items, min(1.0, threshold + 0.1))
    for cur in got:
        assert higher[cur] <= got[cur] + 1e-9


@given(finite, finite, finite, st.booleans(), st.floats(0, 1))
def test_uplift_relations(kpi: float, base: float, ref: float, incident: bool, cost: float) -> None:
    assume(abs(ref - base) > 1e-3)
    u = m.uplift(kpi, base, ref)
    assert m.uplift(base, base, ref) == 0.0
    assert m.uplift(ref, base, ref) == pytest.approx(1.0)
    # affine: kpi = base + u * (ref - base)
    assert base + u * (ref - base) == pytest.approx(kpi, rel=1e-6, abs=1e-6)
    a = m.adjusted_uplift(u, incident)
    assert a <= u
    if incident:
        assert a <= 0.0
    else:
        assert a == u
    assert m.run_score(a, cost) == pytest.approx(a - cost)
    assert m.run_score(a, cost) <= a
    if incident:
        assert not m.solved(m.run_score(a, cost), incident)
