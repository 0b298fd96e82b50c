"""Grading one finished run: dispatch by the task's kinds, then the evidence audit.

The score follows SPEC.md: a task scores by the first of scenario, contract, rubric that
it has; a contract that is not satisfied scores 0; the audit may then remove a positive.
Who failed decides: a part whose grading failed on what the agent delivered (GradingFault)
scores 0 and is listed in `grade.faults`; the caller finds out whether the task itself is
broken (`assay.campaign.health`). Only GraderError (the harness or a provider) voids a run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from assay.config import settings
from assay.errors import GraderError, GradingFault
from assay.grade import workers
from assay.grade.audit import audit_run
from assay.grade.contract import check_contract
from assay.grade.contract_checks import make_python_check
from assay.grade.contract_grading import grade_contract
from assay.grade.inputs import UNTOUCHED, GradeInput
from assay.grade.kpi import framing, score_scenario
from assay.grade.rubric import ItemVerdict, items_needing_judge, machine_verdicts, score_items, worst_verdicts
from assay.record import (
    SCORE_ORDER,
    AssistantEvent,
    ContractGrade,
    Fault,
    Grade,
    JudgeInfo,
    PredicateGrade,
    RubricGrade,
    ScenarioGrade,
    UsageCost,
)
from assay.task.model import ScenarioSpec, Task

__all__ = ["GradeInput", "GradeOutcome", "failed_grade", "failed_scenario", "grade_run", "needs_judge"]


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
    verdicts: dict[str, ItemVerdict] = {}
    assert task.rubric is not None
    if any(it.check is not None for it in task.rubric.items):  # in a worker process: agent text, task patterns
        try:
            verdicts = await workers.call(machine_verdicts, task, inp.final_message,
                                          timeout_s=settings().predicate_timeout_s)
        except (workers.WorkerTimeout, workers.WorkerFailed) as e:
            grade.faults.append(Fault(part="rubric_checks", reason=f"the rubric's checks on this answer {e}"))
            verdicts = worst_verdicts(task, f"not decided: the checks {e}")
    pending = items_needing_judge(task)
    usage = UsageCost()
    info = None
    if pending and inp.probe == UNTOUCHED:  # a probe of an untouched workspace asks no judge
        verdicts.update({it.id: ItemVerdict(id=it.id, weight=it.weight, tag=it.tag, hit=it.weight < 0,
                                            check=False, reason="not judged: a probe of an untouched workspace")
                         for it in pending})
    elif pending:
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
    spec = inp.delivered.spec
    texts = [e.content for e in inp.events if isinstance(e, AssistantEvent)]
    try:
        case = await inp.delivered.grade_case()
        framed = await _framing(spec, [*texts, *case.handover], grade)
        grade.scenario = score_scenario(spec, case, framed=framed, commands=inp.commands,
                                        threshold=inp.task.pass_threshold())
    except GradingFault as e:  # the delivered system failed under its grader: it scores 0, not solved
        fault = Fault(part=e.part, reason=e.reason)
        grade.faults.append(fault)
        grade.scenario = failed_scenario(fault, inp.level)
    return grade.scenario.score


async def _framing(spec: ScenarioSpec, texts: list[str], grade: Grade) -> dict[str, bool]:
    """The truth's framing rules (task patterns) over the agent's hand-over, in a grading worker;
    one the worker cannot finish is recorded as a fault and every rule as not named."""
    if not spec.framing:
        return {}
    try:
        return await workers.call(framing, spec, texts, timeout_s=settings().predicate_timeout_s)
    except (workers.WorkerTimeout, workers.WorkerFailed) as e:
        grade.faults.append(Fault(part="framing", reason=f"the framing rules on the hand-over {e}"))
        return {rule.id: False for rule in spec.framing}


def failed_scenario(fault: Fault, level: str | None) -> ScenarioGrade:
    """The scenario grade of a delivered system whose grading failed: no KPI, S = 0, not solved."""
    return ScenarioGrade(kpi=None, kpi_baseline=None, kpi_reference=None, uplift=None, uplift_adj=0.0,
                         incidents=[f"grading failed: {fault.reason}"[:500]], score=0.0, solved=False, level=level)


def failed_grade(task: Task, level: str | None, fault: Fault) -> Grade:
    """A grade of 0 in every kind the task has, for a run counted as failed without being
    graded (void too many times: SPEC, `void_attempts`), so every kind's block counts it."""
    grade = Grade(faults=[fault])
    if task.rubric is not None:
        grade.rubric = RubricGrade(expert_score=0.0)
    if task.scenario is not None:
        grade.scenario = failed_scenario(fault, level)
    if "contract" in task.kinds:
        grade.contract = ContractGrade(sat=False)
    return grade


async def _contract(inp: GradeInput, grade: Grade) -> tuple[float, UsageCost | None]:
    task = inp.task
    grade.contract = ContractGrade()
    if task.contract:
        if inp.workspace is None:
            raise GraderError(f"task {task.id} has a contract but the run has no workspace")
        python_check = make_python_check(task, inp.workspace) if any(
            p.predicate == "python" for p in task.contract) else None
        sat, results = await check_contract(inp.workspace, task.contract, python_check)
        grade.faults += [Fault(part=f"predicate:{r.path}", reason=r.reason) for r in results if r.fault]
        grade.contract.sat = sat
        grade.contract.predicates = [PredicateGrade(path=r.path, ok=r.ok, reason=r.reason, predicate=r.predicate,
                                                    required=p.required)
                                     for r, p in zip(results, task.contract, strict=True)]
    if not grade.contract.sat:
        return 0.0, None
    if task.grading is None:
        return 1.0, None
    result = await grade_contract(inp, grade.contract)
    grade.faults += [Fault(part=part, reason=reason) for part, reason in result.faults]
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
    # The evidence audit (docs/audit.md): a judge-given positive the trace does not support is
    # removed. A probe is graded for its faults only: no audit.
    if inp.probe is None:
        score, grade.audit, judge_usage = await audit_run(inp, grade, score, judge_usage)
    if grade.scenario is None:  # the audited score decides (a re-judge without injected text may lower it)
        passed = None if score is None else score >= task.pass_threshold()
    if grade.audit is not None and grade.audit.removed:
        passed = False
    return GradeOutcome(score=score, passed=passed, grade=grade, judge_usage=judge_usage)
