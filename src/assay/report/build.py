"""Building the report JSON (SPEC.md "Report JSON") from stored runs.

Additions to the SPEC's keys (documented here and in docs):
- each run row: `options` (the run's result options: judges, judge mode, search mode, limits),
  `search` (the search backend the run was offered: native, local, brave; null for none);
- each agent summary: `judge {agreement, na, votes, runs, items, mode, judges}` where any run
  was judged (`agreement`: share of judged items on which every vote agreed; `na`: items no
  judge could answer, counted 0); `human_agreement {domain: {pearson_r, p_value,
  raw_agreement, n}}` where a labels file (`--labels`) labels the runs' own answers (see
  `assay.report.agreement`);
  `pass_at_k`, `pass_hat_k` averaged over tasks; in each kind's block `kind_economics`
  (`cost_usd`, `tokens`, `tokens_per_task`, `cost_per_task`, `score_per_1k_tokens`,
  `score_per_usd`, `cost_distribution`, `pass_at_k`, `pass_hat_k`), the rubric block's
  `value {currency: {earned, available}}`, the scenario block's `families`;
- top level: `tasks`, one row per (agent, task, level, options) with the epochs run, passes,
  mean score, `pass_at_k` and `pass_hat_k` for k = 1..n; `search_delta {agent: delta}`: for
  an agent run both without search (`--search off`) and with it (`local`, `brave` or `native`), the
  mean over the tasks run both ways of (mean score with search - mean score without), and
  `search_deltas {agent: {mode: {delta, tasks, with, without}}}` per search mode; `warnings`:
  a task run under several contents (hashes) or runs of several harness versions, and agents
  that finished different task sets of a kind; `task_sets {kind: {shared, agents, differ,
  missing}}` and `shared_tasks` (true under `--shared-tasks`); `failure_modes` under
  `--failure-modes` (`assay.report.failure_modes`); `human_baseline {kind: {family: {mean,
  ci95, runs, people, tasks, agents}}}`: the human expert baseline per task family where people
  (`human:NAME` agents) have at least `MIN_HUMAN_RUNS` (3) scored runs of that kind on it, with
  every model's mean on the same tasks beside it (`human_baseline`); `pareto_points {scope:
  [{agent, cost_usd, mean_score}]}` for every scope `pareto` has a front of (kind, kind/modality).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Container, Iterable
from typing import Any, Literal, TypeVar

import numpy as np
from pydantic import BaseModel

from assay import metrics
from assay.record import Audit, RunRecord, primary_kind
from assay.report.agreement import human_agreement, judge_summary
from assay.report.runs import (
    ReportJudgeInfo,
    ReportRubric,
    ReportRun,
    ReportScenario,
    as_report_runs,
    read_runs,
)
from assay.store import Store

SCHEMA = "assay.report/1"
R = TypeVar("R", RunRecord, ReportRun)
CELLS = [f"{m}/{e}" for m in ("text", "multimodal") for e in ("single-step", "multi-step", "multi-step-with-tools")]


BaselineScores = dict[tuple[str, str], dict[str, list[float]]]
"""An agent's scores per (kind, task family) scope and task (`baseline_scores`)."""

_NO_AUDIT = Audit().model_dump(mode="json")


def run_row(run: RunRecord | ReportRun) -> dict[str, Any]:
    """A run's row of the report's `runs` (and of `assay show --json`, the web run page)."""
    r = run if isinstance(run, ReportRun) else ReportRun.from_record(run)
    grade = r.grade.flat()
    if "audit" not in grade:  # `Audit(pre_audit_score=r.score).model_dump(mode="json")`, without pydantic per run
        grade["audit"] = {**_NO_AUDIT, "flags": [], "pre_audit_score": None if r.score is None else float(r.score)}
    return {
        "run_id": r.run_id, "task_id": r.key.task_id, "task_hash": r.key.task_hash, "kinds": list(r.kinds),
        "agent": r.key.agent, "level": r.key.level, "epoch": r.key.epoch, "attempt": r.attempt,
        "status": r.status, "end_reason": r.end_reason, "void_reason": r.void_reason, "sandbox": r.sandbox,
        "score": r.score, "passed": r.passed, "value": r.value,
        "usage": r.usage.model_dump(), "judge_usage": r.judge_usage.model_dump(),
        "grade": grade, "model": r.model, "harness_version": r.harness_version, "turns": r.turns,
        "duration_s": r.duration_s, "task": r.task_meta, "options": r.options, "search": r.search,
    }


def table_row(r: ReportRun) -> dict[str, Any]:
    """A run's row as the HTML report's runs table shows it: `run_row`'s keys of the table's
    columns only, so the HTML report reads the store's projection, not whole records."""
    return {"run_id": r.run_id, "task_id": r.key.task_id, "agent": r.key.agent, "level": r.key.level,
            "epoch": r.key.epoch, "status": r.status, "end_reason": r.end_reason, "score": r.score,
            "passed": r.passed, "usage": {"cost_usd": r.usage.cost_usd}}


def _ci(values: list[float]) -> list[float] | None:
    if not values:
        return None
    lo, hi = metrics.bootstrap_ci(values, resamples=2000)
    return [lo, hi]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


PassCounts = dict[tuple[str, str | None, str], list[int]]
"""(task, level, options hash) -> [runs, passed runs], the tasks in the order they first occur."""


def pass_counts(done: list[ReportRun]) -> PassCounts:
    """Each task's runs and passes (`AgentRuns` counts an agent's scored runs the same way)."""
    by_task: PassCounts = {}
    for r in done:
        k = r.key
        task = (k.task_id, k.level, k.options_hash)
        nc = by_task.get(task)
        if nc is None:
            by_task[task] = [1, 1 if r.passed else 0]
        else:
            nc[0] += 1
            nc[1] += 1 if r.passed else 0
    return by_task


