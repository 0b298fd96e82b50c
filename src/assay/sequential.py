"""Anytime-valid statistics for campaigns that stop on evidence, and the power of a fixed design.

Pure functions (numpy, no I/O), like `assay.metrics`:

- `ConfidenceSequence`: a confidence sequence for the mean of scores in [0, 1] by betting
  (the hedged capital process of Waudby-Smith & Ramdas 2023, JRSS-B). For every candidate
  mean m on a grid, two gamblers bet that the next scores lie above m (capital
  ``K+ = prod(1 + l+ (x - m))``) and below it (``K- = prod(1 - l- (x - m))``); m is ruled out
  for good once ``(K+ + K-) / 2`` reaches ``1 / alpha``. By Ville's inequality the true mean is
  ruled out with probability at most alpha over the whole sequence, so the interval may be
  looked at after every round and the campaign stopped whenever it is narrow enough.
- `PairedTest`: an e-process for "the mean per-key difference B - A (in [-1, 1]) is 0", two
  one-sided betting processes mixed half and half, with the confidence sequence of the
  difference beside it for `--margin` (equivalence when it lies inside (-margin, margin)).
- `mde`, `n_for`: the paired normal approximation of a fixed design.

Observations arrive in rounds (a round is what a campaign runs between two decisions). The bet
of a round is fixed before the round, from the rounds before it, and is the same for every
observation of the round. That is what keeps the guarantee when a round's observations are
independent but not identically distributed (an epoch of every task of a fixed suite: task i
has its own mean mu_i and the target is their average mu): then
``E[prod_i (1 + l (X_i - mu))] = prod_i (1 + l (mu_i - mu)) <= exp(l sum_i (mu_i - mu)) = 1``,
so the capital at the true mean is a nonnegative supermartingale from round to round.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "ALPHA",
    "GRID",
    "Moments",
    "PAIRED_FLOOR",
    "PAIRED_PRIOR_N",
    "TRUNCATION",
    "ConfidenceSequence",
    "Decision",
    "PairedStep",
    "PairedTest",
    "bet_factors",
    "ci_bet",
    "confidence_sequence",
    "mde",
    "n_for",
    "paired_bets",
    "paired_sequential",
]

ALPHA = 0.05
TRUNCATION = 0.5
"""A bet risks at most this share of the capital: ``l+ <= c / m`` and ``l- <= c / (1 - m)`` (so
a factor never falls below ``1 - c``); for the differences ``|l| <= c``."""
GRID = 2001
"""Candidate means on [0, 1] (a step of 0.0005); the interval is widened by one step each side."""
PAIRED_PRIOR_N = 30
"""The paired bets start as if this many differences of mean 0 (second moment 1/4) had been
seen: early bets follow a few lucky pairs less (bench/bench_sequential.py chose it)."""
PAIRED_FLOOR = 0.1
"""Each side of the paired test bets at least this much, so the side the early data disfavour
still grows when the data turn."""
Decision = Literal["b_better", "a_better", "equivalent"]
"""A paired test's decision as SPEC writes it (the JSON); `DECISION_TEXT` says it in words."""
DECISION_TEXT: dict[str, str] = {"b_better": "B better", "a_better": "A better", "equivalent": "equivalent"}


def ci_bet(n: np.ndarray | float, total: np.ndarray | float, squares: np.ndarray | float,
           n_round: np.ndarray | float, alpha: float) -> np.ndarray:
    """The predictable plug-in bet of a round, from the ``n`` scores seen before it (their
    ``total`` and sum of ``squares``), for a round of ``n_round`` scores:
    ``sqrt(2 log(2 / alpha) / (v * t * log(1 + t)))`` with ``t = n + n_round`` and ``v`` the
    variance seen, shrunk toward 1/4 as if one score of variance 1/4 had been seen first:
    ``v = (1/4 + sum (x - xbar)^2) / (n + 1)``, ``xbar = (1/2 + total) / (n + 1)``. Arrays
    broadcast (one bet per simulated campaign)."""
    import numpy as np

    n_a, tot, sq = np.asarray(n, float), np.asarray(total, float), np.asarray(squares, float)
    xbar = (0.5 + tot) / (n_a + 1)
    spread = np.maximum(sq - 2 * xbar * tot + n_a * xbar * xbar, 0.0)
    var = (0.25 + spread) / (n_a + 1)
    t = n_a + np.asarray(n_round, float)
    return np.sqrt(2 * math.log(2 / alpha) / (var * t * np.log1p(t)))


