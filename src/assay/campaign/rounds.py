"""Campaigns that stop on evidence (`assay run --until-ci W` / `--until-decided`), and the
evidence and power `assay compare` and `--dry-run` state.

A round is an epoch of every key (or, with `--pool`, the next `--round-size` tasks of the
paths in an order drawn from `--seed`, each run `--epochs` times). After each round the
stored scores of every round so far are read back (`report.compare.finished`: the current
finished run of each key) and the anytime-valid statistics of `assay.sequential` are
recomputed from them, so a campaign killed and resumed with the same command reaches the same
state and goes on from the round it was in. The round layout is kept in the store (its
key-value cache, `DESIGN_KEY`): a resume with another layout is refused, and `assay compare`
reads the campaign's rounds from it.

Scores enter the statistics scaled to [0, 1] by their kind's range (`KIND_RANGE`; a scenario's
S clipped to [-1, 1]); intervals are reported back in the kind's units, the paired difference
on the scaled scores.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from statistics import NormalDist
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel
from rich.console import Console

from assay import sequential
from assay.errors import InputError
from assay.report.compare import Side, finished
from assay.report.model import Evidence, EvidenceInterval, EvidencePaired, Power, StopCode
from assay.store import Store

if TYPE_CHECKING:
    from assay.campaign.plan import Plan, PlannedRun
    from assay.campaign.runner import RunContext
    from assay.campaign.scheduler import CampaignResult, Executor
    from assay.campaign.service import PreparedCampaign

__all__ = ["DEFAULT_MAX_EPOCHS", "DEFAULT_ROUND_SIZE", "Design", "compare_evidence", "plan_power",
           "run_rounds"]

DEFAULT_MAX_EPOCHS = 10
DEFAULT_ROUND_SIZE = 10
DESIGN_KEY = "assay.sequential/1:"
KIND_RANGE = {"scenario": (-1.0, 1.0)}
"""A kind's score range for the statistics (others: [0, 1]); scores are clipped to it."""
ASSUMED_SD = math.sqrt(0.5)
"""The sd of a per-key difference assumed with no stored pairs: two independent pass/fail
scores at 50% (the largest a pass/fail difference has without negative correlation)."""
INTERVAL = ("anytime-valid {level:g}% confidence sequence of the mean (betting, Waudby-Smith & Ramdas "
            "2023), valid however often it is looked at; scores clipped to their kind's range")
Key = tuple[str, str | None, int]


class Design(BaseModel):
    """The round layout of a campaign that stops on evidence (stored with it)."""

    rule: Literal["until-ci", "until-decided"]
    alpha: float
    width: float | None = None
    margin: float | None = None
    pool: bool = False
    seed: int | None = None
    round_size: int | None = None
    rounds: list[list[str]] | None = None  # --pool: the task ids of each round

    def layout(self) -> tuple[bool, int | None, int | None, list[list[str]] | None]:
        return (self.pool, self.seed, self.round_size, self.rounds)


def design_of(prepared: PreparedCampaign) -> Design:
    o = prepared.options
    rounds = None
    if o.pool:
        import numpy as np

        ids = sorted({t.id for t in prepared.tasks})
        order = [ids[i] for i in np.random.default_rng(o.seed or 0).permutation(len(ids))]
        size = o.round_size or DEFAULT_ROUND_SIZE
        rounds = [order[i:i + size] for i in range(0, len(order), size)]
    return Design(rule="until-ci" if o.until_ci is not None else "until-decided",
                  alpha=o.alpha or sequential.ALPHA, width=o.until_ci, margin=o.margin, pool=o.pool,
                  seed=(o.seed or 0) if o.pool else None,
                  round_size=(o.round_size or DEFAULT_ROUND_SIZE) if o.pool else None, rounds=rounds)


def stored_design(store: Store, campaign: str) -> Design | None:
    raw = store.cache_get(DESIGN_KEY + campaign)
    return Design.model_validate_json(raw) if raw is not None else None


def plan_rounds(plan: Plan, design: Design) -> list[list[PlannedRun]]:
    """The plan's runs, round by round."""
    if design.rounds is not None:
        where = {t: i for i, ids in enumerate(design.rounds) for t in ids}
        out: list[list[PlannedRun]] = [[] for _ in design.rounds]
        for p in plan.runs:
            out[where[p.task.id]].append(p)
        return [r for r in out if r]
    by_epoch: dict[int, list[PlannedRun]] = defaultdict(list)
    for p in plan.runs:
        by_epoch[p.epoch].append(p)
    return [by_epoch[e] for e in sorted(by_epoch)]


def _scaled(score: float, kind: str) -> float:
    lo, hi = KIND_RANGE.get(kind, (0.0, 1.0))
    return (min(max(score, lo), hi) - lo) / (hi - lo)


