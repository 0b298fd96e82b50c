"""Each agent's summary and kind blocks (SPEC.md "Report JSON", `agents[]`) from a report
query's grouped rows (`assay.store.report_queries.ReportQuery`).

Why here: the numbers are counts, sums and means the database already grouped by agent, kind
block, cell, task or currency; what is left is arithmetic on a few rows per agent, plus the
statistics that need values (a block's bootstrap CI over its scores in report order, cost
percentiles), taken with numpy. No object is built per run.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from assay import metrics
from assay.report.agreement import human_agreement
from assay.report.runs import ReportRun
from assay.store.report_queries import Group, ReportQuery, judges_of

__all__ = ["CELLS", "ReportData", "agent_summaries", "block_stats", "ci", "mean", "pass_k"]

CELLS = [f"{m}/{e}" for m in ("text", "multimodal") for e in ("single-step", "multi-step", "multi-step-with-tools")]
"""DAREBench's workload matrix: modality x execution, in the order the contract block lists them."""

HEADLINES = (("rubric", "expert_score"), ("scenario", "mean_s"), ("contract", "accuracy"))
"""Each kind block's headline number, in the order an agent's one headline (`mean_score`) is taken."""

PassPairs = Mapping[tuple[int, int], int]
"""(epochs n, passes c) -> how many tasks (task, level, options) have them."""


def ci(values: Sequence[float]) -> list[float] | None:
    """The 95% bootstrap CI of the mean (`metrics.bootstrap_ci`, 2,000 resamples); None for none."""
    if not len(values):
        return None
    lo, hi = metrics.bootstrap_ci(values, resamples=2000)
    return [lo, hi]


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if len(values) else None


def pass_k(pairs: PassPairs) -> dict[str, dict[str, float]]:
    """pass@k and pass^k curves over epochs, k = 1..the smallest epoch count of a task, each k
    the mean over tasks of the unbiased estimators; tasks with the same (n, c) share a curve."""
    if not pairs:
        return {"pass_at_k": {}, "pass_hat_k": {}}
    kmax = min(n for n, _c in pairs)
    at = np.zeros(kmax)
    hat = np.zeros(kmax)
    for (n, c), times in sorted(pairs.items()):
        at += np.asarray(metrics.pass_at_k_curve(n, c)[:kmax]) * times
        hat += np.asarray(metrics.pass_hat_k_curve(n, c)[:kmax]) * times
    t = sum(pairs.values())
    return {"pass_at_k": {str(k + 1): float(v) / t for k, v in enumerate(at)},
            "pass_hat_k": {str(k + 1): float(v) / t for k, v in enumerate(hat)}}


def _cost(unknown: int, known: float) -> float | None:
    """A sum of costs: None when a price is unknown for some run."""
    return None if unknown else float(known)


def cost_distribution(known: tuple[list[float], list[int]], runs: int) -> dict[str, Any] | None:
    """Per-run cost (USD) of the runs whose price is known, given as distinct costs and their
    counts: min, median, p90, max (numpy's linear percentiles), with how many runs it covers
    and how many have an unknown cost."""
    values, counts = known
    n = sum(counts)
    if not n:
        return None
    lo, med, p90, hi = metrics.percentiles_of_counts(values, counts, [0, 50, 90, 100])
    return {"min": lo, "median": med, "p90": p90, "max": hi, "runs": n, "unknown": runs - n}


def kind_economics(totals: Sequence[Any], costs: tuple[list[float], list[int]], pairs: PassPairs,
                   headline: float | None, n_tasks: int) -> dict[str, Any]:
    """What a kind's block cost: `cost_usd` (its runs, void ones too: they were paid for; null
    when a price is unknown), `tokens`, `tokens_per_task` and `cost_per_task` (over the tasks
    the block covers), `score_per_1k_tokens` and `score_per_usd` (the headline over the tokens /
    dollars spent per task; null when nothing was spent or the cost is unknown),
    `cost_distribution`, and the pass@k / pass^k curves of its scored runs. `totals`: the
    kind's (runs, tokens, cost unknown, cost known); `costs`: its known costs as distinct values
    and counts."""
    runs, tokens, unknown, known = totals
    cost = _cost(unknown, known)
    n_tasks = n_tasks or 1
    tpt = tokens / n_tasks
    cpt = None if cost is None else cost / n_tasks
    return {
        "cost_usd": cost, "tokens": int(tokens), "tokens_per_task": tpt, "cost_per_task": cpt,
        "score_per_1k_tokens": headline / (tpt / 1000) if headline is not None and tpt > 0 else None,
        "score_per_usd": headline / cpt if headline is not None and cpt else None,
        "cost_distribution": cost_distribution(costs, runs),
        **pass_k(pairs),
    }


