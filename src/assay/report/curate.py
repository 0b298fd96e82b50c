"""Curation: propose a filtered task set from a campaign's stored results.

Three rules, after DAREBench's difficulty filter and OneMillion-Bench's bidirectional
truncation (see ``docs/curation.md``):

- **difficulty** (single-step tasks only, and only when a small agent is named): drop a task
  when the small agent has at least ``k`` non-void runs on it and passed every one of them;
- **upper truncation**: drop a task when every agent that ran it passed every (non-void) run;
- **lower truncation**: list a task for *review* (it is kept) when every agent's best score
  on it is ``<= zero_eps``: it may be unsolvable, or it may just be hard; a person decides.

Void runs are ignored everywhere: they carry no score. :func:`curate` is pure (runs in,
:class:`CurationResult` out); the manifest it proposes is written by `assay.task.manifest`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field

from assay.errors import InputError
from assay.record import RunRecord
from assay.task.manifest import MANIFEST_SCHEMA

SINGLE_STEP = "single-step"
BALANCE_AXES = ("source", "domain", "subset", "cell")


class TaskVerdict(BaseModel):
    task_id: str
    rule: str  # difficulty | upper_truncation | lower_truncation
    reason: str


class BalanceCount(BaseModel):
    before: int = 0
    after: int = 0


class CurationResult(BaseModel):
    campaign: str | None = None
    tasks_total: int = 0
    kept: list[str] = Field(default_factory=list)
    dropped: list[TaskVerdict] = Field(default_factory=list)
    review: list[TaskVerdict] = Field(default_factory=list)
    balance: dict[str, dict[str, BalanceCount]] = Field(default_factory=dict)
    rules: dict[str, Any] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
    runs_used: int = 0
    void_ignored: int = 0

    def manifest(self, created: datetime | None = None) -> dict[str, Any]:
        """The suite manifest (schema ``assay.manifest/1``)."""
        when = (created or datetime.now(UTC)).isoformat(timespec="seconds")
        return {
            "schema": MANIFEST_SCHEMA,
            "campaign": self.campaign,
            "created": when,
            "rules": self.rules,
            "tasks": list(self.kept),
            "dropped": [d.model_dump() for d in self.dropped],
            "review": [r.model_dump() for r in self.review],
            "balance": {axis: {k: v.model_dump() for k, v in groups.items()}
                        for axis, groups in self.balance.items()},
            "summary": {"tasks_before": self.tasks_total, "tasks_after": len(self.kept),
                        "dropped": len(self.dropped), "review": len(self.review),
                        "runs_used": self.runs_used, "void_runs_ignored": self.void_ignored},
            "notes": list(self.notes),
        }


def _cell(meta: dict[str, Any]) -> str:
    return f"{meta.get('modality') or 'text'}/{meta.get('execution') or 'multi-step-with-tools'}"


def _axis_value(meta: dict[str, Any], axis: str) -> str:
    if axis == "cell":
        return _cell(meta)
    v = meta.get(axis)
    return str(v) if v not in (None, "") else "-"


def _fmt(x: float) -> str:
    return f"{x:.3f}".rstrip("0").rstrip(".") if x == x else "nan"


# complexity: the three curation rules and their bookkeeping, applied in one pass
def curate(runs: Iterable[RunRecord], *, small_agent: str | None, k: int | None,  # noqa: C901
           zero_eps: float = 0.05) -> CurationResult:
    """Apply the difficulty filter and bidirectional truncation to one campaign's runs.

    ``runs`` are the latest attempt per run key (``Store.runs(campaign)``). ``k`` defaults to
    the number of runs (epochs, times levels where a task has them) the small agent has per
    task in this campaign, the largest over tasks, counting void runs, so a task whose run
    went void is not judged on fewer epochs than the others. Raises :class:`InputError` for
    an unknown small agent or a ``k`` below 1.
    """
    runs = list(runs)
    if k is not None and k < 1:
        raise InputError(None, "--k", f"must be at least 1 (got {k})")
    campaigns = sorted({r.key.campaign for r in runs})
    res = CurationResult(campaign=campaigns[0] if len(campaigns) == 1 else None)

    meta: dict[str, dict[str, Any]] = {}
    done: dict[str, dict[str, list[RunRecord]]] = defaultdict(lambda: defaultdict(list))
    small_slots: dict[str, set[tuple[str | None, int]]] = defaultdict(set)
    agents_seen: set[str] = set()
    for r in runs:
        tid = r.key.task_id
        if tid not in meta or (not meta[tid] and r.task_meta):
            meta[tid] = dict(r.task_meta)
        agents_seen.add(r.key.agent)
        if r.key.agent == small_agent:
            small_slots[tid].add((r.key.level, r.key.epoch))
        if r.status == "void":
            res.void_ignored += 1
            continue
        res.runs_used += 1
        done[tid][r.key.agent].append(r)

    if small_agent is not None and small_agent not in agents_seen:
        shown = ", ".join(sorted(agents_seen)) or "none"
        raise InputError(None, "--small-agent", f"agent {small_agent!r} has no runs in this campaign "
                                                f"(agents: {shown})")
    task_ids = sorted(meta)
    res.tasks_total = len(task_ids)

    # Rules as applied, recorded in the manifest.
    if small_agent is None:
        diff_rule: dict[str, Any] = {"applied": False, "note": "no --small-agent given: difficulty filter skipped"}
        res.notes.append(diff_rule["note"])
        k_eff = None
    else:
        k_eff = k if k is not None else max((len(s) for s in small_slots.values()), default=1)
        diff_rule = {"applied": True, "small_agent": small_agent, "k": k_eff,
                     "k_source": "--k" if k is not None else "epochs the small agent has per task",
                     "scope": "tasks with execution single-step",
                     "drop_if": f"the small agent has >= {k_eff} non-void runs on the task and passed all of them"}
    res.rules = {
        "void_runs": "ignored (no score); a task with only void runs is kept and not judged",
        "difficulty": diff_rule,
        "upper_truncation": {"applied": True, "drop_if": "every agent that ran the task passed every non-void run"},
        "lower_truncation": {"applied": True, "zero_eps": zero_eps,
                             "review_if": f"every agent's best score on the task is <= {_fmt(zero_eps)} "
                                          "(listed for review, not dropped)"},
    }

    unjudged: list[str] = []
    too_few: list[str] = []
    small_missing: list[str] = []
    dropped_ids: set[str] = set()
    for tid in task_ids:
        by_agent = done.get(tid, {})
        if not by_agent:
            unjudged.append(tid)
            res.kept.append(tid)
            continue
        # 1. difficulty (single-step only)
        if small_agent is not None and k_eff is not None and meta[tid].get("execution") == SINGLE_STEP:
            mine = by_agent.get(small_agent, [])
            if not mine:
                small_missing.append(tid)
            elif len(mine) < k_eff:
                too_few.append(tid)
            elif all(r.passed for r in mine):
                n = len(mine)
                res.dropped.append(TaskVerdict(task_id=tid, rule="difficulty", reason=(
                    f"single-step task the small agent {small_agent} passed {n} of {n} runs (k={k_eff})")))
                dropped_ids.add(tid)
                continue
        # 2. upper truncation: every agent passed every run
        if all(r.passed for rs in by_agent.values() for r in rs):
            n_runs = sum(len(rs) for rs in by_agent.values())
            res.dropped.append(TaskVerdict(task_id=tid, rule="upper_truncation", reason=(
                f"every agent that ran it passed every run ({len(by_agent)} agent(s), {n_runs} run(s)): "
                f"{', '.join(sorted(by_agent))}")))
            dropped_ids.add(tid)
            continue
        res.kept.append(tid)
        # 3. lower truncation: every agent's best score ~0 -> review
        best = {a: max((r.score for r in rs if r.score is not None), default=None) for a, rs in by_agent.items()}
        scored = {a: s for a, s in best.items() if s is not None}
        if scored and all(s <= zero_eps for s in scored.values()):
            top = max(scored.values())
            res.review.append(TaskVerdict(task_id=tid, rule="lower_truncation", reason=(
                f"every agent's best score <= {_fmt(zero_eps)} (highest {_fmt(top)}, "
                f"{len(scored)} agent(s): {', '.join(sorted(scored))}); check it is solvable")))

    if unjudged:
        res.notes.append(f"{len(unjudged)} task(s) with only void runs kept without judgement: "
                         + ", ".join(unjudged[:10]) + (" ..." if len(unjudged) > 10 else ""))
    if small_missing:
        res.notes.append(f"difficulty: small agent {small_agent} has no non-void run on {len(small_missing)} "
                         "single-step task(s); kept")
    if too_few:
        res.notes.append(f"difficulty: small agent {small_agent} has fewer than k={k_eff} non-void runs on "
                         f"{len(too_few)} single-step task(s); not judged, kept: "
                         + ", ".join(too_few[:10]) + (" ..." if len(too_few) > 10 else ""))
    if small_agent is not None and not any(m.get("execution") == SINGLE_STEP for m in meta.values()):
        res.notes.append("difficulty: the campaign has no single-step tasks, so the filter dropped nothing")

    kept = set(res.kept)
    balance: dict[str, dict[str, BalanceCount]] = {axis: {} for axis in BALANCE_AXES}
    for tid in task_ids:
        for axis in BALANCE_AXES:
            c = balance[axis].setdefault(_axis_value(meta[tid], axis), BalanceCount())
            c.before += 1
            if tid in kept:
                c.after += 1
    res.balance = {axis: dict(sorted(groups.items())) for axis, groups in balance.items()}
    for axis in BALANCE_AXES:
        emptied = [g for g, c in res.balance[axis].items() if c.before and not c.after]
        if emptied:
            res.notes.append(f"balance: no task left for {axis} {', '.join(emptied)}")
    return res