def pass_k(by_task: PassCounts) -> dict[str, dict[str, float]]:
    """pass@k and pass^k curves over epochs, k = 1..the smallest epoch count of a task, each k
    the mean over tasks (task, level, options) of the unbiased estimators. Linear in the runs:
    each task's curve comes from `metrics.pass_at_k_curve` (one multiplication per k)."""
    if not by_task:
        return {"pass_at_k": {}, "pass_hat_k": {}}
    # Tasks with the same (epochs, passes) share a curve: one curve per distinct pair.
    pairs = Counter(map(tuple, by_task.values()))
    kmax = min(n for n, _c in pairs)
    at = [0.0] * kmax
    hat = [0.0] * kmax
    for (n, c), times in pairs.items():
        for i, v in enumerate(metrics.pass_at_k_curve(n, c)[:kmax]):
            at[i] += v * times
        for i, v in enumerate(metrics.pass_hat_k_curve(n, c)[:kmax]):
            hat[i] += v * times
    t = len(by_task)
    return {"pass_at_k": {str(k + 1): v / t for k, v in enumerate(at)},
            "pass_hat_k": {str(k + 1): v / t for k, v in enumerate(hat)}}


def task_rows(runs: list[ReportRun]) -> list[dict[str, Any]]:
    """pass@k and pass^k per (agent, task, level, options), k = 1..epochs run."""
    groups: dict[tuple[str, str, str | None, str], list[ReportRun]] = defaultdict(list)
    for r in runs:
        if r.status == "done" and r.score is not None:
            groups[(r.key.agent, r.key.task_id, r.key.level, r.key.options_hash)].append(r)
    rows = []
    for (agent, task_id, level, _), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1],
                                                                                 kv[0][2] or "", kv[0][3])):
        n = len(rs)
        c = sum(1 for r in rs if r.passed)
        rows.append({
            "agent": agent, "task_id": task_id, "level": level, "search": rs[0].options.get("search", "off"),
            "epochs": n, "passes": c, "mean_score": _mean([averaged(r) for r in rs]),
            "pass_at_k": {str(k): v for k, v in enumerate(metrics.pass_at_k_curve(n, c), start=1)},
            "pass_hat_k": {str(k): v for k, v in enumerate(metrics.pass_hat_k_curve(n, c), start=1)},
        })
    return rows


def _tokens(r: ReportRun) -> int:
    return r.usage.tokens


def cost_distribution(runs: list[ReportRun]) -> dict[str, Any] | None:
    """Per-run cost (USD) of the runs whose price is known: min, median, p90, max (numpy's
    linear percentiles), with how many runs it covers and how many have an unknown cost."""
    known = [c for r in runs if (c := r.usage.cost_usd) is not None]
    if not known:
        return None
    lo, med, p90, hi = (float(x) for x in np.percentile(np.asarray(known, dtype=float), [0, 50, 90, 100]))
    return {"min": lo, "median": med, "p90": p90, "max": hi, "runs": len(known), "unknown": len(runs) - len(known)}


def kind_economics(kind_runs: list[ReportRun], scored: list[ReportRun], headline: float | None, n_tasks: int, *,
                   of_all: tuple[dict[str, Any], list[ReportRun], list[ReportRun]] | None = None) -> dict[str, Any]:
    """What a kind's block cost: `cost_usd` (its runs, void ones too: they were paid for; null
    when a price is unknown), `tokens`, `tokens_per_task` and `cost_per_task` (that spend over
    the tasks the block covers), `score_per_1k_tokens` and `score_per_usd` (the block's
    headline over the tokens / dollars spent per task; null when nothing was spent or the cost
    is unknown), `cost_distribution`, and the pass@k / pass^k curves of its scored runs.
    `n_tasks`: how many tasks its scored runs are of (the block's `tasks`). `of_all`: (an agent
    summary, its runs, its scored runs), whose `cost_usd`, `tokens` and curves are reused where
    the kind's runs are all of them (an agent of one kind)."""
    n_tasks = n_tasks or 1
    summary, all_runs, all_scored = of_all or ({}, [], [])
    if of_all is not None and len(kind_runs) == len(all_runs):  # a subset of them, so the same runs
        tokens, cost = summary["tokens"], summary["cost_usd"]
    else:
        tokens = sum(_tokens(r) for r in kind_runs)
        costs = [r.usage.cost_usd for r in kind_runs]
        cost = None if any(c is None for c in costs) else sum(c or 0.0 for c in costs)
    same_scored = of_all is not None and len(scored) == len(all_scored)
    curves = ({"pass_at_k": summary["pass_at_k"], "pass_hat_k": summary["pass_hat_k"]} if same_scored
              else pass_k(pass_counts(scored)))
    tpt = tokens / n_tasks
    cpt = None if cost is None else cost / n_tasks
    return {
        "cost_usd": cost, "tokens": tokens, "tokens_per_task": tpt, "cost_per_task": cpt,
        "score_per_1k_tokens": headline / (tpt / 1000) if headline is not None and tpt > 0 else None,
        "score_per_usd": headline / cpt if headline is not None and cpt else None,
        "cost_distribution": cost_distribution(kind_runs),
        **curves,
    }


def rubric_value(by_task: dict[str, list[Any]]) -> dict[str, dict[str, float]]:
    """Value earned vs value available per currency (GDPval): each task's value counts once
    as available, and as earned times the share of its scored runs (epochs) that passed.
    `by_task`: task -> [its first scored run's value, its scored runs with a value, those
    that passed], in the order the tasks first occur (the rubric block's pass counts them)."""
    sums: dict[str, list[float]] = {}  # currency -> [earned, available]
    for v, n, c in by_task.values():
        currency = str(v["currency"])
        acc = sums.get(currency)
        if acc is None:
            acc = sums[currency] = [0.0, 0.0]
        amount = float(v["amount"])
        acc[1] += amount
        acc[0] += amount * c / n
    return {cur: {"earned": earned, "available": available} for cur, (earned, available) in sorted(sums.items())}