class ReportData:
    """What the agent summaries read of a report query, read once: the small groups
    (`ReportQuery.groups`, which `build` reads too), the pass@k inputs, the tasks each block
    covers, each block's score levels (and the scores of small blocks in report order), the
    cost levels, the tags, the tasks' values, the scenario runs."""

    def __init__(self, q: ReportQuery) -> None:
        self.groups = q.groups()
        self.agents = sorted({g.agent for g in self.groups})
        self.blocks: set[tuple[str, str]] = {(g.agent, g.block) for g in self.groups if g.block and g.scored}
        self.pairs: dict[tuple[str, str | None], Counter[tuple[int, int]]] = defaultdict(Counter)
        for agent, block, n, c, tasks in q.pass_pairs():
            self.pairs[(agent, block)][(int(n), int(c))] += int(tasks)
        self.block_tasks: dict[tuple[str, str], list[str]] = defaultdict(list)
        for agent, _kind, task, _finished, covered, block in q.task_kinds():
            if block and covered:
                self.block_tasks[(agent, block)].append(task)
        self.scores = _block_scores(q)
        self.costs: dict[tuple[str, str], tuple[list[float], list[int]]] = defaultdict(lambda: ([], []))
        for agent, kind, cost, n in q.cost_levels():
            vals, counts = self.costs[(agent, kind)]
            vals.append(float(cost))
            counts.append(int(n))
        rubric = any(b == "rubric" for _a, b in self.blocks)
        self.tags = _tag_sums(q.tags()) if rubric else {}
        self.task_values = _task_values(q) if rubric else {}
        self.scen: dict[str, list[tuple[str, str | None, float, float, bool, int]]] = defaultdict(list)
        if any(b == "scenario" for _a, b in self.blocks):
            for agent, task, level, u_adj, contact, solved, fallbacks in q.scenario_runs():
                self.scen[agent].append((task, level, u_adj, contact, bool(solved), fallbacks or 0))


def _block_scores(q: ReportQuery) -> dict[tuple[str, str], tuple[list[float], list[int]] | list[float]]:
    """Per (agent, block): its scores as distinct values and counts when there are more than
    `metrics.BOOT_COUNTS_FROM` (a CI of them reads nothing else), else the scores themselves
    in report order (their bootstrap resamples them by position)."""
    levels: dict[tuple[str, str], tuple[list[float], list[int]]] = defaultdict(lambda: ([], []))
    for agent, block, score, n in q.score_levels():
        vals, counts = levels[(agent, block)]
        vals.append(float(score))
        counts.append(int(n))
    out: dict[tuple[str, str], tuple[list[float], list[int]] | list[float]] = dict(levels)
    few = {k for k, (_v, counts) in levels.items() if sum(counts) <= metrics.BOOT_COUNTS_FROM}
    ordered: dict[tuple[str, str], list[float]] = defaultdict(list)
    for agent, block, score in q.ordered_scores(few):
        ordered[(agent, block)].append(float(score))
    out.update(ordered)
    return out


def block_stats(scores: tuple[list[float], list[int]] | list[float], *, clipped: bool = False
                ) -> tuple[float | None, list[float] | None]:
    """(mean, 95% bootstrap CI) of a block's scores (`_block_scores`'s either form); the mean
    clipped to [0, 1] with `clipped` (HealthBench's unclipped per-example scores)."""
    if isinstance(scores, list):
        m = (metrics.clipped_mean(scores) if clipped else mean(scores)) if scores else None
        return m, ci(scores)
    vals, counts = scores
    n = sum(counts)
    m = sum(v * c for v, c in zip(vals, counts, strict=True)) / n
    lo, hi = metrics.bootstrap_ci_of_counts(vals, counts, resamples=2000)
    return (max(0.0, min(1.0, m)) if clipped else m), [lo, hi]


