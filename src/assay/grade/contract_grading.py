"""Grading a contract task beyond its artifact contract: automated checks, a judge, or both.

The automated checks are `assay.grade.contract_checks`'s (task code, sandboxed), the judge
`assay.grade.contract_judge`'s (the DareBench judge contract); both read the run as an
OpenClaw session log (`assay.grade.openclaw`). Here they are combined by `grading.type`:
`automated`, `judge`, or `hybrid`. A check or a judge that fails on the agent's work scores
0 with the fault recorded (SPEC "who failed decides").

Hybrid: `(w_auto * automated + w_judge * judge) / (w_auto + w_judge)`; with a zero sum the
automated score is used.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from assay.errors import GradingFault
from assay.grade.contract_checks import CopyRefusals, check_mean, run_checks
from assay.grade.contract_judge import judge_contract
from assay.grade.inputs import UNTOUCHED, GradeInput
from assay.grade.openclaw import to_openclaw
from assay.record import ContractGrade, Event, UsageCost
from assay.task.model import Task

__all__ = ["ContractScore", "grade_contract"]

@dataclass
class ContractScore:
    score: float
    judge_usage: UsageCost | None = None
    faults: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (part, reason) scored 0


async def grade_contract(inp: GradeInput, grade: ContractGrade) -> ContractScore:
    """Score a contract task whose contract holds (fills `grade.checks` and `grade.judge`)."""
    task: Task = inp.task
    g = task.grading
    if g is None:
        return ContractScore(score=1.0)
    model = _model_of(inp.events)
    auto: float | None = None
    judge_score: float | None = None
    judge_usage: UsageCost | None = None
    faults: list[tuple[str, str]] = []
    if g.type in ("automated", "hybrid"):
        capped: list[str] = []
        refused = CopyRefusals()
        try:
            checks = await run_checks(task, inp.workspace, inp.events, inp.final_message, model=model,
                                      refused=refused, capped=capped, faults=faults)
        except GradingFault as e:  # the checks failed on the agent's work: they score 0
            faults.append((e.part, e.reason))
            checks = {}
        grade.copy_refused = refused.entries()
        if capped:  # the checks saw a copy without what passed the caps (ASSAY_COPY_MAX_FILES/_DEPTH)
            grade.workspace_capped = capped
        if checks is None:
            preds = grade.predicates
            auto = sum(1 for p in preds if p.ok) / len(preds) if preds else 1.0
        else:
            grade.checks = dict(checks)
            auto = check_mean(checks)
    if g.type in ("judge", "hybrid") and inp.probe != UNTOUCHED:  # a probe of an untouched workspace asks no judge
        transcript = to_openclaw(inp.events, task_id=task.id, model=model, final_message=inp.final_message)
        verdict, judge_usage = await judge_contract(inp, transcript)
        grade.judge = verdict
        judge_score = verdict["total"]
        if verdict.get("unreadable"):
            faults.append(("judge", str(verdict["error"])))
    if g.type == "automated":
        score = auto or 0.0
    elif g.type == "judge":
        score = judge_score or 0.0
    else:
        wsum = g.weight_automated + g.weight_judge
        if wsum <= 0:
            score = auto or 0.0
        else:
            score = (g.weight_automated * (auto or 0.0) + g.weight_judge * (judge_score or 0.0)) / wsum
    return ContractScore(score=min(1.0, max(0.0, score)), judge_usage=judge_usage, faults=faults)


def _model_of(events: list[Event]) -> str | None:
    """The model recorded on the run's first assistant turn (for the OpenClaw log's header)."""
    for ev in events:
        m = getattr(ev, "model", None)
        if isinstance(m, str) and m:
            return m
    return None