def scenario_families(scen: list[tuple[ReportRun, Any]]) -> dict[str, dict[str, Any]]:
    """Per scenario family (the task id before its first `/`): mean S over its variants
    (tasks), each variant's mean S, and the spread (max - min of the variants' means)."""
    by: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for r, sg in scen:
        by[r.key.task_id.split("/", 1)[0]][r.key.task_id].append((sg.uplift_adj, sg.contact_cost))
    out: dict[str, dict[str, Any]] = {}
    for fam, variants in sorted(by.items()):
        means = {t: metrics.mean_run_score({t: v}) for t, v in sorted(variants.items())}
        out[fam] = {"mean_s": metrics.mean_run_score(variants), "variants": means,
                    "spread": max(means.values()) - min(means.values()),
                    "runs": sum(len(v) for v in variants.values())}
    return out


class AgentRuns:
    """One agent's runs and what the report's steps read of them, collected in one pass over
    them: over 100,000 runs, a pass per step (the summary's sums, its blocks' runs, the Pareto
    sums, the search modes, the mixing warnings) costs more than the steps' own work."""

    __slots__ = ("by_kind", "contract", "cost", "currencies", "done", "ends", "finished", "judge_cost", "judge_infos",
                 "modes", "pass_counts", "passes", "rubric", "runs", "scen", "scopes", "scored", "task_pairs",
                 "tokens", "unpriced", "value_items", "versions", "void")

    def __init__(self, runs: list[ReportRun]) -> None:
        self.runs = runs
        self.scored: list[ReportRun] = []  # the done runs with a score
        self.done = 0
        self.void = 0  # runs the harness failed (status void)
        self.passes = 0  # scored runs that passed
        self.pass_counts: PassCounts = {}  # of the scored runs, as `pass_counts` counts them
        # Sums over every run, in run order (as `sum` adds them); None: a price is unknown.
        self.cost: float | None = 0
        self.judge_cost: float | None = 0
        self.tokens = 0
        self.ends: dict[str, int] = {}  # end reason -> runs
        self.currencies: set[str] = set()  # of every run's value, void ones too
        # (passed, amount, currency) per done run with a value (`metrics.economic_value`'s items)
        self.value_items: list[tuple[float, float, str]] = []
        self.by_kind: dict[str, list[ReportRun]] = defaultdict(list)  # runs with kinds, void ones too (they cost)
        self.finished: dict[str, set[str]] = defaultdict(set)  # kind -> the tasks of its done runs (`task_sets`)
        self.judge_infos: list[ReportJudgeInfo] = []  # of the done runs a judge graded
        self.rubric: list[tuple[ReportRun, ReportRubric]] = []  # the rubric block's runs: scored, rubric-graded
        self.contract: list[ReportRun] = []  # the contract block's: scored, of kind contract
        self.scen: list[tuple[ReportRun, ReportScenario]] = []  # the scenario block's: scored, scenario-graded
        self.modes: set[str] = set()  # the search modes of the scored runs
        # The Pareto sums of the scored runs: [cost, sum of `averaged` scores, runs] per
        # (kind, None) and (kind, modality); `unpriced`: the scopes where a cost is unknown.
        self.scopes: dict[tuple[str, str | None], list[float]] = {}
        self.unpriced: set[tuple[str, str | None]] = set()
        self.task_pairs: set[tuple[str, str]] = set()  # (task, hash) of every run
        self.versions: set[str] = set()  # harness versions of every run
        self._scan()

    def task_voids(self) -> tuple[Counter[str], Counter[str]]:
        """Runs per task id and void runs per task id (what `void_outliers` compares across agents)."""
        runs = Counter(r.key.task_id for r in self.runs)
        void = Counter(r.key.task_id for r in self.runs if r.status == "void") if self.void else Counter()
        return runs, void

    def finished_kinds(self) -> dict[str, set[str]]:
        """Per kind the agent ran (void runs count), the tasks it finished: what `task_sets` reads."""
        return {kind: self.finished.get(kind, set()) for kind in self.by_kind}

    def _scan(self) -> None:
        """The one loop over the runs: the report's hot loop, so it reads each attribute once into
        a local, binds the methods it calls, and calls no function of its own per run (but
        `averaged` for scenario-graded runs)."""
        cost, judge_cost, tokens, done, passes, void = self.cost, self.judge_cost, self.tokens, 0, 0, 0
        ends, by_kind, finished = self.ends, self.by_kind, self.finished
        add_pair, add_version, add_currency = self.task_pairs.add, self.versions.add, self.currencies.add
        add_value, add_info, add_scored = self.value_items.append, self.judge_infos.append, self.scored.append
        add_mode, add_unpriced, counts = self.modes.add, self.unpriced.add, self.pass_counts
        pareto: dict[tuple[str, str], tuple[list[float], list[float]]] = {}  # (kind, modality) -> their two sums
        for r in self.runs:
            key, usage, value, kinds = r.key, r.usage, r.value, r.kinds
            c, jc = usage.cost_usd, r.judge_usage.cost_usd
            cost = None if c is None or cost is None else cost + (c or 0.0)
            judge_cost = None if jc is None or judge_cost is None else judge_cost + (jc or 0.0)
            tokens += usage.tokens
            ends[r.end_reason] = ends.get(r.end_reason, 0) + 1
            add_pair((key.task_id, key.task_hash))
            add_version(r.harness_version)
            if value:
                add_currency(value["currency"])
            kind = r.kind
            if kinds:
                by_kind[kind].append(r)
            if r.status != "done":
                void += r.status == "void"
                continue
            done += 1
            if kinds:
                finished[kind].add(key.task_id)
            if value:
                add_value((1.0 if r.passed else 0.0, value["amount"], value["currency"]))
            grade = r.grade
            rg = grade.rubric
            if rg is not None and rg.judge_info is not None:
                add_info(rg.judge_info)
            score = r.score
            if score is None:
                continue
            add_scored(r)
            passed = 1 if r.passed else 0
            passes += passed
            task = (key.task_id, key.level, key.options_hash)
            nc = counts.get(task)
            if nc is None:
                counts[task] = [1, passed]
            else:
                nc[0] += 1
                nc[1] += passed
            if rg is not None and kind == "rubric":
                self.rubric.append((r, rg))
            if kinds and kind == "contract":
                self.contract.append(r)
            sg = grade.scenario
            if sg is not None:
                self.scen.append((r, sg))
            add_mode(str(r.options.get("search", "off")))
            v = score if sg is None else averaged(r)  # `averaged` is the score itself without a scenario grade
            modality = str(r.task_meta.get("modality", "text"))
            sums = pareto.get((kind, modality))
            if sums is None:
                sums = pareto[(kind, modality)] = (self.scopes.setdefault((kind, None), [0.0, 0.0, 0.0]),
                                                   self.scopes.setdefault((kind, modality), [0.0, 0.0, 0.0]))
            if c is None:
                add_unpriced((kind, None))
                add_unpriced((kind, modality))
            of_kind, of_modality = sums
            of_kind[0] += c or 0.0
            of_kind[1] += v
            of_kind[2] += 1
            of_modality[0] += c or 0.0
            of_modality[1] += v
            of_modality[2] += 1
        self.cost, self.judge_cost, self.tokens, self.done, self.passes = cost, judge_cost, tokens, done, passes
        self.void = void


