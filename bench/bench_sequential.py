"""Simulated campaigns that stop on evidence: do `assay.sequential`'s guarantees hold, and what
do they save?

    python bench/bench_sequential.py [--campaigns 10000] [--seed 0]

Every row simulates `--campaigns` campaigns of synthetic agents whose true scores are known,
vectorised over campaigns with the bet and capital formulas of `assay.sequential`
(`ci_bet`, `bet_factors`, `paired_bets`), looking after every round:

- coverage: the share of campaigns whose confidence sequence never rules the true mean out
  in any round (so it holds at whatever round a campaign stops); target >= 95%.
  `iid`: tasks drawn from a task distribution (`--pool`), rounds of 20 scores, 50 rounds;
  `suite`: a fixed suite of 50 tasks, each with its own pass rate, rounds are epochs (30), the
  target is the suite's mean pass rate.
- type-I error: the share of campaigns with A = B in which the paired test ever decides;
  target <= alpha. `iid`: pairs correlated through the task's difficulty (Beta(2, 2)), rounds of
  10 pairs up to 1,000; `suite`: 50 tasks where B's pass rates are A's shuffled across tasks
  (every task differs, the suite's mean difference is 0), 30 epochs.
- runs to decide a 10-point difference: pass rates A ~ 0.9 Beta(2, 2), B = A + 0.1, pairs
  correlated through the task, rounds of 10 pairs, at most `cap` pairs; the power is the share
  deciding "B better" by the cap, and the fixed design of the same power has
  `n_for(0.1, sd, alpha, power)` pairs (`sd` of the differences measured on 10^6 pairs).
- `--until-ci 0.05` through `ConfidenceSequence` itself (the grid the campaigns use) on 1,000
  campaigns of pass rate 0.7, rounds of 20: coverage at the stop and runs spent.

Prints one Markdown table (docs/PERFORMANCE.md keeps the current one).
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable

import numpy as np

from assay.sequential import ALPHA, ConfidenceSequence, bet_factors, ci_bet, n_for, paired_bets

Draw = Callable[[np.random.Generator, int], np.ndarray]


class Moments:
    """Per campaign: the count, sum and sum of squares of the observations so far (what the bets read)."""

    def __init__(self, campaigns: int) -> None:
        self.n = np.zeros(campaigns)
        self.total = np.zeros(campaigns)
        self.squares = np.zeros(campaigns)

    def add(self, x: np.ndarray) -> None:
        """One round's observations, a row per campaign."""
        self.n += x.shape[1]
        self.total += x.sum(axis=1)
        self.squares += (x * x).sum(axis=1)


def covered(draw: Draw, mu: np.ndarray, rounds: int, rng: np.random.Generator, alpha: float = ALPHA) -> float:
    """Share of campaigns (rows of `mu`) whose capital at the true mean never reaches 1/alpha."""
    c = mu.size
    seen = Moments(c)
    log_up = np.zeros(c)
    log_down = np.zeros(c)
    out = np.zeros(c, dtype=bool)
    for r in range(rounds):
        x = draw(rng, r)
        lam = ci_bet(seen.n, seen.total, seen.squares, x.shape[1], alpha)
        up, down = bet_factors(x, mu[:, None], lam[:, None])
        log_up += up.sum(axis=1)
        log_down += down.sum(axis=1)
        out |= np.logaddexp(log_up, log_down) - math.log(2) >= math.log(1 / alpha)
        seen.add(x)
    return float(1 - out.mean())


def paired(draw: Draw, rounds: int, rng: np.random.Generator, campaigns: int,
           alpha: float = ALPHA) -> tuple[np.ndarray, np.ndarray]:
    """Per campaign: the round of the first decision (0: none) and its sign (+1 B better, -1 A better)."""
    seen = Moments(campaigns)
    log_plus = np.zeros(campaigns)
    log_minus = np.zeros(campaigns)
    when = np.zeros(campaigns, dtype=int)
    sign = np.zeros(campaigns, dtype=int)
    for r in range(rounds):
        d = draw(rng, r)
        up, down = paired_bets(seen.n, seen.total, seen.squares, alpha)
        log_plus += np.log1p(up[:, None] * d).sum(axis=1)
        log_minus += np.log1p(-down[:, None] * d).sum(axis=1)
        hit = (np.logaddexp(log_plus, log_minus) - math.log(2) >= math.log(1 / alpha)) & (when == 0)
        when[hit] = r + 1
        sign[hit] = np.where(log_plus[hit] >= log_minus[hit], 1, -1)
        seen.add(d)
    return when, sign