def _tag_sums(rows: Iterable[Any]) -> dict[str, dict[str, list[float]]]:
    """Per agent, per tag: [sum, runs] of the rubric block's tag scores (0 where the audit took
    the run's credit), in sorted tag order; each distinct tags text parsed once."""
    out: dict[str, dict[str, list[float]]] = defaultdict(dict)
    parsed: dict[str, dict[str, Any]] = {}
    for agent, text, removed, n in rows:
        tags = parsed.get(text)
        if tags is None:
            tags = parsed[text] = json.loads(text)
        acc = out[agent]
        for tag, v in tags.items():
            if v is None:
                continue
            s = acc.get(tag)
            if s is None:
                s = acc[tag] = [0.0, 0]
            s[0] += (0.0 if removed else v) * n
            s[1] += n
    return {a: dict(sorted(t.items())) for a, t in out.items()}


def _task_values(q: ReportQuery) -> dict[str, dict[str, dict[str, float]]]:
    """Per agent, value earned vs value available per currency (GDPval): each task's value
    counts once as available, and as earned times the share of its scored runs that passed.
    A task whose value changed between its runs counts the value of its first run in report
    order (`ReportQuery.first_values`)."""
    sums: dict[str, dict[str, list[float]]] = defaultdict(dict)
    changed: dict[tuple[str, str], tuple[int, int]] = {}
    for agent, task, currency, available, earned, n, c in q.value_sums():
        if task is not None:
            changed[(agent, task)] = (int(n), int(c))
            continue
        acc = sums[agent].setdefault(str(currency), [0.0, 0.0])
        acc[0] += float(earned)
        acc[1] += float(available)
    for agent, task, currency, amount in q.first_values(changed):
        n, c = changed[(agent, task)]
        acc = sums[agent].setdefault(str(currency), [0.0, 0.0])
        acc[1] += float(amount)
        acc[0] += float(amount) * c / n
    return {a: {cur: {"earned": e, "available": av} for cur, (e, av) in sorted(s.items())} for a, s in sums.items()}