def _sd(seen: sequential.Moments) -> float:
    if seen.n < 2:
        return 0.0
    mean = seen.total / seen.n
    return math.sqrt(max(seen.squares / seen.n - mean * mean, 0.0) * seen.n / (seen.n - 1))


class _State:
    """The statistics after each round, recomputed from the stored scores of the rounds so far."""

    def __init__(self, agents: Sequence[str], alpha: float, margin: float | None, *, means: bool = True) -> None:
        """`means`: keep each agent's confidence sequence per kind (`intervals`); without, only
        the paired test (what `assay compare` shows)."""
        self.agents, self.alpha, self.means = list(agents), alpha, means
        self.cs: dict[tuple[str, str], sequential.ConfidenceSequence] = {}
        self.paired = sequential.PairedTest(alpha, margin) if len(agents) == 2 else None

    def add(self, keys: Sequence[Key], sides: dict[str, Side]) -> None:
        for agent in self.agents if self.means else ():
            side = sides.get(agent, {})
            by_kind: dict[str, list[float]] = defaultdict(list)
            for k in keys:
                if k in side:
                    run = side[k]
                    by_kind[run.kind].append(_scaled(run.score, run.kind))
            for kind, xs in by_kind.items():
                self.cs.setdefault((agent, kind), sequential.ConfidenceSequence(self.alpha)).add(xs)
        if self.paired is not None:
            a, b = (sides.get(x, {}) for x in self.agents)
            self.paired.add([_scaled(b[k].score, b[k].kind) - _scaled(a[k].score, a[k].kind) for k in keys
                             if k in a and k in b])

    def intervals(self) -> list[EvidenceInterval]:
        out = []
        for (agent, kind), cs in sorted(self.cs.items()):
            lo_k, hi_k = KIND_RANGE.get(kind, (0.0, 1.0))
            span = hi_k - lo_k
            lo, hi = cs.interval
            mean = lo_k + span * cs.seen.total / cs.seen.n if cs.seen.n else None
            out.append(EvidenceInterval(agent=agent, kind=kind, n=cs.seen.n, mean=mean, lo=lo_k + span * lo,
                                        hi=lo_k + span * hi, half_width=span * (hi - lo) / 2))
        return out

    def paired_block(self) -> EvidencePaired | None:
        if self.paired is None:
            return None
        step = self.paired.step()
        sd = _sd(self.paired.seen) if step.n >= 2 else None
        mde80 = sequential.mde(step.n, sd, self.alpha) if sd is not None else None
        fixed = (sequential.n_for(abs(step.mean), sd, self.alpha) if sd is not None and step.mean else None)
        return EvidencePaired(a=self.agents[0], b=self.agents[1], n=step.n, mean_diff=step.mean, sd=sd,
                              e_value=step.e_value, p_value=step.p_value, ci=list(step.ci),
                              margin=self.paired.margin, decision=step.decision, decided_at=step.decided_at,
                              mde80=mde80, fixed_pairs=fixed)

    def fixed_runs_for_width(self, width: float) -> int:
        """Runs fixed-n normal intervals of that half-width need, summed over agents and kinds."""
        z = NormalDist().inv_cdf(1 - self.alpha / 2)
        total = 0
        for (_agent, kind), cs in self.cs.items():
            lo_k, hi_k = KIND_RANGE.get(kind, (0.0, 1.0))
            total += max(1, math.ceil((z * _sd(cs.seen) * (hi_k - lo_k) / width) ** 2))
        return total


def _keys(runs: Sequence[PlannedRun]) -> list[Key]:
    return sorted({(p.task.id, p.level, p.epoch) for p in runs}, key=lambda k: (k[0], k[1] or "", k[2]))


def _merge(total: CampaignResult, part: CampaignResult) -> None:
    for name in ("ran", "already_done", "by_others", "not_started", "void", "passed"):
        setattr(total, name, getattr(total, name) + getattr(part, name))
    total.cost_usd += part.cost_usd
    total.elapsed_s += part.elapsed_s
    total.spent_before = total.spent_before or part.spent_before
    total.budget_reached = part.budget_reached if part.budget_reached is not None else total.budget_reached
    total.stopped_agents.update(part.stopped_agents)
    total.interrupted = total.interrupted or part.interrupted


def _check_design(store: Store, campaign: str, design: Design) -> None:
    """The layout stored with the campaign must be this command's (a resume with another
    --pool, --seed or --round-size would mix two orders): InputError, exit 2, nothing run."""
    before = stored_design(store, campaign)
    if before is None:
        store.cache_put(DESIGN_KEY + campaign, design.model_dump_json())
        return
    if before.layout() != design.layout():
        was = f"--pool --seed {before.seed} --round-size {before.round_size}" if before.pool else "epochs as rounds"
        raise InputError(None, "--campaign", f"campaign {campaign!r} was started with {was}; run it again with "
                                             "the same round flags, or name another --campaign")
    if before != design:  # another rule, alpha, width or margin: the same runs, read another way
        store.cache_put(DESIGN_KEY + campaign, design.model_dump_json())