def bet_factors(x: np.ndarray, m: np.ndarray, lam: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
    """``log(1 + l+ (x - m))`` and ``log(1 - l- (x - m))`` elementwise, with ``l+ = min(lam, c / m)``
    and ``l- = min(lam, c / (1 - m))`` (``c = TRUNCATION``): the two gamblers' log factors for
    scores ``x`` in [0, 1] at candidate means ``m`` (arrays broadcast)."""
    import numpy as np

    with np.errstate(divide="ignore"):
        up = np.minimum(lam, TRUNCATION / m)
        down = np.minimum(lam, TRUNCATION / (1 - m))
    dev = x - m
    return np.log1p(up * dev), np.log1p(-down * dev)


def paired_bets(n: np.ndarray | float, total: np.ndarray | float, squares: np.ndarray | float,
                alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """The bets ``(l+, l-)`` of the two one-sided gamblers on differences in [-1, 1] for the
    next round, from the ``n`` differences seen (their ``total`` and sum of ``squares``): the
    growth-rate optimal bet ``mean / second moment`` for the side it favours, both shrunk as if
    `PAIRED_PRIOR_N` differences of mean 0 and second moment 1/4 had been seen first, never
    below `PAIRED_FLOOR` and at most ``TRUNCATION`` (``alpha`` is unused: the bets do not depend
    on it, the threshold does). Arrays broadcast."""
    import numpy as np

    n_a, tot, sq = np.asarray(n, float), np.asarray(total, float), np.asarray(squares, float)
    mean = tot / (n_a + PAIRED_PRIOR_N)
    second = (0.25 * PAIRED_PRIOR_N + sq) / (n_a + PAIRED_PRIOR_N)
    kelly = mean / second
    return (np.clip(np.maximum(kelly, PAIRED_FLOOR), 0.0, TRUNCATION),
            np.clip(np.maximum(-kelly, PAIRED_FLOOR), 0.0, TRUNCATION))


@dataclass
class Moments:
    """Count, sum and sum of squares of the values seen."""

    n: int = 0
    total: float = 0.0
    squares: float = 0.0

    def add(self, x: np.ndarray) -> None:
        self.n += int(x.size)
        self.total += float(x.sum())
        self.squares += float((x * x).sum())


class ConfidenceSequence:
    """The running confidence sequence of a mean of scores in [0, 1]: `add` a round, read
    `interval`. Candidate means are the `GRID` points of [0, 1]; once ruled out, a point stays
    out (the interval after a round is the intersection of all intervals so far), and the
    interval shown is the span of the points left, widened by one grid step each side (so it
    contains every mean the grid cannot tell apart from one left)."""

    def __init__(self, alpha: float = ALPHA, grid: int = GRID) -> None:
        import numpy as np

        if not 0 < alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {alpha}")
        self.alpha = alpha
        self.m = np.linspace(0.0, 1.0, grid)
        self.log_up = np.zeros(grid)
        self.log_down = np.zeros(grid)
        self.alive = np.ones(grid, dtype=bool)
        self.seen = Moments()
        self.rounds = 0

    def add(self, scores: Sequence[float] | np.ndarray) -> None:
        """One round's scores (each in [0, 1]; ValueError otherwise); an empty round changes nothing."""
        import numpy as np

        x = np.asarray(scores, dtype=float).ravel()
        if x.size == 0:
            return
        if not np.all((x >= 0) & (x <= 1)):
            raise ValueError("scores must lie in [0, 1]")
        lam = float(ci_bet(self.seen.n, self.seen.total, self.seen.squares, x.size, self.alpha))
        values, counts = np.unique(x, return_counts=True)
        up, down = bet_factors(values[None, :], self.m[:, None], lam)
        self.log_up += up @ counts
        self.log_down += down @ counts
        log_k = np.logaddexp(self.log_up, self.log_down) - math.log(2)
        self.alive &= log_k < math.log(1 / self.alpha)
        self.seen.add(x)
        self.rounds += 1

    @property
    def interval(self) -> tuple[float, float]:
        """``(lo, hi)``; ``(0, 1)`` before any score. Should every candidate be ruled out (the
        data are then most unlike any mean), the interval shrinks to the point of least capital."""
        import numpy as np

        idx = np.flatnonzero(self.alive)
        if idx.size == 0:
            best = float(self.m[int(np.argmin(np.logaddexp(self.log_up, self.log_down)))])
            return (best, best)
        last = self.m.size - 1
        return (float(self.m[max(int(idx[0]) - 1, 0)]), float(self.m[min(int(idx[-1]) + 1, last)]))

    @property
    def half_width(self) -> float:
        lo, hi = self.interval
        return (hi - lo) / 2


def confidence_sequence(rounds: Sequence[Sequence[float]], alpha: float = ALPHA) -> list[tuple[float, float]]:
    """The running interval after each round of scores in [0, 1] (see `ConfidenceSequence`)."""
    cs = ConfidenceSequence(alpha)
    out = []
    for r in rounds:
        cs.add(r)
        out.append(cs.interval)
    return out


@dataclass(frozen=True)
class PairedStep:
    """The paired test after a round."""

    round: int
    n: int  # differences seen
    mean: float | None  # mean difference B - A
    e_value: float  # the mixed e-process now
    p_value: float  # anytime-valid p-value: 1 / the largest e-value so far (at most 1)
    ci: tuple[float, float]  # confidence sequence of the mean difference
    decision: Decision | None  # first decision reached, kept from then on
    decided_at: int | None  # the round it was reached


class PairedTest:
    """The anytime-valid paired test on per-key differences ``B - A`` in [-1, 1], round by round.

    Two gamblers bet against "mean difference 0", one that B is better
    (``E+ = prod(1 + l+ d)``), one that A is (``E- = prod(1 - l- d)``), with the bets of
    `paired_bets`; the e-process is ``(E+ + E-) / 2``. It decides B better (A better) the first
    time it reaches ``1 / alpha`` with ``E+ >= E-`` (``E- > E+``): under a mean difference of 0
    that happens with probability at most alpha however long the rounds go on. With a
    ``margin``, it also decides "equivalent" once the confidence sequence of the difference
    (`ConfidenceSequence` on ``(d + 1) / 2``) lies inside ``(-margin, margin)``; equivalence is
    looked at first, so a difference too small to matter is reported as such."""

    def __init__(self, alpha: float = ALPHA, margin: float | None = None) -> None:
        if not 0 < alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {alpha}")
        if margin is not None and not 0 < margin < 1:
            raise ValueError(f"margin must be in (0, 1), got {margin}")
        self.alpha, self.margin = alpha, margin
        self.log_plus = 0.0
        self.log_minus = 0.0
        self.log_max = 0.0
        self.seen = Moments()
        self.cs = ConfidenceSequence(alpha)
        self.rounds = 0
        self.decision: Decision | None = None
        self.decided_at: int | None = None

    def add(self, diffs: Sequence[float] | np.ndarray) -> PairedStep:
        """One round's differences (each in [-1, 1]; ValueError otherwise); the state after it."""
        import numpy as np

        d = np.asarray(diffs, dtype=float).ravel()
        if not np.all((d >= -1) & (d <= 1)):
            raise ValueError("differences must lie in [-1, 1]")
        self.rounds += 1
        if d.size:
            up, down = paired_bets(self.seen.n, self.seen.total, self.seen.squares, self.alpha)
            self.log_plus += float(np.log1p(float(up) * d).sum())
            self.log_minus += float(np.log1p(-float(down) * d).sum())
            self.log_max = max(self.log_max, self.log_e)
            self.seen.add(d)
            self.cs.add((d + 1) / 2)
        if self.decision is None:
            self.decision = self._decide()
            self.decided_at = self.rounds if self.decision is not None else None
        return self.step()

    @property
    def log_e(self) -> float:
        """log of the mixed e-process ``(E+ + E-) / 2``."""
        a, b = self.log_plus, self.log_minus
        return max(a, b) + math.log1p(math.exp(-abs(a - b))) - math.log(2)

    @property
    def ci(self) -> tuple[float, float]:
        lo, hi = self.cs.interval
        return (2 * lo - 1, 2 * hi - 1)

    def _decide(self) -> Decision | None:
        if self.margin is not None and self.seen.n:
            lo, hi = self.ci
            if -self.margin < lo and hi < self.margin:
                return "equivalent"
        if self.log_e >= math.log(1 / self.alpha):
            return "b_better" if self.log_plus >= self.log_minus else "a_better"
        return None

    def step(self) -> PairedStep:
        return PairedStep(round=self.rounds, n=self.seen.n,
                          mean=self.seen.total / self.seen.n if self.seen.n else None,
                          e_value=math.exp(min(self.log_e, 700.0)),
                          p_value=min(1.0, math.exp(-self.log_max)), ci=self.ci,
                          decision=self.decision, decided_at=self.decided_at)


def paired_sequential(rounds: Sequence[Sequence[float]], alpha: float = ALPHA,
                      margin: float | None = None) -> list[PairedStep]:
    """The paired test's state after each round of differences (see `PairedTest`)."""
    test = PairedTest(alpha, margin)
    return [test.add(r) for r in rounds]


# --- the power of a fixed design (paired normal approximation) --------------------------


def _z_sum(alpha: float, power: float) -> float:
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(f"alpha and power must lie in (0, 1), got {alpha}, {power}")
    z = NormalDist().inv_cdf
    return z(1 - alpha / 2) + z(power)


def mde(n: int, sd: float, alpha: float = ALPHA, power: float = 0.8) -> float:
    """Minimum detectable mean difference of a fixed design of ``n`` pairs whose differences
    have standard deviation ``sd``, for a two-sided test at ``alpha`` with the given power:
    ``(z(1 - alpha/2) + z(power)) * sd / sqrt(n)``. ValueError for n < 1 or sd < 0."""
    if n < 1 or sd < 0:
        raise ValueError(f"need n >= 1 and sd >= 0, got n={n}, sd={sd}")
    return _z_sum(alpha, power) * sd / math.sqrt(n)


def n_for(diff: float, sd: float, alpha: float = ALPHA, power: float = 0.8) -> int:
    """Pairs a fixed design needs to detect a mean difference ``diff`` with that power:
    ``ceil(((z(1 - alpha/2) + z(power)) * sd / diff) ** 2)``, at least 1."""
    if diff <= 0 or sd < 0:
        raise ValueError(f"need diff > 0 and sd >= 0, got diff={diff}, sd={sd}")
    return max(1, math.ceil((_z_sum(alpha, power) * sd / diff) ** 2))
