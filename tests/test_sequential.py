"""assay.sequential: the confidence sequence and the paired e-process by hand, their properties,
and the fixed design's power formulas."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assay import sequential as seq

LOG_20 = math.log(20)


def _capital(rounds: list[list[float]], m: float, alpha: float = 0.05) -> float:
    """(K+ + K-) / 2 at candidate mean m, by a plain loop over the scores."""
    k_up = k_down = 1.0
    n, total, squares = 0, 0.0, 0.0
    for r in rounds:
        xbar = (0.5 + total) / (n + 1)
        var = (0.25 + squares - 2 * xbar * total + n * xbar * xbar) / (n + 1)
        t = n + len(r)
        lam = math.sqrt(2 * math.log(2 / alpha) / (var * t * math.log(1 + t)))
        up = lam if m == 0 else min(lam, 0.5 / m)
        down = lam if m == 1 else min(lam, 0.5 / (1 - m))
        for x in r:
            k_up *= 1 + up * (x - m)
            k_down *= 1 - down * (x - m)
        n += len(r)
        total += sum(r)
        squares += sum(x * x for x in r)
    return (k_up + k_down) / 2


def test_one_round_by_hand() -> None:
    # Scores 1, 1, 0, 1: nothing seen before, so xbar = 1/2, v = 1/4, t = 4 and the bet is
    # sqrt(2 ln 40 / (0.25 * 4 * ln 5)) = 2.14104; at m = 1/2 both gamblers are capped at 0.5/0.5 = 1:
    # K+ = 1.5^3 * 0.5 = 1.6875, K- = 0.5^3 * 1.5 = 0.1875, mixed 0.9375 < 20: 1/2 is in.
    assert float(seq.ci_bet(0, 0.0, 0.0, 4, 0.05)) == pytest.approx(2.14104, abs=1e-5)
    assert _capital([[1, 1, 0, 1]], 0.5) == pytest.approx(0.9375)
    cs = seq.ConfidenceSequence()
    cs.add([1, 1, 0, 1])
    lo, hi = cs.interval
    # The interval is the span of the grid points whose capital (by the loop) stays below 20,
    # widened by one step of 1/2000 each side.
    inside = [i / 2000 for i in range(2001) if _capital([[1, 1, 0, 1]], i / 2000) < 20]
    assert lo == pytest.approx(max(0.0, inside[0] - 0.0005))
    assert hi == pytest.approx(min(1.0, inside[-1] + 0.0005))
    assert lo < 0.75 < hi


def test_two_rounds_by_hand_and_running_intersection() -> None:
    rounds = [[0.2, 0.9, 0.4], [1.0, 0.0, 0.7, 0.6, 0.3], [0.5] * 8]
    cs = seq.ConfidenceSequence()
    alive = [True] * 2001
    for k, r in enumerate(rounds, 1):
        cs.add(r)
        for i in range(2001):
            alive[i] = alive[i] and _capital(rounds[:k], i / 2000) < 20
        kept = [i for i in range(2001) if alive[i]]
        assert cs.interval == pytest.approx((max(0, kept[0] - 1) / 2000, min(2000, kept[-1] + 1) / 2000))


def test_paired_e_value_by_hand() -> None:
    # Round 1: nothing seen, the Kelly bet is 0, so both sides bet the floor 0.1 on 20 wins:
    # E+ = 1.1^20 = 6.7275, E- = 0.9^20 = 0.12158. Round 2: 20 seen, mean 20/50 = 0.4, second
    # moment (7.5 + 20)/50 = 0.55, Kelly 0.727 capped at 0.5; the other side bets the floor 0.1.
    # Differences 1, -1: E+ *= 1.5 * 0.5, E- *= 0.9 * 1.1; E = (5.0456 + 0.12036) / 2 = 2.5830.
    test = seq.PairedTest()
    first = test.add([1.0] * 20)
    assert first.e_value == pytest.approx((1.1 ** 20 + 0.9 ** 20) / 2)
    assert first.decision is None  # 3.42 < 20
    second = test.add([1.0, -1.0])
    e_plus, e_minus = 1.1 ** 20 * 1.5 * 0.5, 0.9 ** 20 * 0.9 * 1.1
    assert second.e_value == pytest.approx((e_plus + e_minus) / 2)
    assert second.e_value == pytest.approx(2.5830, abs=1e-4)
    assert second.p_value == pytest.approx(1 / first.e_value)  # 1 / the largest e-value so far
    assert second.n == 22 and second.mean == pytest.approx(20 / 22)


def test_paired_decides_and_keeps_the_decision() -> None:
    test = seq.PairedTest()
    steps = [test.add([1.0] * 10) for _ in range(4)]
    decided = [s for s in steps if s.decision is not None]
    assert decided and decided[0].decision == "b_better"
    assert all(s.decision == "b_better" and s.decided_at == decided[0].round for s in decided)
    worse = seq.paired_sequential([[-1.0] * 10] * 4)
    assert worse[-1].decision == "a_better"


def test_margin_decides_equivalent_when_the_difference_is_small() -> None:
    steps = seq.paired_sequential([[0.0] * 50] * 20, margin=0.1)
    assert steps[-1].decision == "equivalent"
    lo, hi = steps[-1].ci
    assert -0.1 < lo <= 0 <= hi < 0.1
    assert seq.paired_sequential([[0.0] * 50] * 20)[-1].decision is None  # no margin: never decides


def test_out_of_range_refused() -> None:
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        seq.ConfidenceSequence().add([1.5])
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        seq.PairedTest().add([2.0])
    with pytest.raises(ValueError, match="margin"):
        seq.PairedTest(margin=0.0)


def test_power_formulas_by_hand() -> None:
    # z(0.975) = 1.959964, z(0.8) = 0.841621: (1.959964 + 0.841621) * 0.5 / 10 = 0.140079;
    # n = (2.801585 * 0.5 / 0.1)^2 = 196.22 -> 197.
    assert seq.mde(100, 0.5) == pytest.approx(0.140079, abs=1e-6)
    assert seq.n_for(0.1, 0.5) == 197
    assert seq.n_for(0.1, 0.0) == 1
    assert seq.mde(seq.n_for(0.05, 0.3), 0.3) <= 0.05
    with pytest.raises(ValueError):
        seq.n_for(0.0, 0.5)
    with pytest.raises(ValueError):
        seq.mde(0, 0.5)


score = st.floats(0, 1, allow_nan=False)
rounds_st = st.lists(st.lists(score, min_size=1, max_size=15), min_size=1, max_size=6)


@settings(max_examples=60, deadline=None)
@given(rounds_st)
def test_intervals_nest_and_shrink(rounds: list[list[float]]) -> None:
    out = seq.confidence_sequence(rounds)
    for (lo0, hi0), (lo1, hi1) in zip(out, out[1:], strict=False):
        assert lo0 <= lo1 <= hi1 <= hi0
    assert all(0 <= lo <= hi <= 1 for lo, hi in out)


@settings(max_examples=60, deadline=None)
@given(st.lists(score, min_size=1, max_size=30), st.integers(1, 5), st.randoms(use_true_random=False))
def test_sample_mean_stays_inside(values: list[float], repeats: int, rnd: object) -> None:
    # One round always holds its mean (at m = mean each gambler's log-capital is at most
    # l * sum(x - m) = 0); so do rounds sharing one mean (here: the same scores reshuffled).
    rounds = []
    for _ in range(repeats):
        r = list(values)
        rnd.shuffle(r)  # type: ignore[attr-defined]
        rounds.append(r)
    m = math.fsum(values) / len(values)
    for lo, hi in seq.confidence_sequence(rounds):
        assert lo <= m <= hi


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.floats(-1, 1, allow_nan=False), min_size=1, max_size=10), min_size=1, max_size=6))
def test_paired_p_value_is_monotone_and_ci_nests(rounds: list[list[float]]) -> None:
    steps = seq.paired_sequential(rounds)
    for a, b in zip(steps, steps[1:], strict=False):
        assert b.p_value <= a.p_value
        assert a.ci[0] <= b.ci[0] <= b.ci[1] <= a.ci[1]
        if a.decision is not None:
            assert b.decision == a.decision
    assert all(0 < s.p_value <= 1 and s.e_value > 0 for s in steps)


def test_the_simulation_keeps_coverage_and_type_one_error() -> None:
    """bench/bench_sequential.py's coverage and type-I rows on 2,000 campaigns each (the
    figures in docs/PERFORMANCE.md are from 10,000): the guarantees hold with room to spare."""
    import importlib.util

    import numpy as np

    from tests.helpers import REPO

    spec = importlib.util.spec_from_file_location("bench_sequential", REPO / "bench" / "bench_sequential.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rng = np.random.default_rng(1)
    coverage = [float(v) for _what, v, _target in bench.coverage_rows(2000, rng)]
    type_one = [float(v) for _what, v, _target in bench.type_one_rows(2000, rng)]
    assert len(coverage) == 4 and min(coverage) >= 0.95, coverage
    assert len(type_one) == 2 and max(type_one) <= 0.05, type_one
