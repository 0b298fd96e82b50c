"""Grading one finished run: dispatch by the task's kinds, then the evidence audit.

The score follows SPEC.md: a task scores by the first of scenario, contract, rubric that
it has; a contract that is not satisfied scores 0; the audit may then remove a positive.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from assay.errors import GraderError
from assay.grade.audit import audit_run
from assay.grade.contract import check_contract
from assay.grade.contract_grading import grade_contract, make_python_check
from assay.grade.inputs import GradeInput
from assay.grade.kpi import score_scenario
from assay.grade.rubric import ItemVerdict, items_needing_judge, machine_verdicts, score_items
from assay.record import (
    SCORE_ORDER,
    AssistantEvent,
    ContractGrade,
    Grade,
    JudgeInfo,
    PredicateGrade,
    UsageCost,
)
from assay.task.model import Task

__all__ = ["GradeInput", "GradeOutcome", "grade_run", "needs_judge"]


@dataclass
class GradeOutcome:
    score: float | None
    passed: bool | None
    grade: Grade = field(default_factory=Grade)
    judge_usage: UsageCost = field(default_factory=UsageCost)


def needs_judge(task: Task) -> bool:
    if items_needing_judge(task):
        return True
    return task.grading is not None and task.grading.type in ("judge", "hybrid")


async def _rubric(inp: GradeInput, grade: Grade) -> tuple[float | None, UsageCost]:
    task = inp.task
    verdicts: dict[str, ItemVerdict] = machine_verdicts(task, inp.final_message)
    pending = items_needing_judge(task)
    usage = UsageCost()
    info = None
    if pending:
        if inp.judge is None:
            raise GraderError(f"task {task.id} has rubric items without checks and no judge was given")
        judged, usage, info = await inp.judge.judge_items(task, inp.final_message, pending)
        verdicts.update(judged)
    grade.rubric = score_items(task, verdicts)
    grade.rubric.judge_info = JudgeInfo.model_validate(info) if info is not None else None
    return grade.rubric.expert_score, usage


async def _scenario(inp: GradeInput, grade: Grade) -> float:
    if inp.delivered is None:
        raise GraderError(f"task {inp.task.id} is a scenario but the run has no delivered system")
    case = await inp.delivered.grade_case()
    texts = [e.content for e in inp.events if isinstance(e, AssistantEvent)]
    grade.scenario = score_scenario(inp.delivered.spec, case, assistant_texts=texts, commands=inp.commands,
                                    threshold=inp.task.pass_threshold())
    return grade.scenario.score


async def _contract(inp: GradeInput, grade: Grade) -> tuple[float, UsageCost | None]:
    task = inp.task
    grade.contract = ContractGrade()
    if task.contract:
        if inp.workspace is None:
            raise GraderError(f"task {task.id} has a contract but the run has no workspace")
        python_check = make_python_check(task, inp.workspace) if any(
            p.predicate == "python" for p in task.contract) else None
        sat, results = await check_contract(inp.workspace, task.contract, python_check)
        grade.contract.sat = sat
        grade.contract.predicates = [PredicateGrade(path=r.path, ok=r.ok, reason=r.reason, predicate=r.predicate,
                                                    required=p.required)
                                     for r, p in zip(results, task.contract, strict=True)]
    if not grade.contract.sat:
        return 0.0, None
    if task.grading is None:
        return 1.0, None
    result = await grade_contract(inp, grade.contract)
    return result.score, result.judge_usage


async def grade_run(inp: GradeInput) -> GradeOutcome:
    task = inp.task
    grade = Grade()
    judge_usage = UsageCost()
    scores: dict[str, float | None] = {}
    if task.rubric is not None:
        scores["rubric"], judge_usage = await _rubric(inp, grade)
    if task.scenario is not None:
        scores["scenario"] = await _scenario(inp, grade)
    if "contract" in task.kinds:
        scores["contract"], contract_usage = await _contract(inp, grade)
        if contract_usage is not None:
            judge_usage = judge_usage + contract_usage
    score = next((scores[k] for k in SCORE_ORDER if k in scores), None)
    if grade.scenario is not None:
        passed: bool | None = grade.scenario.solved
    else:
        passed = None if score is None else score >= task.pass_threshold()
    # The evidence audit (docs/audit.md): a judge-given positive the trace does not support is removed.
    score, grade.audit, judge_usage = await audit_run(inp, grade, score, judge_usage)
    if grade.audit.removed:
        passed = False
    return GradeOutcome(score=score, passed=passed, grade=grade, judge_usage=judge_usage)
