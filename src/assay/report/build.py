"""Building the report JSON (SPEC.md "Report JSON") from stored runs."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from assay import metrics
from assay.record import RunRecord

SCHEMA = "assay.report/1"
CELLS = [f"{m}/{e}" for m in ("text", "multimodal") for e in ("single-step", "multi-step", "multi-step-with-tools")]


def run_row(r: RunRecord) -> dict[str, Any]:
    grade = dict(r.grade)
    grade.setdefault("audit", {"flags": [], "removed": 0, "pre_audit_score": r.score})
    return {
        "run_id": r.run_id, "task_id": r.key.task_id, "task_hash": r.key.task_hash, "kinds": list(r.kinds),
        "agent": r.key.agent, "level": r.key.level, "epoch": r.key.epoch, "attempt": r.attempt,
        "status": r.status, "end_reason": r.end_reason, "void_reason": r.void_reason, "sandbox": r.sandbox,
        "score": r.score, "passed": r.passed, "value": r.value,
        "usage": r.usage.model_dump(), "judge_usage": r.judge_usage.model_dump(),
        "grade": grade, "model": r.model, "harness_version": r.harness_version, "turns": r.turns,
        "duration_s": r.duration_s, "task": r.task_meta,
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
    by_task: dict[tuple[str, str | None], list[bool]] = defaultdict(list)
    for r in done:
        by_task[(r.key.task_id, r.key.level)].append(bool(r.passed))
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


def agent_summary(agent: str, runs: list[RunRecord]) -> dict[str, Any]:
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
        "mean_score": _mean([r.score for r in scored]),  # type: ignore[misc]
        "economic_value": econ,
        "cost_usd": None if any(c is None for c in costs) else sum(c or 0.0 for c in costs),
        "judge_cost_usd": sum(r.judge_usage.cost_usd or 0.0 for r in runs),
        "tokens": sum(r.usage.input_tokens + r.usage.output_tokens + r.usage.cache_read_tokens
                      + r.usage.cache_write_tokens for r in runs),
        **pass_k(scored),
    }
    rubric = [r for r in scored if "rubric" in r.kinds and r.grade.get("expert_score") is not None]
    if rubric:
        tag_vals: dict[str, list[float]] = defaultdict(list)
        for r in rubric:
            for tag, v in (r.grade.get("tags") or {}).items():
                if v is not None:
                    tag_vals[tag].append(v)
        es = [r.grade["expert_score"] for r in rubric]
        summary["rubric"] = {
            "expert_score": _mean(es), "ci95": _ci(es),
            "pass_rate": _mean([1.0 if r.grade["expert_score"] >= 0.7 else 0.0 for r in rubric]),
            "tags": {t: _mean(tag_vals.get(t, [])) for t in ("FI", "AR", "IF", "SF")},
            "na": sum(int(r.grade.get("na", 0)) for r in rubric),
        }
    contract = [r for r in scored if r.kinds and _primary(r.kinds) == "contract"]
    if contract:
        cells: dict[str, list[float]] = defaultdict(list)
        for r in contract:
            cells[f"{r.task_meta.get('modality', 'text')}/{r.task_meta.get('execution', 'multi-step-with-tools')}"].append(r.score)  # type: ignore[arg-type]
        acc = [r.score for r in contract]
        summary["contract"] = {
            "accuracy": _mean(acc), "ci95": _ci(acc),  # type: ignore[arg-type]
            "sat_rate": _mean([1.0 if r.grade.get("sat") else 0.0 for r in contract]),
            "cells": {c: _mean(cells[c]) for c in CELLS if c in cells},
            "audit_removed": sum(int((r.grade.get("audit") or {}).get("removed", 0)) for r in contract),
        }
    scen = [r for r in scored if "scenario" in r.kinds]
    if scen:
        per_task: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for r in scen:
            per_task[r.key.task_id].append((r.grade.get("uplift_adj", 0.0), r.grade.get("contact_cost", 0.0)))
        s_vals = [max(r.grade.get("uplift_adj", 0.0), -1.0) - r.grade.get("contact_cost", 0.0) for r in scen]
        summary["scenario"] = {
            "mean_s": metrics.mean_run_score(per_task), "ci95": _ci(s_vals),
            "solved": sum(1 for r in scen if r.grade.get("solved")),
            "uplift_gross": _mean([r.grade.get("uplift_adj", 0.0) for r in scen]),
            "contact_cost": _mean([r.grade.get("contact_cost", 0.0) for r in scen]),
        }
    return summary


def _primary(kinds: list[str]) -> str:
    for k in ("scenario", "contract", "rubric"):
        if k in kinds:
            return k
    return kinds[0]


def build_report(campaign: str | None, runs: Iterable[RunRecord]) -> dict[str, Any]:
    runs = list(runs)
    by_agent: dict[str, list[RunRecord]] = defaultdict(list)
    for r in runs:
        by_agent[r.key.agent].append(r)
    return {
        "schema": SCHEMA,
        "campaign": campaign,
        "runs": [run_row(r) for r in runs],
        "agents": [agent_summary(a, rs) for a, rs in sorted(by_agent.items())],
    }