async def run_rounds(prepared: PreparedCampaign, ctx: RunContext, *, console: Console | None,
                     show_progress: bool, execute: Executor) -> tuple[CampaignResult, Evidence, set[str]]:
    """Run round after round until the rule is met, the rounds, the budget or an agent ends;
    the totals, the evidence block, and the key digests of the rounds run."""
    from assay.campaign.plan import Plan
    from assay.campaign.scheduler import CampaignResult, run_campaign

    o, store = prepared.options, ctx.store
    design = design_of(prepared)
    _check_design(store, o.campaign, design)
    rounds = plan_rounds(prepared.plan, design)
    agents = [a.spec for a in prepared.agents]
    state = _State(agents, design.alpha, design.margin)
    total = CampaignResult()
    spent: set[str] = set()
    stopped: tuple[StopCode, str] = ("pool", f"the pool ended ({len(prepared.tasks)} tasks)") if design.pool else \
        ("max_epochs", f"--max-epochs {len(rounds)} reached")
    done = 0
    for i, runs in enumerate(rounds, 1):
        part = await run_campaign(Plan(runs=runs, skipped=[]), ctx, console=console, show_progress=show_progress,
                                  execute=execute)
        _merge(total, part)
        spent |= {p.digest for p in runs}
        done = i
        sides = {a: finished(store, o.campaign, a) for a in agents}
        state.add(_keys(runs), sides)
        why = _stop(state, design, i, part)
        if console is not None:
            console.print(_round_line(state, i, len(rounds)), soft_wrap=True, highlight=False)
        if why is not None:
            stopped = why
            break
    intervals = state.intervals()
    paired = state.paired_block()
    if design.rule == "until-ci":
        fixed: int | None = state.fixed_runs_for_width(design.width or 0.0) if intervals else None
    else:
        fixed = 2 * paired.fixed_pairs if paired is not None and paired.fixed_pairs is not None else None
    evidence = Evidence(rule=design.rule, interval=INTERVAL.format(level=100 * (1 - design.alpha)),
                        alpha=design.alpha, width=design.width, margin=design.margin, pool=design.pool,
                        seed=design.seed, rounds=done, rounds_max=len(rounds), stopped=stopped[1],
                        stopped_because=stopped[0],
                        runs=len(spent), cost_usd=store.campaign_cost(o.campaign), fixed_runs=fixed,
                        intervals=intervals, paired=paired if design.rule == "until-decided" else None)
    return total, evidence, spent


def _stop(state: _State, design: Design, i: int, part: CampaignResult) -> tuple[StopCode, str] | None:
    """Why the campaign stops after round `i` (SPEC's code, and in words), or None to run the next."""
    if part.interrupted:
        return "interrupted", f"interrupted in round {i}"
    if design.rule == "until-decided" and state.paired is not None and state.paired.decision is not None:
        step = state.paired.step()
        if step.decision == "equivalent":
            return "decided", f"decided after round {i}: equivalent within {design.margin:g}"
        return "decided", (f"decided after round {i}: {sequential.DECISION_TEXT[step.decision or '']} (e-value {step.e_value:.3g} >= 1/alpha = "
                f"{1 / design.alpha:g})")
    if design.rule == "until-ci":
        widths = [iv.half_width for iv in state.intervals()]
        if widths and max(widths) <= (design.width or 0.0):
            return "ci", f"every interval has half-width <= {design.width:g} after round {i}"
    if part.budget_reached is not None:
        return "budget", f"the campaign budget (--max-campaign-usd {part.budget_reached:g}) was reached in round {i}"
    if part.stopped_agents:
        return "agent_stopped", f"an agent was stopped in round {i}: {', '.join(sorted(part.stopped_agents))}"
    return None


def _round_line(state: _State, i: int, n: int) -> str:
    parts = [f"{iv.agent} {iv.kind} {iv.mean:.3f} [{iv.lo:.3f}, {iv.hi:.3f}]" for iv in state.intervals()
             if iv.mean is not None]
    if state.paired is not None and state.paired.seen.n:
        s = state.paired.step()
        parts.append(f"B-A {s.mean:+.3f} [{s.ci[0]:+.3f}, {s.ci[1]:+.3f}] e={s.e_value:.3g}"
                     + (f" {sequential.DECISION_TEXT[s.decision]}" if s.decision else ""))
    return f"round {i}/{n}: " + "; ".join(parts)


# --- assay compare and --dry-run ---------------------------------------------------------