def coverage_rows(campaigns: int, rng: np.random.Generator) -> list[tuple[str, str, str]]:
    rows = []
    for name, p in (("Bernoulli p=0.5", 0.5), ("Bernoulli p=0.9", 0.9)):
        mu = np.full(campaigns, p)
        cov = covered(lambda g, _r, p=p: g.binomial(1, p, size=(campaigns, 20)).astype(float), mu, 50, rng)
        rows.append((f"coverage, iid {name}, 50 rounds of 20", f"{cov:.4f}", ">= 0.95"))
    a, b = 2.0, 5.0
    mu = np.full(campaigns, a / (a + b))
    cov = covered(lambda g, _r: g.beta(a, b, size=(campaigns, 20)), mu, 50, rng)
    rows.append(("coverage, iid Beta(2, 5) scores, 50 rounds of 20", f"{cov:.4f}", ">= 0.95"))
    suite = rng.beta(0.5, 0.5, size=(campaigns, 50))
    cov = covered(lambda g, _r: g.binomial(1, suite).astype(float), suite.mean(axis=1), 30, rng)
    rows.append(("coverage, suite of 50 tasks with pass rates Beta(0.5, 0.5), 30 epochs", f"{cov:.4f}", ">= 0.95"))
    return rows


def type_one_rows(campaigns: int, rng: np.random.Generator) -> list[tuple[str, str, str]]:
    def iid(g: np.random.Generator, _r: int) -> np.ndarray:
        p = g.beta(2, 2, size=(campaigns, 10))
        return (g.binomial(1, p) - g.binomial(1, p)).astype(float)

    when, _ = paired(iid, 100, rng, campaigns)
    rows = [("type-I error, iid pairs A = B (task-correlated), up to 100 rounds of 10", f"{(when > 0).mean():.4f}",
             f"<= {ALPHA}")]
    pa = rng.beta(2, 2, size=(campaigns, 50))
    pb = rng.permuted(pa, axis=1)  # every task differs, the suite's mean difference is 0

    def suite(g: np.random.Generator, _r: int) -> np.ndarray:
        return (g.binomial(1, pb) - g.binomial(1, pa)).astype(float)

    when, _ = paired(suite, 30, rng, campaigns)
    rows.append(("type-I error, suite of 50 tasks, B = A shuffled, 30 epochs", f"{(when > 0).mean():.4f}",
                 f"<= {ALPHA}"))
    return rows


def power_rows(campaigns: int, rng: np.random.Generator) -> list[tuple[str, str, str]]:
    delta, size = 0.10, 10

    def pairs(g: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        pa = 0.9 * g.beta(2, 2, size=shape)
        return (g.binomial(1, pa + delta) - g.binomial(1, pa)).astype(float)

    sd = float(pairs(rng, (1_000_000,)).std())
    fixed80 = n_for(delta, sd, ALPHA, 0.8)
    rows = [(f"10-point difference: sd of the differences {sd:.3f}, fixed design at 80% power",
             f"{fixed80} pairs", "")]
    for cap in (fixed80, 2 * fixed80, 4 * fixed80):
        rounds = math.ceil(cap / size)
        when, sign = paired(lambda g, _r: pairs(g, (campaigns, size)), rounds, rng, campaigns)
        right = (when > 0) & (sign > 0)
        power = float(right.mean())
        spent = np.where(when > 0, when * size, rounds * size)
        fixed = n_for(delta, sd, ALPHA, min(power, 0.9999))
        ratio = spent.mean() / fixed
        rows.append((f"10-point difference, cap {rounds * size} pairs: power {power:.3f}, wrong-way {float(((when > 0) & (sign < 0)).mean()):.4f}",
                     f"{spent.mean():.0f} pairs on average vs {fixed} fixed at the same power: ratio {ratio:.2f}",
                     "ratio <= 0.60"))
    return rows


def until_ci_row(rng: np.random.Generator, campaigns: int = 1000) -> tuple[str, str, str]:
    width, p, size = 0.05, 0.7, 20
    stops, hits = [], 0
    for _ in range(campaigns):
        cs = ConfidenceSequence()
        while cs.half_width > width:
            cs.add(rng.binomial(1, p, size=size))
        lo, hi = cs.interval
        hits += lo <= p <= hi
        stops.append(cs.seen.n)
    fixed = math.ceil((1.96 * math.sqrt(p * (1 - p)) / width) ** 2)
    return (f"--until-ci {width} on pass rate {p} ({campaigns} campaigns, rounds of {size})",
            f"coverage at the stop {hits / campaigns:.3f}; {np.mean(stops):.0f} runs on average "
            f"(a fixed-n normal 95% interval of that half-width: {fixed})", ">= 0.95")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--campaigns", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    rows = [*coverage_rows(args.campaigns, rng), *type_one_rows(args.campaigns, rng),
            *power_rows(args.campaigns, rng), until_ci_row(rng)]
    print(f"| {args.campaigns:,} campaigns per row, alpha {ALPHA}, seed {args.seed} | measured | target |")
    print("|---|---|---|")
    for what, value, target in rows:
        print(f"| {what} | {value} | {target} |")
    print(f"\n{time.perf_counter() - t0:.0f} s on {1} core")


if __name__ == "__main__":
    main()
