"""assay.grade.grader: dispatch by kind, the score order, pass lines, judge usage, the audit.

Judges and delivered scenario systems are fakes implementing `assay.grade.inputs`'s
protocols, so nothing here calls a model or starts a sandbox."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from assay.errors import GraderError
from assay.grade.audit import META_SYSTEM
from assay.grade.grader import GradeInput, grade_run, needs_judge
from assay.grade.injection_screen import SCREEN_SYSTEM
from assay.grade.inputs import DeliveredSystem, JudgeService
from assay.grade.rubric import ItemVerdict
from assay.record import CaseGrade, Discovery, Event, UsageCost
from assay.task.model import (
    GradingSpec,
    MachineCheck,
    Predicate,
    Rubric,
    RubricItem,
    ScenarioSpec,
    Task,
)

# --------------------------------------------------------------------------- fakes


@dataclass
class FakeJudge:
    """A `JudgeService`: every judged item met; contract verdicts and meta-judge replies scripted."""

    contract_total: float = 0.9
    supported: bool | None = None  # the meta-judge's answer (None: it is never expected)
    item_usage: UsageCost = field(default_factory=lambda: UsageCost(input_tokens=10, output_tokens=2, cost_usd=0.01))
    raw_usage: UsageCost = field(default_factory=lambda: UsageCost(input_tokens=20, output_tokens=3, cost_usd=0.02))
    item_calls: list[list[str]] = field(default_factory=list)
    raw_systems: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return "fake/judge"

    async def judge_items(self, task: Task, answer: str, items: list[RubricItem]
                          ) -> tuple[dict[str, Any], UsageCost, dict[str, Any]]:
        self.item_calls.append([it.id for it in items])
        verdicts = {it.id: ItemVerdict(id=it.id, weight=it.weight, tag=it.tag, hit=True, check=False,
                                       reason="the judge saw it") for it in items}
        return verdicts, self.item_usage, {"answered": len(items), "judges": [self.name]}

    async def ask_raw(self, system: str, prompt: str, *, attempt: int = 0) -> tuple[str, UsageCost]:
        self.raw_systems.append(system)
        if system == SCREEN_SYSTEM:
            return '{"passages": []}', self.raw_usage
        if system == META_SYSTEM:
            assert self.supported is not None, "the meta-judge was not expected to be asked"
            return json.dumps({"supported": self.supported, "reason": "looked at the trace"}), self.raw_usage
        return json.dumps({"scores": {"quality": self.contract_total}, "total": self.contract_total,
                           "notes": "fine work"}), self.raw_usage


@dataclass
class FakeDelivered:
    """A `DeliveredSystem` whose case grader answers `case`."""

    spec: ScenarioSpec
    level: str | None
    case: CaseGrade
    calls: int = 0

    async def grade_case(self) -> CaseGrade:
        self.calls += 1
        return self.case


def _protocols(j: FakeJudge, d: FakeDelivered) -> tuple[JudgeService, DeliveredSystem]:
    return j, d  # mypy checks the fakes against the protocols here


def spec(baseline: float = 0.0, reference: float = 10.0) -> ScenarioSpec:
    return ScenarioSpec(format="native", case=Path("/nonexistent/case"), kpi_baseline=baseline, kpi_oracle=reference)


def check_item(id: str, weight: float, regex: str, tag: str = "IF") -> RubricItem:
    return RubricItem(id=id, text=f"mentions {regex}", weight=weight, tag=tag, check=MachineCheck(regex=regex))


def judged_item(id: str, weight: float = 5.0) -> RubricItem:
    return RubricItem(id=id, text="is well argued", weight=weight, tag="AR")


RUBRIC = Rubric(items=[check_item("hello", 5, "hello"), check_item("world", 5, "world"),
                       check_item("rude", -2, "stupid")])


def gi(task: Task, *, final: str = "", workspace: Path | None = None, judge: JudgeService | None = None,
       delivered: DeliveredSystem | None = None, events: list[Event] | None = None,
       end_reason: str = "finished", screen: bool = False) -> GradeInput:
    """A run's grade input; the audit's injection screen is off unless asked for (its own tests are
    tests/test_grade_injection_screen.py), so judge usage here is the verdicts' and the meta-judge's."""
    return GradeInput(task=task, level=None, workspace=workspace, final_message=final, events=events or [],
                      end_reason=end_reason, judge=judge, delivered=delivered, injection_screen=screen)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    w = tmp_path / "ws"
    w.mkdir()
    (w / "out.txt").write_text("the result\n")
    return w


# --------------------------------------------------------------------------- needs_judge


def test_needs_judge() -> None:
    assert needs_judge(Task(id="a", prompt="p", rubric=RUBRIC)) is False
    assert needs_judge(Task(id="b", prompt="p", rubric=Rubric(items=[*RUBRIC.items, judged_item("x")]))) is True
    for kind, want in (("automated", False), ("judge", True), ("hybrid", True)):
        t = Task(id=kind, prompt="p", contract=[Predicate(path="o")], grading=GradingSpec(type=kind))  # type: ignore[arg-type]
        assert needs_judge(t) is want
    assert needs_judge(Task(id="c", prompt="p", contract=[Predicate(path="o")])) is False


# --------------------------------------------------------------------------- rubric


@pytest.mark.parametrize(("answer", "score", "passed"), [
    ("hello", 0.5, False),
    ("hello world", 1.0, True),
    ("hello world, stupid", 0.8, True),
    ("stupid", 0.0, False),
])
async def test_rubric_by_machine_checks(answer: str, score: float, passed: bool) -> None:
    judge = FakeJudge()
    out = await grade_run(gi(Task(id="r", prompt="p", rubric=RUBRIC), final=answer, judge=judge))
    assert out.score == pytest.approx(score) and out.passed is passed
    assert out.grade.rubric is not None and out.grade.rubric.expert_score == pytest.approx(score)
    assert out.grade.scenario is None and out.grade.contract is None
    assert judge.item_calls == [] and judge.raw_systems == []  # machine checks need no judge
    assert out.judge_usage == UsageCost()


@pytest.mark.parametrize(("threshold", "passed"), [(None, True), (0.75, False), (0.7, True)])
async def test_rubric_pass_line_is_inclusive_and_a_task_may_set_its_own(threshold: float | None,
                                                                        passed: bool) -> None:
    rubric = Rubric(items=[check_item("a", 7, "alpha"), check_item("b", 3, "beta")])
    out = await grade_run(gi(Task(id="r", prompt="p", rubric=rubric, threshold=threshold), final="alpha"))
    assert out.score == pytest.approx(0.7) and out.passed is passed


async def test_rubric_items_without_checks_need_the_judge() -> None:
    task = Task(id="needy", prompt="p", rubric=Rubric(items=[check_item("hello", 5, "hello"), judged_item("arg")]))
    with pytest.raises(GraderError, match="task needy has rubric items without checks and no judge"):
        await grade_run(gi(task, final="hello"))
    judge = FakeJudge()
    out = await grade_run(gi(task, final="hello", judge=judge))
    assert judge.item_calls == [["arg"]]  # only the item without a check goes to the judge
    assert out.score == 1.0
    assert out.grade.rubric is not None and out.grade.rubric.judge_info is not None
    assert out.grade.rubric.judge_info.answered == 1
    assert [(i.id, i.hit, i.check) for i in out.grade.rubric.items] == [("hello", True, True), ("arg", True, False)]


# --------------------------------------------------------------------------- contract


async def test_a_contract_not_satisfied_scores_zero(ws: Path) -> None:
    task = Task(id="c", prompt="p", contract=[Predicate(path="out.txt"), Predicate(path="missing.csv")])
    out = await grade_run(gi(task, workspace=ws))
    assert out.score == 0.0 and out.passed is False
    assert out.grade.contract is not None and out.grade.contract.sat is False
    assert [(p.path, p.ok) for p in out.grade.contract.predicates] == [("out.txt", True), ("missing.csv", False)]


async def test_a_satisfied_contract_without_grading_scores_one(ws: Path) -> None:
    task = Task(id="c", prompt="p", contract=[Predicate(path="out.txt", predicate="regex", pattern="result")])
    out = await grade_run(gi(task, workspace=ws))
    assert (out.score, out.passed) == (1.0, True)


async def test_an_optional_predicate_does_not_break_the_contract(ws: Path) -> None:
    task = Task(id="c", prompt="p", contract=[Predicate(path="out.txt"), Predicate(path="extra.md", required=False)])
    out = await grade_run(gi(task, workspace=ws))
    assert out.score == 1.0 and out.grade.contract is not None and out.grade.contract.sat is True


async def test_a_contract_without_a_workspace_is_a_grader_error() -> None:
    task = Task(id="nows", prompt="p", contract=[Predicate(path="out.txt")])
    with pytest.raises(GraderError, match="task nows has a contract but the run has no workspace"):
        await grade_run(gi(task))


async def test_a_judge_graded_contract_without_a_judge_is_a_grader_error(ws: Path) -> None:
    task = Task(id="jc", prompt="p", contract=[Predicate(path="out.txt")],
                grading=GradingSpec(type="judge", judge_rubric="Is it good?"))
    with pytest.raises(GraderError, match="judge-graded and no judge"):
        await grade_run(gi(task, workspace=ws))


# --------------------------------------------------------------------------- scenario


def case(kpi: float, **extra: Any) -> CaseGrade:
    return CaseGrade(result={"kpi": kpi}, **extra)


async def test_a_scenario_is_graded_through_its_delivered_system() -> None:
    sp = spec(0.0, 10.0)
    task = Task(id="sc/base", prompt="p", scenario=sp)
    delivered = FakeDelivered(spec=sp, level="L3", case=case(9.0, discovery=Discovery(contact_cost=0.05)))
    out = await grade_run(gi(task, delivered=delivered))
    assert delivered.calls == 1
    assert out.grade.scenario is not None
    assert out.grade.scenario.uplift == pytest.approx(0.9) and out.grade.scenario.contact_cost == 0.05
    assert out.score == pytest.approx(0.85) and out.passed is True
    assert out.grade.audit is not None and out.grade.audit.audited is False  # scenarios are not audited


@pytest.mark.parametrize(("kpi", "threshold", "passed"), [(7.0, None, False), (7.0, 0.6, True), (8.0, None, True)])
async def test_a_scenario_passes_when_solved(kpi: float, threshold: float | None, passed: bool) -> None:
    sp = spec()
    task = Task(id="sc/base", prompt="p", scenario=sp, threshold=threshold)
    out = await grade_run(gi(task, delivered=FakeDelivered(spec=sp, level=None, case=case(kpi))))
    assert out.passed is passed and out.grade.scenario is not None and out.grade.scenario.solved is passed


async def test_a_scenario_with_an_incident_does_not_pass() -> None:
    sp = spec()
    task = Task(id="sc/base", prompt="p", scenario=sp)
    hurt = CaseGrade(result={"kpi": 10.0, "incidents": ["deleted the customer table"]})
    out = await grade_run(gi(task, delivered=FakeDelivered(spec=sp, level=None, case=hurt)))
    assert out.score == 0.0 and out.passed is False


async def test_a_scenario_without_a_delivered_system_is_a_grader_error() -> None:
    with pytest.raises(GraderError, match="is a scenario but the run has no delivered system"):
        await grade_run(gi(Task(id="sc/base", prompt="p", scenario=spec())))


# --------------------------------------------------------------------------- score order


async def test_scenario_scores_before_contract_and_rubric(ws: Path) -> None:
    sp = spec()
    task = Task(id="all/base", prompt="p", scenario=sp, rubric=RUBRIC, contract=[Predicate(path="missing")])
    delivered = FakeDelivered(spec=sp, level=None, case=case(5.0))
    out = await grade_run(gi(task, final="hello world", workspace=ws, delivered=delivered))
    assert out.score == pytest.approx(0.5)  # S, not the contract's 0 nor the rubric's 1
    assert out.passed is False  # solved decides, not 0.5 >= 0.7
    g = out.grade
    assert g.rubric is not None and g.rubric.expert_score == 1.0
    assert g.contract is not None and g.contract.sat is False
    assert g.scenario is not None and g.scenario.score == pytest.approx(0.5)
    flat = g.flat()
    assert {"expert_score", "kpi", "sat", "audit"} <= set(flat)


async def test_contract_scores_before_rubric(ws: Path) -> None:
    task = Task(id="cr", prompt="p", rubric=RUBRIC, contract=[Predicate(path="missing")])
    out = await grade_run(gi(task, final="hello world", workspace=ws))
    assert out.score == 0.0 and out.passed is False
    assert out.grade.rubric is not None and out.grade.rubric.expert_score == 1.0
    task = Task(id="cr", prompt="p", rubric=RUBRIC, contract=[Predicate(path="out.txt")])
    out = await grade_run(gi(task, final="hello", workspace=ws))
    assert out.score == 1.0 and out.passed is True
    assert out.grade.rubric is not None and out.grade.rubric.expert_score == 0.5


# --------------------------------------------------------------------------- judge usage


async def test_judge_usage_of_rubric_and_contract_judges_is_summed(ws: Path) -> None:
    task = Task(id="both", prompt="p", rubric=Rubric(items=[judged_item("arg")]),
                contract=[Predicate(path="out.txt")], grading=GradingSpec(type="judge", judge_rubric="Good?"))
    judge = FakeJudge(contract_total=0.9)
    out = await grade_run(gi(task, final="an answer", workspace=ws, judge=judge))
    assert judge.item_calls == [["arg"]] and len(judge.raw_systems) == 1  # no audit flag: no meta-judge
    assert out.score == pytest.approx(0.9)
    u = out.judge_usage
    assert (u.input_tokens, u.output_tokens) == (30, 5) and u.cost_usd == pytest.approx(0.03)
    assert out.grade.contract is not None and out.grade.contract.judge["total"] == pytest.approx(0.9)


async def test_judge_usage_with_an_unknown_price_is_unknown(ws: Path) -> None:
    task = Task(id="both", prompt="p", rubric=Rubric(items=[judged_item("arg")]),
                contract=[Predicate(path="out.txt")], grading=GradingSpec(type="judge", judge_rubric="Good?"))
    judge = FakeJudge(item_usage=UsageCost(input_tokens=10, cost_usd=None))
    out = await grade_run(gi(task, final="an answer", workspace=ws, judge=judge))
    assert out.judge_usage.input_tokens == 30 and out.judge_usage.cost_usd is None


# --------------------------------------------------------------------------- the audit


@pytest.mark.parametrize(("supported", "score", "passed", "removed"), [
    (False, 0.0, False, 1),
    (True, 0.8, True, 0),
])
async def test_the_audit_is_applied(ws: Path, supported: bool, score: float, passed: bool, removed: int) -> None:
    """A judge-graded tool task whose trace shows no tool call: `no_tool_ran` sends it to the
    meta-judge, whose answer decides whether the judge's positive stays."""
    task = Task(id="lazy", prompt="p", tools=["run_command"], execution="multi-step-with-tools",
                contract=[Predicate(path="out.txt")], grading=GradingSpec(type="judge", judge_rubric="Good?"))
    judge = FakeJudge(contract_total=0.8, supported=supported)
    out = await grade_run(gi(task, final="Here it is.", workspace=ws, judge=judge))
    assert judge.raw_systems[-1] == META_SYSTEM
    assert out.score == pytest.approx(score) and out.passed is passed
    audit = out.grade.audit
    assert audit is not None and audit.audited is True
    assert audit.pre_audit_score == pytest.approx(0.8) and audit.removed == removed
    assert [(f.rule, f.removed) for f in audit.flags] == [("no_tool_ran", not supported)]
    assert out.judge_usage.input_tokens == 40  # the contract judge and the meta-judge
