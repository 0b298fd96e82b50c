"""Grading one finished run: dispatch by the task's kinds, then the evidence audit.

The score follows SPEC.md: a task scores by the first of scenario, contract, rubric that
it has; a contract that is not satisfied scores 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assay.errors import GraderError
from assay.grade.contract import check_contract
from assay.grade.rubric import ItemVerdict, items_needing_judge, machine_verdicts, score_items
from assay.record import Event, UsageCost
from assay.task.model import Task


@dataclass
class GradeInput:
    task: Task
    level: str | None
    workspace: Path | None
    final_message: str
    events: list[Event]
    end_reason: str
    judge: Any = None  # assay.grade.judge.Judge when the task needs one
    scenario: Any = None  # assay.scenario.session.ScenarioSession for scenario tasks
    commands: list[str] = field(default_factory=list)  # every command the agent ran


@dataclass
class GradeOutcome:
    score: float | None
    passed: bool | None
    grade: dict[str, Any] = field(default_factory=dict)
    judge_usage: UsageCost = field(default_factory=UsageCost)


def needs_judge(task: Task) -> bool:
    if items_needing_judge(task):
        return True
    return task.grading is not None and task.grading.type in ("judge", "hybrid")


async def grade_run(inp: GradeInput) -> GradeOutcome:
    task = inp.task
    grade: dict[str, Any] = {}
    judge_usage = UsageCost()
    scores: dict[str, float | None] = {}

    if task.rubric is not None:
        answer = inp.final_message
        verdicts: dict[str, ItemVerdict] = machine_verdicts(task, answer)
        pending = items_needing_judge(task)
        if pending:
            if inp.judge is None:
                raise GraderError(f"task {task.id} has rubric items without checks and no judge was given")
            judged, usage, info = await inp.judge.judge_items(task, answer, pending)
            verdicts.update(judged)
            judge_usage = usage
            grade["judge_info"] = info
        r = score_items(task, verdicts)
        grade.update(r)
        scores["rubric"] = r["expert_score"]

    if task.scenario is not None:
        if inp.scenario is None:
            raise GraderError(f"task {task.id} is a scenario but the run has no scenario session")
        fields = await inp.scenario.grade(inp.workspace, inp.events, inp.commands)
        grade.update(fields)
        scores["scenario"] = fields["score"]

    if "contract" in task.kinds:
        sat = True
        preds: list[dict[str, Any]] = []
        if task.contract:
            if inp.workspace is None:
                raise GraderError(f"task {task.id} has a contract but the run has no workspace")
            python_check = None
            if any(p.predicate == "python" for p in task.contract):
                from assay.grade.contract_grading import make_python_check

                python_check = make_python_check(task, inp.workspace)
            sat, results = check_contract(inp.workspace, task.contract, python_check)
            preds = [r.model_dump(include={"path", "ok", "reason", "predicate"}) for r in results]
        grade["sat"] = sat
        grade["predicates"] = preds
        grade["checks"] = {}
        grade["judge"] = {}
        if not sat:
            scores["contract"] = 0.0
        elif task.grading is None:
            scores["contract"] = 1.0
        else:
            from assay.grade.contract_grading import grade_contract

            result = await grade_contract(inp, grade)
            scores["contract"] = result.score
            judge_usage = judge_usage if result.judge_usage is None else result.judge_usage

    score: float | None = None
    for kind in ("scenario", "contract", "rubric"):
        if kind in scores:
            score = scores[kind]
            break
    if "scenario" in scores:
        passed = bool(grade.get("solved"))
    else:
        passed = None if score is None else score >= task.pass_threshold()
    # The evidence audit (docs/audit.md): a judge-given positive the trace does not support is removed.
    from assay.grade.audit import audit_run

    score, audit, judge_usage = await audit_run(inp, grade, score, judge_usage)
    grade["audit"] = audit
    if audit["removed"]:
        passed = False
    return GradeOutcome(score=score, passed=passed, grade=grade, judge_usage=judge_usage)