def compare_evidence(store: Store, campaign: str, against: str | None, a: str, b: str, side_a: Side,
                     side_b: Side, detect: float | None) -> tuple[EvidencePaired | None, Power]:
    """The anytime-valid paired test of B against A over the campaign's rounds (the stored round
    layout of a campaign that stopped on evidence, else one round per epoch), and the power of
    a fixed design of the pairs there."""
    design = stored_design(store, campaign) if against in (None, campaign) else None
    alpha = design.alpha if design is not None else sequential.ALPHA
    shared = set(side_a) & set(side_b)
    if design is not None and design.rounds is not None:
        where = {t: i for i, ids in enumerate(design.rounds) for t in ids}
        index = {k: where.get(k[0], len(design.rounds)) for k in shared}
    else:
        index = {k: k[2] for k in shared}
    grouped: dict[int, list[Key]] = defaultdict(list)
    for k in shared:
        grouped[index[k]].append(k)
    # Sides by position, not name: with --against-campaign both may be the same agent.
    state = _State(["A", "B"], alpha, design.margin if design is not None else None, means=False)
    for r in sorted(grouped):
        state.add(sorted(grouped[r], key=lambda k: (k[0], k[1] or "", k[2])), {"A": side_a, "B": side_b})
    paired = state.paired_block() if shared else None
    if paired is not None:
        paired.a, paired.b = a, b
    cost = _cost_per_run(store, campaign)
    if paired is not None:
        paired.runs = 2 * paired.n
        paired.cost_usd = None if cost is None else paired.runs * cost
        if paired.fixed_pairs is not None:
            paired.fixed_runs = 2 * paired.fixed_pairs
            paired.fixed_usd = None if cost is None else paired.fixed_runs * cost
    return paired, power_of(len(shared), paired.sd if paired is not None else None, alpha, detect, cost)


def _cost_per_run(store: Store, campaign: str) -> float | None:
    """USD per stored attempt, agent and judge (None: none stored, or a price unknown)."""
    costs = store.attempt_costs(campaign)
    if not costs.attempts or costs.unknown:
        return None
    return costs.usd / costs.attempts


def power_of(n: int, sd: float | None, alpha: float, detect: float | None, usd_per_run: float | None) -> Power:
    """`Power` of `n` pairs with differences of standard deviation `sd` (`ASSUMED_SD` when
    unknown: fewer than 2 pairs); with `detect`, the pairs, runs and dollars to detect it."""
    basis = "observed on the stored pairs (scores scaled to [0, 1] per kind)"
    if sd is None or n < 2:
        sd, basis = ASSUMED_SD, "assumed: no stored pairs (two independent pass/fail scores at 50%)"
    out = Power(n=n, sd=sd, sd_basis=basis, alpha=alpha, mde80=sequential.mde(n, sd, alpha) if n else None)
    if detect is not None:
        out.detect = detect
        out.n_detect = sequential.n_for(detect, sd, alpha)
        out.runs_detect = 2 * out.n_detect
        out.usd_detect = None if usd_per_run is None else out.runs_detect * usd_per_run
    return out


def plan_power(prepared: PreparedCampaign, estimates: Sequence[tuple[str, int, float | None]]) -> Power | None:
    """`--dry-run` of two agents: the power of the plan's pairs (sd from the pairs the campaign
    already holds, else `ASSUMED_SD`), and with `--detect` the pairs and dollars needed, priced at
    the dry run's estimate per run (`estimates`: agent, runs to do, their estimated cost)."""
    agents = [a.spec for a in prepared.agents]
    if len(agents) != 2:
        return None
    keys = {a: {(p.task.id, p.level, p.epoch) for p in prepared.plan.runs if p.agent.spec == a} for a in agents}
    n = len(keys[agents[0]] & keys[agents[1]])
    sd = None
    url = prepared.store_url
    if not url.startswith("sqlite:///") or _exists(url):
        sides = [finished(prepared.store, prepared.options.campaign, a) for a in agents]
        diffs = [_scaled(sides[1][k].score, sides[1][k].kind) - _scaled(sides[0][k].score, sides[0][k].kind)
                 for k in set(sides[0]) & set(sides[1])]
        if len(diffs) >= 2:
            m = sequential.Moments()
            import numpy as np

            m.add(np.asarray(diffs))
            sd = _sd(m)
    per_run = [(c / todo) for _a, todo, c in estimates if todo and c is not None]
    usd = sum(per_run) / len(per_run) if len(per_run) == len(estimates) and per_run else None
    return power_of(n, sd, prepared.options.alpha or sequential.ALPHA, prepared.options.detect, usd)


def _exists(url: str) -> bool:
    from pathlib import Path

    return Path(url.removeprefix("sqlite:///")).exists()