def search_deltas(a: AgentRuns) -> dict[str, dict[str, Any]]:
    """One agent's delta per search mode: the mean over tasks run both ways of (score with -
    score without); empty unless the agent ran without search and with it."""
    out: dict[str, dict[str, Any]] = {}
    if "off" not in a.modes or len(a.modes) < 2:
        return out
    scores: dict[str, dict[tuple[str, str | None], list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in a.scored:
        scores[str(r.options.get("search", "off"))][(r.key.task_id, r.key.level)].append(r.score)
    without = scores["off"]
    for mode, with_s in sorted(scores.items()):
        if mode == "off":
            continue
        common = sorted(set(with_s) & set(without), key=lambda t: (t[0], t[1] or ""))
        if not common:
            continue
        w = [sum(with_s[t]) / len(with_s[t]) for t in common]
        wo = [sum(without[t]) / len(without[t]) for t in common]
        out[mode] = {"delta": sum(a - b for a, b in zip(w, wo, strict=True)) / len(common),
                     "tasks": len(common), "with": sum(w) / len(w), "without": sum(wo) / len(wo)}
    return out


def agent_summary(agent: str, a: AgentRuns, labels: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    runs, scored = a.runs, a.scored
    econ = (metrics.economic_value(a.value_items, threshold=1.0) if a.value_items
            else {cur: 0.0 for cur in a.currencies})
    for cur in a.currencies:
        econ.setdefault(cur, 0.0)
    summary: dict[str, Any] = {
        "agent": agent, "runs": len(runs), "void": a.void, "void_rate": a.void / len(runs) if runs else None,
        "void_outlier": None,  # set across agents (`void_outliers`)
        "pass_rate": a.passes / len(scored) if scored else None,
        # Scenario scores are floored at -1 for averaging only (FDE-Gym), as in mean_s.
        "economic_value": econ,
        "cost_usd": a.cost,
        "judge_cost_usd": a.judge_cost,  # null: a price is unknown
        "tokens": a.tokens,
        **pass_k(a.pass_counts),
        # How runs ended: how often a limit (max_turns, max_time, max_usd) or a fault stopped them.
        "end_reasons": dict(sorted(a.ends.items())),
    }
    of_all = (summary, runs, scored)
    # The rubric block: runs a rubric scores (their audited `score`, their `passed`).
    if a.rubric:
        tag_vals: dict[str, list[float]] = defaultdict(list)
        es: list[float] = []
        na = removed = passes = 0
        unclipped = False
        tasks: set[str] = set()
        values: dict[str, list[Any]] = {}  # `rubric_value`'s per-task totals
        add_score, add_task = es.append, tasks.add
        for r, rg in a.rubric:  # one pass over the block's runs
            audit = r.grade.audit
            gone = 0 if audit is None else audit.removed
            for tag, v in rg.tags.items():
                if v is not None:  # a run whose credit the audit removed scores 0 on every tag, as in total
                    tag_vals[tag].append(0.0 if gone else v)
            add_score(r.score)
            passed = 1 if r.passed else 0
            passes += passed
            na += rg.na
            removed += gone
            # HealthBench keeps each example's score unclipped (it may be negative) and clips
            # only the mean, tags likewise; OneMillion-Bench clips every task's score already.
            unclipped = unclipped or rg.scoring == "unclipped_mean"
            tid = r.key.task_id
            add_task(tid)
            if r.value:
                acc = values.get(tid)
                if acc is None:
                    values[tid] = [r.value, 1, passed]
                else:
                    acc[1] += 1
                    acc[2] += passed
        mean_of = metrics.clipped_mean if unclipped else _mean
        summary["rubric"] = {
            "expert_score": mean_of(es), "ci95": _ci(es),
            "pass_rate": passes / len(es),
            "tags": {**{t: _mean(tag_vals.get(t, [])) for t in metrics.CAPABILITY_TAGS},
                     **{t: mean_of(v) for t, v in tag_vals.items() if t not in metrics.CAPABILITY_TAGS and v}},
            "na": na,
            "audit_removed": removed,
            "tasks": sorted(tasks),
            "value": rubric_value(values),
        }
        # The block's runs are a subset of the scored runs in their order: all of them when as many.
        block = scored if len(a.rubric) == len(scored) else [r for r, _rg in a.rubric]
        summary["rubric"].update(kind_economics(a.by_kind.get("rubric", []), block,
                                                summary["rubric"]["expert_score"], len(tasks), of_all=of_all))
    judged = judge_summary(a.judge_infos)
    if judged is not None:
        summary["judge"] = judged
    human = human_agreement(runs, labels)
    if human:
        summary["human_agreement"] = human
    contract = a.contract
    if contract:
        cells: dict[str, list[float]] = defaultdict(list)
        acc_s: list[float] = []
        for r in contract:
            cells[f"{r.task_meta.get('modality', 'text')}/{r.task_meta.get('execution', 'multi-step-with-tools')}"] \
                .append(r.score)
            acc_s.append(r.score)
        summary["contract"] = {
            "accuracy": _mean(acc_s), "ci95": _ci(acc_s),
            # Only runs of tasks with a required artifact say anything about Sat (null: none did).
            "sat_rate": _mean([1.0 if c.sat else 0.0 for r in contract if (c := r.grade.contract) is not None
                               and any(p.required for p in c.predicates)]),
            "cells": {c: _mean(cells[c]) for c in CELLS if c in cells},
            "modalities": {m: _mean([v for c, vs in cells.items() if c.startswith(m + "/") for v in vs])
                           for m in ("text", "multimodal") if any(c.startswith(m + "/") for c in cells)},
            "audit_removed": sum(_removed(r) for r in contract),
            "tasks": _task_ids(contract),
        }
        summary["contract"].update(kind_economics(a.by_kind.get("contract", []), contract,
                                                  summary["contract"]["accuracy"],
                                                  len(summary["contract"]["tasks"]),
                                                  of_all=of_all))
    scen = a.scen
    if scen:
        per_task: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for r, sg in scen:
            per_task[r.key.task_id].append((sg.uplift_adj, sg.contact_cost))
        s_vals = [metrics.floored_score(sg.uplift_adj, sg.contact_cost) for _r, sg in scen]
        summary["scenario"] = {
            "mean_s": metrics.mean_run_score(per_task), "ci95": _ci(s_vals),
            "solved": sum(1 for _r, sg in scen if sg.solved),
            # FDE-Gym's gross: the per-task mean of U_adj floored at -1, before contact cost.
            "uplift_gross": metrics.mean_run_score({t: [(u, 0.0) for u, _c in v] for t, v in per_task.items()}),
            "contact_cost": _mean([sg.contact_cost for _r, sg in scen]),
            # Routing decided by a fallback (an LLM router that failed): it can change the facts given.
            "router_fallbacks": sum(sg.router_fallback_count for _r, sg in scen),
            "runs_with_router_fallbacks": sum(1 for _r, sg in scen if sg.router_fallback_count),
            "tasks": sorted(per_task),
            # Doing nothing scores S = 0: the share of runs that did worse than that.
            "below_no_op": _mean([1.0 if v < 0 else 0.0 for v in s_vals]),
            **_levels(scen),
            "families": scenario_families(scen),
        }
        summary["scenario"].update(kind_economics(a.by_kind.get("scenario", []), [r for r, _sg in scen],
                                                  summary["scenario"]["mean_s"], len(per_task), of_all=of_all))
    blocks = [(k, summary[k][field]) for k, field in (("rubric", "expert_score"), ("scenario", "mean_s"),
                                                      ("contract", "accuracy")) if k in summary]
    # One headline per agent only when its runs are of one kind: scores of different kinds are
    # on different scales (rubric and contract in [0, 1], scenario S down to -1 and below).
    summary["mean_score"] = blocks[0][1] if len(blocks) == 1 else None
    return summary


def averaged(r: RunRecord | ReportRun) -> float:
    """A run's score as it enters every mean, front and table: scenario S floored at -1
    (`metrics.floored_score`), the audited score otherwise."""
    scen = r.grade.scenario
    if scen is not None and (r.kind if isinstance(r, ReportRun) else primary_kind(r.kinds)) == "scenario":
        return metrics.floored_score(scen.uplift_adj, scen.contact_cost)
    return _score(r)


def _score(r: RunRecord | ReportRun) -> float:
    assert r.score is not None
    return r.score


def _levels(scen: list[tuple[ReportRun, Any]]) -> dict[str, Any]:
    """Mean S per level (L0 full brief .. L3 discover everything) and the drops FDE-Gym reads:
    L0 -> L1 (losing the written spec) and L1 -> L3 (losing the pointers)."""
    by: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for r, sg in scen:
        if r.key.level:
            by[r.key.level][r.key.task_id].append((sg.uplift_adj, sg.contact_cost))
    if not by:
        return {}
    levels = {lv: {"mean_s": metrics.mean_run_score(per_task), "runs": sum(len(v) for v in per_task.values())}
              for lv, per_task in sorted(by.items())}
    out: dict[str, Any] = {"levels": levels}
    for a, b in (("L0", "L1"), ("L1", "L3")):
        if a in levels and b in levels:
            out[f"drop_{a}_{b}"] = levels[a]["mean_s"] - levels[b]["mean_s"]
    return out


def _task_ids(runs: Iterable[ReportRun]) -> list[str]:
    """The tasks a kind's block covers (sorted ids): agents that ran different task sets show it."""
    return sorted({r.key.task_id for r in runs})


def _removed(r: ReportRun) -> int:
    return r.grade.audit.removed if r.grade.audit is not None else 0


def build_report(campaign: str | None, runs: Iterable[RunRecord | ReportRun],
                 labels: list[dict[str, Any]] | None = None,
                 skipped: list[dict[str, Any]] | None = None, *,
                 shared_tasks: bool = False, details: bool | Literal["table"] = True,
                 tasks: bool | None = None) -> dict[str, Any]:
    """`labels`: human labels from a labels file (`assay.report.agreement.load_labels`), if any;
    `skipped`: task files left out by `--skip-invalid` (file, field, reason);
    `shared_tasks`: keep, per kind, only the tasks every agent that ran the kind has a done run
    on (`assay report --shared-tasks`); `details`: build the per-run and per-task rows (`runs`,
    `tasks`; left empty when False, for a terminal leaderboard that shows neither; `"table"`:
    the runs as `table_row`s, what the HTML report shows); `tasks`: build the per-task rows
    (default: when `details` is True; they need no whole record). `runs`
    are `RunRecord`s or the lighter `ReportRun`s a store reads for reports
    (`assay.report.runs.read_runs`): the report is the same."""
    return _build(campaign, as_report_runs(runs), labels, skipped, shared_tasks, details,
                  details is True if tasks is None else tasks)


def _build(campaign: str | None, runs: list[ReportRun], labels: list[dict[str, Any]] | None,
           skipped: list[dict[str, Any]] | None, shared_tasks: bool, details: bool | Literal["table"],
           tasks: bool) -> dict[str, Any]:
    broken = broken_tasks(runs)
    counted = [r for r in runs if (r.key.task_id, r.key.task_hash) not in broken] if broken else runs
    agents = agent_runs(counted)
    sets = task_sets({name: a.finished_kinds() for name, a in agents.items()})
    if shared_tasks:
        runs = on_shared_tasks(runs, sets)
        counted = on_shared_tasks(counted, sets)
        agents = agent_runs(counted)
    return assemble(campaign, agent_parts(agents, labels), skipped=skipped, shared_tasks=shared_tasks, sets=sets,
                    rows=[table_row(r) for r in runs] if details == "table" else
                    [run_row(r) for r in runs] if details else [],
                    tasks=task_rows(counted) if tasks else [], broken=broken)


def stored_report(store: Store, campaign: str | None, *, agents: Collection[str] | None = None,
                  kind: str | None = None, labels: list[dict[str, Any]] | None = None, shared_tasks: bool = False,
                  listing: bool = False, tasks: bool = False) -> tuple[dict[str, Any], list[ReportRun]]:
    """The report of `campaign`'s current runs in the store (of `agents` and of `kind` only,
    when given), its numbers from the current runs' columns (`read_runs`, no record read):
    with `listing`, its `runs` are the runs' table rows (`table_row`; whoever writes whole
    per-run rows streams them by these ids, `export.write_files`); with `tasks`, its per-task
    rows. Second: the runs it covers (after `--shared-tasks`: the ones it keeps)."""
    stored = read_runs(store, campaign, whole=False, labels=labels, agents=agents)
    selected = [r for r in stored if kind is None or r.kind == kind]
    rep = build_report(campaign, selected, labels=labels, shared_tasks=shared_tasks,
                       details="table" if listing else False, tasks=tasks)
    return rep, on_shared_tasks(selected, rep["task_sets"]) if shared_tasks else selected


def broken_tasks(runs: Iterable[ReportRun]) -> dict[tuple[str, str], str]:
    """(task id, task hash) -> reason, of every task with a broken run (SPEC: its grader fails on
    its own reference): every agent's runs of such a task are left out of the numbers alike."""
    out: dict[tuple[str, str], str] = {}
    for r in runs:
        if r.status == "broken":
            key = (r.key.task_id, r.key.task_hash)
            if not out.get(key):
                out[key] = r.void_reason or ""
    return out


def fault_warnings(parts: dict[str, AgentPart], broken: dict[tuple[str, str], str] | None) -> list[str]:
    """What the numbers leave out: broken tasks, and agents whose void runs stand out."""
    out = [f"task {t} is broken and left out of every agent's numbers: {why or 'its grader fails on its own reference'}"
           for (t, _h), why in sorted((broken or {}).items())]
    for name, p in parts.items():
        if p.summary.get("void_outlier"):
            out.append(f"agent {name}: {p.summary['void']} of {p.summary['runs']} runs void, out of line with the "
                       "other agents' on the same tasks; void runs are left out of its scores (see each run's "
                       "void_reason)")
    return out


def void_outliers(parts: dict[str, AgentPart]) -> None:
    """Set each agent's `void_outlier`: is its void rate out of line with the other agents' on
    the same tasks (`metrics.void_outlier`)? None when no other agent ran its tasks."""
    runs_all: Counter[str] = Counter()
    void_all: Counter[str] = Counter()
    agents_of: Counter[str] = Counter()  # task -> how many agents ran it
    for part in parts.values():
        runs_all.update(part.task_voids[0])
        void_all.update(part.task_voids[1])
        agents_of.update(part.task_voids[0].keys())
    for part in parts.values():
        own_runs, own_void = part.task_voids
        shared = [t for t in own_runs if agents_of[t] > 1]  # tasks some other agent ran too
        runs = sum(own_runs[t] for t in shared)
        void = sum(own_void[t] for t in shared) if own_void else 0
        others_runs = sum(runs_all[t] for t in shared) - runs
        others_void = (sum(void_all[t] for t in shared) if void_all else 0) - void
        part.summary["void_outlier"] = (metrics.void_outlier(void, runs, others_void, others_runs)
                                        if others_runs else None)


class AgentPart(BaseModel):
    """What the report takes of one agent's runs, computed from them alone (`agent_part`): its
    summary and what the blocks across agents combine (`assemble`)."""

    summary: dict[str, Any]  # the report's `agents` entry
    search_deltas: dict[str, dict[str, Any]]  # `search_deltas`
    scopes: dict[tuple[str, str | None], list[float]]  # `AgentRuns.scopes`
    unpriced: set[tuple[str, str | None]]  # `AgentRuns.unpriced`
    finished: dict[str, set[str]]  # `AgentRuns.finished_kinds`
    task_pairs: set[tuple[str, str]]  # `AgentRuns.task_pairs`
    versions: set[str]  # `AgentRuns.versions`
    baseline: BaselineScores  # `baseline_scores`
    task_voids: tuple[Counter[str], Counter[str]]  # `AgentRuns.task_voids`


def agent_part(agent: str, a: AgentRuns, labels: list[dict[str, Any]] | None,
               baseline_scopes: Container[tuple[str, str]] | None) -> AgentPart:
    """One agent's part; `baseline_scopes`: the (kind, family) scopes the human baseline needs
    its scores in (None: every scope)."""
    # Not validated: every value is built here, of these types; over 100,000 runs the
    # validation of the sets would cost more than building them.
    return AgentPart.model_construct(
        summary=agent_summary(agent, a, labels), search_deltas=search_deltas(a), scopes=a.scopes,
        unpriced=a.unpriced, finished=a.finished_kinds(), task_pairs=a.task_pairs, versions=a.versions,
        baseline=baseline_scores(a.runs, baseline_scopes), task_voids=a.task_voids())


def agent_parts(agents: dict[str, AgentRuns], labels: list[dict[str, Any]] | None) -> dict[str, AgentPart]:
    """Every agent's part (same order): the people's first, whose scopes are the only ones the
    other agents' baseline scores are needed in."""
    parts = {name: agent_part(name, a, labels, None) for name, a in agents.items() if name.startswith(HUMAN_PREFIX)}
    scopes = {scope for p in parts.values() for scope in p.baseline}
    others = {name: agent_part(name, a, labels, scopes) for name, a in agents.items() if name not in parts}
    return {name: parts.get(name) or others[name] for name in agents}


def assemble(campaign: str | None, parts: dict[str, AgentPart], *, skipped: list[dict[str, Any]] | None,
             shared_tasks: bool, sets: dict[str, dict[str, Any]] | None = None,
             rows: list[dict[str, Any]] | None = None, tasks: list[dict[str, Any]] | None = None,
             broken: dict[tuple[str, str], str] | None = None) -> dict[str, Any]:
    """The report from its agents' parts (sorted names); `sets`: the task sets (`task_sets`)
    when the parts are of the shared tasks only (`--shared-tasks`), else the parts' own;
    `rows`, `tasks`: the per-run and per-task rows (none by default); `broken`: the broken
    tasks the parts leave out (`broken_tasks`)."""
    sets = task_sets({name: p.finished for name, p in parts.items()}) if sets is None else sets
    void_outliers(parts)
    deltas = {name: p.search_deltas for name, p in parts.items() if p.search_deltas}
    fronts, points = pareto_fronts(parts)
    return {
        "schema": SCHEMA,
        "campaign": campaign,
        "skipped": list(skipped or []),
        "runs": rows or [],
        "agents": [p.summary for p in parts.values()],
        "tasks": tasks or [],
        # One number per agent: the local-corpus delta where there is one, else Brave's, else native's.
        "search_delta": {a: (m.get("local") or m.get("brave") or m.get("native") or next(iter(m.values())))["delta"]
                         for a, m in deltas.items()},
        "search_deltas": deltas,
        "pareto": fronts,
        "pareto_points": points,
        "shared_tasks": shared_tasks,
        "task_sets": sets,
        "human_baseline": human_baseline({name: p.baseline for name, p in parts.items()}),
        "broken_tasks": [{"task_id": t, "task_hash": h, "reason": why} for (t, h), why in sorted((broken or {}).items())],
        "warnings": mixing_warnings(parts) + task_set_warnings(sets, shared_tasks) + fault_warnings(parts, broken),
    }


def agent_runs(runs: list[ReportRun]) -> dict[str, AgentRuns]:
    """The runs by agent (sorted names), each agent's in run order."""
    by_agent: dict[str, list[ReportRun]] = defaultdict(list)
    for r in runs:
        by_agent[r.key.agent].append(r)
    return {a: AgentRuns(rs) for a, rs in sorted(by_agent.items())}


HUMAN_PREFIX = "human:"
MIN_HUMAN_RUNS = 3
"""A task family gets a human expert baseline row when people (`human:NAME` agents) have at
least this many done, scored runs of one kind on it."""


def family_of(task_id: str) -> str:
    """A task's family: its id before the first `/` (a scenario's variants share one)."""
    return task_id.split("/", 1)[0]


def baseline_scores(runs: Iterable[ReportRun], scopes: Container[tuple[str, str]] | None
                    ) -> BaselineScores:
    """An agent's scores (`averaged`) of its done, scored runs per (kind, family) scope and
    task, in the `scopes` given (None: every scope): what `human_baseline` compares."""
    out: BaselineScores = {}
    if scopes is not None and not scopes:
        return out
    for r in runs:
        if r.status == "done" and r.score is not None and r.kinds:
            scope = (r.kind, family_of(r.key.task_id))
            if scopes is None or scope in scopes:
                out.setdefault(scope, {}).setdefault(r.key.task_id, []).append(averaged(r))
    return out


def human_baseline(by_agent: dict[str, BaselineScores]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per kind and task family with at least `MIN_HUMAN_RUNS` done, scored runs by people:
    the people's pooled mean score (`averaged`: scenario S floored at -1) over those runs with
    its bootstrap 95% CI, `runs`, `people` (their agent names), `tasks`, and beside it
    `agents {agent: {mean, runs}}`: every other agent's mean over its runs of the same tasks
    of that family (the same work), null-free (agents without such runs are left out).
    `by_agent`: each agent's `baseline_scores` (the other agents' at least in the people's scopes)."""
    people = sorted(a for a in by_agent if a.startswith(HUMAN_PREFIX))
    out: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for kind, fam in sorted({scope for a in people for scope in by_agent[a]}):
        per_agent = {a: scores[(kind, fam)] for a, scores in sorted(by_agent.items()) if (kind, fam) in scores}
        ran = [a for a in people if a in per_agent]
        vals = [v for a in ran for vs in per_agent[a].values() for v in vs]
        if len(vals) < MIN_HUMAN_RUNS:
            continue
        tasks = sorted({t for a in ran for t in per_agent[a]})
        others: dict[str, dict[str, Any]] = {}
        for a, by_task in per_agent.items():
            own = [v for t in tasks for v in by_task.get(t, [])]
            if not a.startswith(HUMAN_PREFIX) and own:
                others[a] = {"mean": sum(own) / len(own), "runs": len(own)}
        out[kind][fam] = {"mean": sum(vals) / len(vals), "ci95": _ci(vals), "runs": len(vals), "people": ran,
                          "tasks": tasks, "agents": others}
    return dict(out)


def task_sets(finished: dict[str, dict[str, set[str]]]) -> dict[str, dict[str, Any]]:
    """Per kind, the tasks every agent that ran the kind finished (has a done run on): `shared`
    (sorted ids), `agents {agent: tasks finished}`, `differ` (true when some agent finished a
    task another did not) and `missing {agent: [tasks another agent finished and it did not]}`.
    `finished`: per agent (sorted names), per kind it ran, the tasks it finished
    (`AgentRuns.finished_kinds`)."""
    out: dict[str, dict[str, Any]] = {}
    for kind in sorted({k for kinds in finished.values() for k in kinds}):
        per_agent = {name: kinds[kind] for name, kinds in finished.items() if kind in kinds}
        union = set().union(*per_agent.values())
        shared = set.intersection(*per_agent.values())
        out[kind] = {"shared": sorted(shared), "agents": {a: len(t) for a, t in per_agent.items()},
                     "differ": shared != union,
                     "missing": {a: sorted(union - t) for a, t in per_agent.items() if union - t}}
    return out


def on_shared_tasks(runs: list[R], sets: dict[str, dict[str, Any]] | None = None) -> list[R]:
    """The runs of the tasks every agent that ran their kind finished (`--shared-tasks`)."""
    if sets is None:
        sets = task_sets({name: a.finished_kinds() for name, a in agent_runs(as_report_runs(runs)).items()})
    keep = {k: set(v["shared"]) for k, v in sets.items()}
    return [r for r in runs if not r.kinds or r.key.task_id in keep.get(primary_kind(r.kinds), set())]


def task_set_warnings(sets: dict[str, dict[str, Any]], restricted: bool) -> list[str]:
    out = []
    for kind, ts in sets.items():
        if ts["differ"]:
            counts = ", ".join(f"{a} {n}" for a, n in ts["agents"].items())
            tail = ("the report keeps only those" if restricted
                    else "pass --shared-tasks to compare them on those only")
            out.append(f"{kind}: agents finished different task sets ({counts} tasks; {len(ts['shared'])} "
                       f"finished by all): {tail}")
    return out


def mixing_warnings(agents: dict[str, AgentPart]) -> list[str]:
    """What makes a campaign's runs not comparable: a task run under several contents (its
    hash changed between runs) or runs made by several harness versions."""
    pairs: set[tuple[str, str]] = set().union(*(a.task_pairs for a in agents.values()))
    hashes: dict[str, set[str]] = defaultdict(set)
    if len(pairs) > len({t for t, _h in pairs}):  # some task has several hashes
        for t, h in pairs:
            hashes[t].add(h)
    out = [f"task {t} was run under {len(h)} different contents (hashes {', '.join(sorted(h))}): "
           "its runs are not all of the same task" for t, h in sorted(hashes.items()) if len(h) > 1]
    versions = sorted(set().union(*(a.versions for a in agents.values())))
    if len(versions) > 1:
        out.append(f"runs were made by {len(versions)} harness versions ({', '.join(versions)})")
    return out


def pareto_fronts(agents: dict[str, AgentPart]
                  ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
    """Accuracy-cost Pareto fronts (DAREBench): the agents no other agent beats on both mean
    score and cost. A score is never averaged across kinds, so there is one front per kind
    (`rubric`, `scenario`, `contract`) and, within a kind, per modality (`contract/text`,
    `contract/multimodal`); when every run is of one kind, `all`, `text` and `multimodal` name
    that kind's fronts too. Agents whose cost is unknown (a price is missing) are left out.
    Second: every priced agent's point `{agent, cost_usd, mean_score}` per kind and per kind
    and modality (the report's `pareto_points`, what the HTML plots beside each front). The
    sums per scope come from each agent's pass over its runs (`AgentRuns.scopes`, in its part)."""
    kinds = sorted({k for a in agents.values() for k, _m in a.scopes})
    out: dict[str, list[dict[str, Any]]] = {}
    points: dict[str, list[dict[str, Any]]] = {}
    for kind in kinds:
        for modality in (None, "text", "multimodal"):
            scope = (kind, modality)
            per_agent = {name: a.scopes[scope] for name, a in agents.items() if scope in a.scopes}
            unpriced = {name for name, a in agents.items() if scope in a.unpriced}
            front = _front(per_agent, unpriced)
            if front:
                name = kind if modality is None else f"{kind}/{modality}"
                out[name] = front
                points[name] = [{"agent": a, "cost_usd": v[0], "mean_score": v[1] / v[2]}
                                for a, v in sorted(per_agent.items()) if a not in unpriced]
                if len(kinds) == 1:
                    out["all" if modality is None else modality] = front
    return out, points


def _front(per_agent: dict[str, list[float]], unpriced: set[str]) -> list[dict[str, Any]]:
    """The Pareto front of the agents' (total cost, mean score) in one scope; agents with an
    unknown price are left out."""
    names = [a for a in sorted(per_agent) if a not in unpriced]
    points = [(per_agent[a][0], per_agent[a][1] / per_agent[a][2]) for a in names]
    return [{"agent": names[i], "cost_usd": points[i][0], "mean_score": points[i][1]}
            for i in metrics.pareto_front(points)]
