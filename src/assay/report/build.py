"""Building the report JSON (SPEC.md "Report JSON") from stored runs.

Additions to the SPEC's keys (documented here and in docs):
- each run row: `options` (the run's result options: judges, judge mode, search mode, limits),
  `search` (the search backend the run was offered: native, local, brave; null for none);
- each agent summary: `judge {agreement, na, votes, runs, items, mode, judges}` where any run
  was judged (`agreement`: share of judged items on which every vote agreed; `na`: items no
  judge could answer, counted 0); `human_agreement {domain: {pearson_r, p_value,
  raw_agreement, n}}` where a labels file (`--labels`) labels the runs' own answers (see
  `assay.report.agreement`);
  `pass_at_k`, `pass_hat_k` averaged over tasks;
- top level: `tasks`, one row per (agent, task, level, options) with the epochs run, passes,
  mean score, `pass_at_k` and `pass_hat_k` for k = 1..n; `search_delta {agent: delta}`: for
  an agent run both without search (`--search off`) and with it (`local`, `brave` or `native`), the
  mean over the tasks run both ways of (mean score with search - mean score without), and
  `search_deltas {agent: {mode: {delta, tasks, with, without}}}` per search mode; `warnings`:
  a task run under several contents (hashes) or runs of several harness versions.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from assay import metrics
from assay.record import Audit, RunRecord, primary_kind
from assay.report.agreement import human_agreement, judge_summary
from assay.task.model import CAPABILITY_TAGS

SCHEMA = "assay.report/1"
CELLS = [f"{m}/{e}" for m in ("text", "multimodal") for e in ("single-step", "multi-step", "multi-step-with-tools")]


def run_row(r: RunRecord) -> dict[str, Any]:
    grade = r.grade.flat()
    grade.setdefault("audit", Audit(pre_audit_score=r.score).model_dump(mode="json"))
    return {
        "run_id": r.run_id, "task_id": r.key.task_id, "task_hash": r.key.task_hash, "kinds": list(r.kinds),
        "agent": r.key.agent, "level": r.key.level, "epoch": r.key.epoch, "attempt": r.attempt,
        "status": r.status, "end_reason": r.end_reason, "void_reason": r.void_reason, "sandbox": r.sandbox,
        "score": r.score, "passed": r.passed, "value": r.value,
        "usage": r.usage.model_dump(), "judge_usage": r.judge_usage.model_dump(),
        "grade": grade, "model": r.model, "harness_version": r.harness_version, "turns": r.turns,
        "duration_s": r.duration_s, "task": r.task_meta, "options": r.options, "search": r.search,
    }


def _ci(values: list[float]) -> list[float] | None:
    if not values:
        return None
    lo, hi = metrics.bootstrap_ci(values, resamples=2000)
    return [lo, hi]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def pass_k(done: list[RunRecord]) -> dict[str, dict[str, float]]:
    """pass@k and pass^k averaged over tasks, for k = 1..10 and k = the smallest epoch count."""
    by_task: dict[tuple[str, str | None, str], list[bool]] = defaultdict(list)
    for r in done:
        by_task[(r.key.task_id, r.key.level, r.key.options_hash)].append(bool(r.passed))
    if not by_task:
        return {"pass_at_k": {}, "pass_hat_k": {}}
    kmax = min(len(v) for v in by_task.values())
    at: dict[str, float] = {}
    hat: dict[str, float] = {}
    ks = sorted({*range(1, min(kmax, 10) + 1), kmax})  # 1..10 and the full k
    for k in ks:
        at[str(k)] = _mean([metrics.pass_at_k(len(v), sum(v), k) for v in by_task.values()]) or 0.0
        hat[str(k)] = _mean([metrics.pass_hat_k(len(v), sum(v), k) for v in by_task.values()]) or 0.0
    return {"pass_at_k": at, "pass_hat_k": hat}


def task_rows(runs: list[RunRecord]) -> list[dict[str, Any]]:
    """pass@k and pass^k per (agent, task, level, options), k = 1..epochs run."""
    groups: dict[tuple[str, str, str | None, str], list[RunRecord]] = defaultdict(list)
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
            "pass_at_k": {str(k): metrics.pass_at_k(n, c, k) for k in range(1, n + 1)},
            "pass_hat_k": {str(k): metrics.pass_hat_k(n, c, k) for k in range(1, n + 1)},
        })
    return rows


def search_deltas(runs: list[RunRecord]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per agent and search mode: mean over tasks run both ways of (score with - score without)."""
    scores: dict[tuple[str, str], dict[tuple[str, str | None], list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        if r.status == "done" and r.score is not None:
            mode = str(r.options.get("search", "off"))
            scores[(r.key.agent, mode)][(r.key.task_id, r.key.level)].append(r.score)
    out: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for (agent, mode), with_s in sorted(scores.items()):
        if mode == "off" or (agent, "off") not in scores:
            continue
        without = scores[(agent, "off")]
        common = sorted(set(with_s) & set(without), key=lambda t: (t[0], t[1] or ""))
        if not common:
            continue
        w = [sum(with_s[t]) / len(with_s[t]) for t in common]
        wo = [sum(without[t]) / len(without[t]) for t in common]
        out[agent][mode] = {"delta": sum(a - b for a, b in zip(w, wo, strict=True)) / len(common),
                            "tasks": len(common), "with": sum(w) / len(w), "without": sum(wo) / len(wo)}
    return dict(out)


def agent_summary(agent: str, runs: list[RunRecord], labels: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    done = [r for r in runs if r.status == "done"]
    scored = [r for r in done if r.score is not None]
    currencies = {r.value["currency"] for r in runs if r.value}
    value_items = [(1.0 if r.passed else 0.0, r.value["amount"], r.value["currency"]) for r in done if r.value]
    econ = metrics.economic_value(value_items, threshold=1.0) if value_items else {c: 0.0 for c in currencies}
    for c in currencies:
        econ.setdefault(c, 0.0)
    costs = [r.usage.cost_usd for r in runs]
    summary: dict[str, Any] = {
        "agent": agent, "runs": len(runs), "void": len(runs) - len(done),
        "pass_rate": _mean([1.0 if r.passed else 0.0 for r in scored]),
        # Scenario scores are floored at -1 for averaging only (FDE-Gym), as in mean_s.
        "economic_value": econ,
        "cost_usd": None if any(c is None for c in costs) else sum(c or 0.0 for c in costs),
        "judge_cost_usd": (None if any(r.judge_usage.cost_usd is None for r in runs)
                           else sum(r.judge_usage.cost_usd or 0.0 for r in runs)),  # null: a price is unknown
        "tokens": sum(r.usage.input_tokens + r.usage.output_tokens + r.usage.cache_read_tokens
                      + r.usage.cache_write_tokens for r in runs),
        **pass_k(scored),
        # How runs ended: how often a limit (max_turns, max_time, max_usd) or a fault stopped them.
        "end_reasons": dict(sorted(Counter(r.end_reason for r in runs).items())),
    }
    # The rubric block: runs a rubric scores (their audited `score`, their `passed`).
    rubric = [(r, rg) for r in scored if (rg := r.grade.rubric) is not None and primary_kind(r.kinds) == "rubric"]
    if rubric:
        tag_vals: dict[str, list[float]] = defaultdict(list)
        for r, rg in rubric:
            for tag, v in rg.tags.items():
                if v is not None:  # a run whose credit the audit removed scores 0 on every tag, as in total
                    tag_vals[tag].append(0.0 if _removed(r) else v)
        es = [_score(r) for r, _rg in rubric]
        # HealthBench keeps each example's score unclipped (it may be negative) and clips
        # only the mean, tags likewise; OneMillion-Bench clips every task's score already.
        unclipped = any(rg.scoring == "unclipped_mean" for _r, rg in rubric)
        mean_of = metrics.clipped_mean if unclipped else _mean
        summary["rubric"] = {
            "expert_score": mean_of(es), "ci95": _ci(es),
            "pass_rate": _mean([1.0 if r.passed else 0.0 for r, _rg in rubric]),
            "tags": {**{t: _mean(tag_vals.get(t, [])) for t in CAPABILITY_TAGS},
                     **{t: mean_of(v) for t, v in tag_vals.items() if t not in CAPABILITY_TAGS and v}},
            "na": sum(rg.na for _r, rg in rubric),
            "audit_removed": sum(_removed(r) for r, _rg in rubric),
            "tasks": _task_ids(r for r, _rg in rubric),
        }
    judged = judge_summary(runs)
    if judged is not None:
        summary["judge"] = judged
    human = human_agreement(runs, labels)
    if human:
        summary["human_agreement"] = human
    contract = [r for r in scored if r.kinds and primary_kind(r.kinds) == "contract"]
    if contract:
        cells: dict[str, list[float]] = defaultdict(list)
        for r in contract:
            cells[f"{r.task_meta.get('modality', 'text')}/{r.task_meta.get('execution', 'multi-step-with-tools')}"] \
                .append(_score(r))
        acc = [_score(r) for r in contract]
        summary["contract"] = {
            "accuracy": _mean(acc), "ci95": _ci(acc),
            # Only runs of tasks with a required artifact say anything about Sat (null: none did).
            "sat_rate": _mean([1.0 if c.sat else 0.0 for r in contract if (c := r.grade.contract) is not None
                               and any(p.required for p in c.predicates)]),
            "cells": {c: _mean(cells[c]) for c in CELLS if c in cells},
            "modalities": {m: _mean([v for c, vs in cells.items() if c.startswith(m + "/") for v in vs])
                           for m in ("text", "multimodal") if any(c.startswith(m + "/") for c in cells)},
            "audit_removed": sum(_removed(r) for r in contract),
            "tasks": _task_ids(contract),
        }
    scen = [(r, r.grade.scenario) for r in scored if r.grade.scenario is not None]
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
            "tasks": _task_ids(r for r, _sg in scen),
            # Doing nothing scores S = 0: the share of runs that did worse than that.
            "below_no_op": _mean([1.0 if v < 0 else 0.0 for v in s_vals]),
            **_levels(scen),
        }
    blocks = [(k, summary[k][field]) for k, field in (("rubric", "expert_score"), ("scenario", "mean_s"),
                                                      ("contract", "accuracy")) if k in summary]
    # One headline per agent only when its runs are of one kind: scores of different kinds are
    # on different scales (rubric and contract in [0, 1], scenario S down to -1 and below).
    summary["mean_score"] = blocks[0][1] if len(blocks) == 1 else None
    return summary


def averaged(r: RunRecord) -> float:
    """A run's score as it enters every mean, front and table: scenario S floored at -1
    (`metrics.floored_score`), the audited score otherwise."""
    if r.grade.scenario is not None and primary_kind(r.kinds) == "scenario":
        return metrics.floored_score(r.grade.scenario.uplift_adj, r.grade.scenario.contact_cost)
    return _score(r)


def _score(r: RunRecord) -> float:
    assert r.score is not None
    return r.score


def _levels(scen: list[tuple[RunRecord, Any]]) -> dict[str, Any]:
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


def _task_ids(runs: Iterable[RunRecord]) -> list[str]:
    """The tasks a kind's block covers (sorted ids): agents that ran different task sets show it."""
    return sorted({r.key.task_id for r in runs})


def _removed(r: RunRecord) -> int:
    return r.grade.audit.removed if r.grade.audit is not None else 0


def build_report(campaign: str | None, runs: Iterable[RunRecord],
                 labels: list[dict[str, Any]] | None = None,
                 skipped: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """`labels`: human labels from a labels file (`assay.report.agreement.load_labels`), if any;
    `skipped`: task files left out by `--skip-invalid` (file, field, reason)."""
    runs = list(runs)
    by_agent: dict[str, list[RunRecord]] = defaultdict(list)
    for r in runs:
        by_agent[r.key.agent].append(r)
    deltas = search_deltas(runs)
    return {
        "schema": SCHEMA,
        "campaign": campaign,
        "skipped": list(skipped or []),
        "runs": [run_row(r) for r in runs],
        "agents": [agent_summary(a, rs, labels) for a, rs in sorted(by_agent.items())],
        "tasks": task_rows(runs),
        # One number per agent: the local-corpus delta where there is one, else Brave's, else native's.
        "search_delta": {a: (m.get("local") or m.get("brave") or m.get("native") or next(iter(m.values())))["delta"]
                         for a, m in deltas.items()},
        "search_deltas": deltas,
        "pareto": pareto_fronts(by_agent),
        "warnings": mixing_warnings(runs),
    }


def mixing_warnings(runs: list[RunRecord]) -> list[str]:
    """What makes a campaign's runs not comparable: a task run under several contents (its
    hash changed between runs) or runs made by several harness versions."""
    hashes: dict[str, set[str]] = defaultdict(set)
    for r in runs:
        hashes[r.key.task_id].add(r.key.task_hash)
    out = [f"task {t} was run under {len(h)} different contents (hashes {', '.join(sorted(h))}): "
           "its runs are not all of the same task" for t, h in sorted(hashes.items()) if len(h) > 1]
    versions = sorted({r.harness_version for r in runs})
    if len(versions) > 1:
        out.append(f"runs were made by {len(versions)} harness versions ({', '.join(versions)})")
    return out


def pareto_fronts(by_agent: dict[str, list[RunRecord]]) -> dict[str, list[dict[str, Any]]]:
    """Accuracy-cost Pareto fronts (DAREBench): the agents no other agent beats on both mean
    score and cost. A score is never averaged across kinds, so there is one front per kind
    (`rubric`, `scenario`, `contract`) and, within a kind, per modality (`contract/text`,
    `contract/multimodal`); when every run is of one kind, `all`, `text` and `multimodal` name
    that kind's fronts too. Agents whose cost is unknown (a price is missing) are left out."""
    runs = [r for rs in by_agent.values() for r in rs if r.status == "done" and r.score is not None]
    kinds = sorted({primary_kind(r.kinds) for r in runs})
    out: dict[str, list[dict[str, Any]]] = {}
    for kind in kinds:
        for modality in (None, "text", "multimodal"):
            front = _front(by_agent, kind, modality)
            if front:
                name = kind if modality is None else f"{kind}/{modality}"
                out[name] = front
                if len(kinds) == 1:
                    out["all" if modality is None else modality] = front
    return out


def _front(by_agent: dict[str, list[RunRecord]], kind: str, modality: str | None) -> list[dict[str, Any]]:
    points: list[tuple[float, float]] = []
    names: list[str] = []
    for agent, runs in sorted(by_agent.items()):
        rs = [r for r in runs if r.status == "done" and r.score is not None and primary_kind(r.kinds) == kind
              and (modality is None or r.task_meta.get("modality", "text") == modality)]
        if not rs or any(r.usage.cost_usd is None for r in rs):
            continue
        points.append((sum(r.usage.cost_usd or 0.0 for r in rs), sum(averaged(r) for r in rs) / len(rs)))
        names.append(agent)
    return [{"agent": names[i], "cost_usd": points[i][0], "mean_score": points[i][1]}
            for i in metrics.pareto_front(points)]