def agent_summaries(data: ReportData, labelled: Mapping[str, list[ReportRun]] | None,
                    labels: list[dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """Every agent's summary (sorted names), `void_outlier` left None (set across agents).
    `labelled`: per agent, its runs some human label names, with their rubric items."""
    by_agent: dict[str, list[Group]] = defaultdict(list)
    for g in data.groups:
        by_agent[g.agent].append(g)
    return {agent: _summary(agent, by_agent[agent], data, (labelled or {}).get(agent, []), labels)
            for agent in data.agents}


def _summary(agent: str, groups: list[Group], data: ReportData, labelled: list[ReportRun],
             labels: list[dict[str, Any]] | None) -> dict[str, Any]:
    runs = sum(g.runs for g in groups)
    void = sum(g.runs for g in groups if g.status == "void")
    scored = sum(g.scored for g in groups)
    ends: Counter[str] = Counter()
    earned: dict[str, float] = {}
    for g in groups:
        ends[g.end_reason] += g.runs
        if g.currency is not None:
            earned[g.currency] = earned.get(g.currency, 0.0) + g.earned
    summary: dict[str, Any] = {
        "agent": agent, "runs": runs, "void": void, "void_rate": void / runs if runs else None,
        "void_outlier": None,  # set across agents (`build.void_outliers`)
        "pass_rate": sum(g.passes for g in groups) / scored if scored else None,
        "economic_value": dict(sorted(earned.items())),
        "cost_usd": _cost(sum(g.cost_unknown for g in groups), sum(g.cost for g in groups)),
        # null: a price is unknown
        "judge_cost_usd": _cost(sum(g.judge_unknown for g in groups), sum(g.judge_cost for g in groups)),
        "tokens": sum(g.tokens for g in groups),
        **pass_k(data.pairs.get((agent, None), {})),
        # How runs ended: how often a limit (max_turns, max_time, max_usd) or a fault stopped them.
        "end_reasons": dict(sorted(ends.items())),
    }
    blocks = {b for a, b in data.blocks if a == agent}
    if "rubric" in blocks:
        summary["rubric"] = _rubric(agent, groups, data)
    judged = _judge(groups)
    if judged is not None:
        summary["judge"] = judged
    human = human_agreement(labelled, labels) if labelled else {}
    if human:
        summary["human_agreement"] = human
    if "contract" in blocks:
        summary["contract"] = _contract(agent, groups, data)
    if "scenario" in blocks:
        summary["scenario"] = _scenario(agent, groups, data)
    headlines = [summary[k][field] for k, field in HEADLINES if k in summary]
    # One headline per agent only when its runs are of one kind: scores of different kinds are
    # on different scales (rubric and contract in [0, 1], scenario S down to -1 and below).
    summary["mean_score"] = headlines[0] if len(headlines) == 1 else None
    return summary


def _economics(agent: str, groups: list[Group], data: ReportData, kind: str, headline: float | None,
               n_tasks: int) -> dict[str, Any]:
    """`kind_economics` of one kind's runs (void ones too: they cost) and its block."""
    of_kind = [g for g in groups if g.kind == kind]
    totals = (sum(g.runs for g in of_kind), sum(g.tokens for g in of_kind), sum(g.cost_unknown for g in of_kind),
              sum(g.cost for g in of_kind))
    return kind_economics(totals, data.costs.get((agent, kind), ([], [])), data.pairs.get((agent, kind), {}),
                          headline, n_tasks)


def _rubric(agent: str, groups: list[Group], data: ReportData) -> dict[str, Any]:
    """The rubric block: the runs a rubric scores (their audited score and pass)."""
    block = [g for g in groups if g.block == "rubric" and g.scored]
    n = sum(g.scored for g in block)
    # HealthBench keeps each example's score unclipped (it may be negative) and clips only the
    # mean, tags likewise; OneMillion-Bench clips every task's score already.
    clip = any(g.unclipped for g in block)
    sums = data.tags.get(agent, {})

    def of(acc: list[float], clipped: bool) -> float:
        m = acc[0] / acc[1]
        return max(0.0, min(1.0, m)) if clipped else m

    tasks = data.block_tasks[(agent, "rubric")]
    expert, ci95 = block_stats(data.scores[(agent, "rubric")], clipped=clip)
    out: dict[str, Any] = {
        "expert_score": expert, "ci95": ci95,
        "pass_rate": sum(g.passes for g in block) / n,
        "tags": {**{t: of(sums[t], False) if t in sums else None for t in metrics.CAPABILITY_TAGS},
                 **{t: of(acc, clip) for t, acc in sums.items() if t not in metrics.CAPABILITY_TAGS}},
        "na": sum(g.na for g in block), "audit_removed": sum(g.removed for g in block), "tasks": tasks,
        "value": data.task_values.get(agent, {}),
    }
    out.update(_economics(agent, groups, data, "rubric", expert, len(tasks)))
    return out


def _judge(groups: list[Group]) -> dict[str, Any] | None:
    """Agreement among repeated votes, NA items and voters over an agent's judged runs."""
    judged = [g for g in groups if g.judged]
    if not judged:
        return None
    agreed, answered, na = (sum(g.agreed for g in judged), sum(g.answered for g in judged),
                            sum(g.judge_na for g in judged))
    return {"agreement": agreed / answered if answered else None, "na": na,
            "votes": max(g.votes or 0 for g in judged), "runs": sum(g.judged for g in judged),
            "items": answered + na, "mode": sorted({g.judge_mode for g in judged if g.judge_mode}),
            "judges": judges_of(sorted({g.judges for g in judged if g.judges}))}


def _contract(agent: str, groups: list[Group], data: ReportData) -> dict[str, Any]:
    """The contract block: accuracy, Sat over the runs with a required artifact, the cells."""
    block = [g for g in groups if g.block == "contract" and g.scored]
    cells: dict[str, list[float]] = {}
    for g in block:
        acc = cells.setdefault(f"{g.modality}/{g.execution}", [0.0, 0])
        acc[0] += g.score
        acc[1] += g.scored
    sat, counted = sum(g.sat for g in block), sum(g.sat_counted for g in block)
    tasks = data.block_tasks[(agent, "contract")]
    accuracy, ci95 = block_stats(data.scores[(agent, "contract")])
    out: dict[str, Any] = {
        "accuracy": accuracy, "ci95": ci95,
        # Only runs of tasks with a required artifact say anything about Sat (null: none did).
        "sat_rate": sat / counted if counted else None,
        "cells": {c: cells[c][0] / cells[c][1] for c in CELLS if c in cells},
        "modalities": {m: sum(v[0] for c, v in cells.items() if c.startswith(m + "/"))
                       / sum(v[1] for c, v in cells.items() if c.startswith(m + "/"))
                       for m in ("text", "multimodal") if any(c.startswith(m + "/") for c in cells)},
        "audit_removed": sum(g.removed for g in block),
        "tasks": tasks,
    }
    out.update(_economics(agent, groups, data, "contract", accuracy, len(tasks)))
    return out


def _scenario(agent: str, groups: list[Group], data: ReportData) -> dict[str, Any]:
    """The scenario block: mean S (FDE-Gym's, per task then over tasks, floored at -1), solved,
    the gross uplift, contact cost, router fallbacks, levels and families."""
    scen = data.scen[agent]
    per_task: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for task, _level, u_adj, contact, _solved, _fb in scen:
        per_task[task].append((u_adj, contact))
    s_vals = [metrics.floored_score(u, c) for _t, _l, u, c, _s, _f in scen]
    block: dict[str, Any] = {
        "mean_s": metrics.mean_run_score(per_task), "ci95": ci(s_vals),
        "solved": sum(1 for run in scen if run[4]),
        # FDE-Gym's gross: the per-task mean of U_adj floored at -1, before contact cost.
        "uplift_gross": metrics.mean_run_score({t: [(u, 0.0) for u, _c in v] for t, v in per_task.items()}),
        "contact_cost": mean([run[3] for run in scen]),
        # Routing decided by a fallback (an LLM router that failed): it can change the facts given.
        "router_fallbacks": sum(run[5] for run in scen),
        "runs_with_router_fallbacks": sum(1 for run in scen if run[5]),
        "tasks": sorted(per_task),
        # Doing nothing scores S = 0: the share of runs that did worse than that.
        "below_no_op": mean([1.0 if v < 0 else 0.0 for v in s_vals]),
        **_levels(scen),
        "families": _families(scen),
    }
    block.update(_economics(agent, groups, data, "scenario", block["mean_s"], len(per_task)))
    return block


def _levels(scen: list[tuple[str, str | None, float, float, bool, int]]) -> dict[str, Any]:
    """Mean S per level (L0 full brief .. L3 discover everything) and the drops FDE-Gym reads:
    L0 -> L1 (losing the written spec) and L1 -> L3 (losing the pointers)."""
    by: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for task, level, u_adj, contact, _s, _f in scen:
        if level:
            by[level][task].append((u_adj, contact))
    if not by:
        return {}
    levels = {lv: {"mean_s": metrics.mean_run_score(per_task), "runs": sum(len(v) for v in per_task.values())}
              for lv, per_task in sorted(by.items())}
    out: dict[str, Any] = {"levels": levels}
    for a, b in (("L0", "L1"), ("L1", "L3")):
        if a in levels and b in levels:
            out[f"drop_{a}_{b}"] = levels[a]["mean_s"] - levels[b]["mean_s"]
    return out


def _families(scen: list[tuple[str, str | None, float, float, bool, int]]) -> dict[str, dict[str, Any]]:
    """Per scenario family (the task id before its first `/`): mean S over its variants
    (tasks), each variant's mean S, and the spread (max - min of the variants' means)."""
    by: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for task, _level, u_adj, contact, _s, _f in scen:
        by[task.split("/", 1)[0]][task].append((u_adj, contact))
    out: dict[str, dict[str, Any]] = {}
    for fam, variants in sorted(by.items()):
        means = {t: metrics.mean_run_score({t: v}) for t, v in sorted(variants.items())}
        out[fam] = {"mean_s": metrics.mean_run_score(variants), "variants": means,
                    "spread": max(means.values()) - min(means.values()),
                    "runs": sum(len(v) for v in variants.values())}
    return out
