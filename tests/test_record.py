"""assay.record: the flat grade and back, RunRecord JSON, the event union, safe text, usage sums."""

from __future__ import annotations

import json
from typing import Any

import pytest

from assay.record import (
    EVENT,
    AssistantEvent,
    Audit,
    AuditFlag,
    ContractGrade,
    ErrorEvent,
    Event,
    Grade,
    HarnessEvent,
    ItemGrade,
    JudgeInfo,
    PredicateGrade,
    RubricGrade,
    RunKey,
    RunRecord,
    ScenarioGrade,
    StakeholderEvent,
    SystemEvent,
    ToolCallEvent,
    ToolResultEvent,
    Usage,
    UsageCost,
    UserEvent,
    event_from_wire,
    primary_kind,
    safe_json,
    safe_text,
)

# --------------------------------------------------------------------------- grades


def rubric_part() -> RubricGrade:
    return RubricGrade(expert_score=0.5, tags={"FI": 1.0, "AR": None}, na=1,
                       items=[ItemGrade(id="1", weight=5, tag="FI", hit=True, check=True, reason="matched"),
                              ItemGrade(id="2", weight=-2, tag="AR", hit=None, na=True)],
                       judge_info=JudgeInfo(agreement=1.0, agreed=1, answered=1, judges=["openai/x"]))


def scenario_part() -> ScenarioGrade:
    return ScenarioGrade(kpi=15.0, kpi_baseline=10.0, kpi_reference=20.0, uplift=0.5, uplift_adj=0.5,
                         incidents=["late"], contact_cost=0.1, questions_asked=2, asked_by_person={"mei": 2},
                         key_fact_coverage=0.5, facts_obtained=["F1"], gross=0.5, net=0.4, score=0.4,
                         framing={"names": True}, probe_flags=[{"rule": "proc", "command": "ps"}],
                         llm={"calls": 3}, llm_cost_usd=0.01)


def contract_part() -> ContractGrade:
    return ContractGrade(sat=False, predicates=[PredicateGrade(path="a.csv", ok=False, reason="missing",
                                                               predicate="csv")],
                         checks={"rows": 0.5}, judge={"total": 0.7, "notes": "ok"},
                         copy_refused=[("big.bin", "file too large")])


def audit() -> Audit:
    return Audit(flags=[AuditFlag(rule="no_tool_ran", reason="no tool", severity="hard", removed=True)],
                 removed=1, pre_audit_score=0.7, audited=True, meta_judge={"supported": False})


@pytest.mark.parametrize(("kinds", "grade"), [
    (["rubric"], Grade(rubric=rubric_part(), audit=audit(), grade_seconds=0.25)),
    (["scenario"], Grade(scenario=scenario_part(), audit=Audit(pre_audit_score=0.4))),
    (["contract"], Grade(contract=contract_part(), audit=audit())),
    (["rubric", "scenario"], Grade(rubric=rubric_part(), scenario=scenario_part(), audit=Audit())),
    (["rubric", "contract"], Grade(rubric=rubric_part(), contract=contract_part())),
    (["rubric", "scenario", "contract"], Grade(rubric=rubric_part(), scenario=scenario_part(),
                                                contract=contract_part(), audit=audit())),
])
def test_flat_and_back_for_every_kind(kinds: list[str], grade: Grade) -> None:
    flat = grade.flat()
    assert json.loads(json.dumps(flat)) == flat  # plain JSON
    back = Grade.from_flat(flat, kinds)
    assert back == grade
    assert back.flat() == flat


def test_flat_puts_every_kinds_fields_side_by_side() -> None:
    flat = Grade(rubric=rubric_part(), contract=contract_part(), audit=audit(), grade_seconds=1.5).flat()
    assert flat["expert_score"] == 0.5 and flat["sat"] is False and flat["checks"] == {"rows": 0.5}
    assert flat["items"][0] == {"id": "1", "weight": 5.0, "tag": "FI", "tags": [], "hit": True, "na": False,
                                "check": True, "reason": "matched"}
    assert flat["predicates"] == [{"path": "a.csv", "ok": False, "reason": "missing", "predicate": "csv",
                                   "required": True}]
    assert flat["copy_refused"] == [["big.bin", "file too large"]]
    assert flat["audit"]["removed"] == 1 and flat["audit"]["pre_audit_score"] == 0.7
    assert flat["grade_seconds"] == 1.5


def test_fields_left_unset_are_left_out_of_the_flat_grade() -> None:
    flat = Grade(contract=ContractGrade(predicates=[PredicateGrade(path="a", ok=True)]),
                 scenario=ScenarioGrade(kpi=1, kpi_baseline=0, kpi_reference=2, uplift=0.5, uplift_adj=0.5)).flat()
    assert "copy_refused" not in flat and "llm" not in flat and "llm_cost_usd" not in flat
    assert "predicate" not in flat["predicates"][0]
    assert "audit" not in flat and "grade_seconds" not in flat


def test_unknown_keys_are_kept_with_the_primary_kind() -> None:
    flat = Grade(rubric=rubric_part(), contract=contract_part()).flat()
    flat["darebench_cell"] = "text/single-step"
    back = Grade.from_flat(flat, ["rubric", "contract"])
    assert back.contract is not None and back.contract.model_extra == {"darebench_cell": "text/single-step"}
    assert back.rubric is not None and not back.rubric.model_extra
    assert back.flat()["darebench_cell"] == "text/single-step"


def test_extras_a_grader_passes_through_survive_the_round_trip() -> None:
    g = Grade(scenario=scenario_part().model_copy(update={}))
    g.scenario.gates_passed = 3  # type: ignore[union-attr]  # extra="allow"
    flat = g.flat()
    assert flat["gates_passed"] == 3
    back = Grade.from_flat(flat, ["scenario"])
    assert back.scenario is not None and back.scenario.model_extra == {"gates_passed": 3}


def test_from_flat_of_nothing_is_an_empty_grade() -> None:
    assert Grade.from_flat({}, ["rubric"]).empty
    assert Grade().flat() == {}
    only_audit = Grade.from_flat({"audit": {"removed": 0, "pre_audit_score": None}}, ["rubric"])
    assert only_audit.rubric is None and only_audit.audit == Audit() and not only_audit.empty


def test_primary_kind() -> None:
    assert primary_kind(["rubric", "scenario", "contract"]) == "scenario"
    assert primary_kind(["rubric", "contract"]) == "contract"
    assert primary_kind(["rubric"]) == "rubric"
    assert primary_kind([]) == "contract"


# --------------------------------------------------------------------------- RunRecord


def record(**extra: Any) -> RunRecord:
    key = RunKey(campaign="c", task_id="t", task_hash="h", agent="noop", level="L3", epoch=2, options_hash="o")
    base: dict[str, Any] = dict(run_id="r1", key=key, attempt=2, kinds=["rubric", "contract"], harness_version="1.0",
                                status="done", end_reason="max_turns", score=0.0, passed=False,
                                usage=UsageCost(input_tokens=5, cost_usd=None),
                                judge_usage=UsageCost(output_tokens=3, cost_usd=0.5),
                                grade=Grade(rubric=rubric_part(), contract=contract_part(), audit=audit()),
                                options={"max_turns": 3}, task_meta={"domain": "x"})
    return RunRecord(**{**base, **extra})


def test_run_record_json_round_trip_with_a_grade() -> None:
    rec = record()
    raw = rec.model_dump_json()
    data = json.loads(raw)
    assert data["grade"] == rec.grade.flat()  # SPEC's flat object on the wire
    assert data["usage"]["cost_usd"] is None and data["judge_usage"]["cost_usd"] == 0.5
    back = RunRecord.model_validate_json(raw)
    assert back == rec
    assert RunRecord.model_validate(data) == rec


def test_run_record_takes_a_flat_grade() -> None:
    rec = record(grade={"expert_score": 1.0, "items": [], "sat": True, "audit": {"removed": 0}})
    assert rec.grade.rubric is not None and rec.grade.rubric.expert_score == 1.0
    assert rec.grade.contract is not None and rec.grade.contract.sat is True


def test_run_key_digest() -> None:
    key = record().key
    same = RunKey(**key.model_dump())
    assert key.digest == same.digest and len(key.digest) == 32
    for change in ({"epoch": 3}, {"level": None}, {"options_hash": "p"}, {"task_hash": "g"}, {"campaign": "d"}):
        assert key.model_copy(update=change).digest != key.digest


# --------------------------------------------------------------------------- events


EVENTS: list[Event] = [
    SystemEvent(seq=0, t=0.0, content="be brief"),
    UserEvent(seq=1, t=0.1, content="do it", images=2),
    AssistantEvent(seq=2, t=0.2, content="", tool_calls=[{"id": "c1", "name": "read_file"}],
                   usage={"input_tokens": 3}, stop_reason="tool_use"),
    ToolCallEvent(seq=3, t=0.3, id="c1", name="read_file", arguments={"path": "a"}),
    ToolResultEvent(seq=4, t=0.4, id="c1", name="read_file", output="1\ta"),
    StakeholderEvent(seq=5, t=0.5, to="mei", question="why?", topics=["why"], facts=["F1"], n_asked=1, cost=0.02),
    HarnessEvent(seq=6, t=0.6, note="copied", files=["a"]),
    ErrorEvent(seq=7, t=0.7, source="provider", reason="429", status=429),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: e.kind)
def test_every_event_kind_round_trips_through_the_wire(event: Event) -> None:
    wire = event.wire()
    assert set(wire) == {"seq", "t", "kind", "data"} and wire["kind"] == event.kind
    assert "seq" not in wire["data"] and "kind" not in wire["data"]
    back = event_from_wire(wire["seq"], wire["t"], wire["kind"], json.loads(json.dumps(wire["data"])))
    assert type(back) is type(event) and back == event


def test_wire_data_leaves_out_unset_fields() -> None:
    assert UserEvent(seq=0, t=0.0, content="hi").wire() == {"seq": 0, "t": 0.0, "kind": "user",
                                                            "data": {"content": "hi"}}
    assert ErrorEvent(seq=1, t=1.0, source="grader", reason="x").data() == {"source": "grader", "reason": "x"}


def test_the_union_discriminates_on_kind() -> None:
    ev = EVENT.validate_python({"seq": 0, "t": 0.0, "kind": "tool_result", "output": "ok"})
    assert isinstance(ev, ToolResultEvent) and ev.output == "ok"
    with pytest.raises(ValueError):
        EVENT.validate_python({"seq": 0, "t": 0.0, "kind": "bogus"})


def test_extra_fields_of_an_event_are_kept() -> None:
    ev = event_from_wire(3, 1.5, "assistant", {"content": "hi", "model": "openai/x"})
    assert isinstance(ev, AssistantEvent) and ev.model_extra == {"model": "openai/x"}
    assert ev.wire()["data"]["model"] == "openai/x"


def test_an_unknown_kind_becomes_a_harness_note() -> None:
    ev = event_from_wire(4, 2.0, "pilot_day", {"day": 3})
    assert isinstance(ev, HarnessEvent) and ev.kind == "harness"
    assert (ev.seq, ev.t, ev.note) == (4, 2.0, "[pilot_day]") and ev.model_extra == {"day": 3}


def test_an_unknown_kind_with_a_note_of_its_own_is_read() -> None:
    """An older store's event of a kind this version does not know, carrying a `note` field:
    reading the run back (`assay show`, the web viewer) must not fail."""
    ev = event_from_wire(5, 2.5, "checkpoint", {"note": "saved state", "step": 2})
    assert isinstance(ev, HarnessEvent) and "[checkpoint]" in ev.note and "saved state" in ev.note
    assert ev.model_extra == {"step": 2}


# --------------------------------------------------------------------------- safe text


def test_safe_text_escapes_lone_surrogates() -> None:
    assert safe_text("plain ✓ 中文") == "plain ✓ 中文"
    assert safe_text("a\udcffb") == "a\\udcffb"
    assert safe_text("\ud800\udfff") == "\\ud800\\udfff"
    safe_text("x\udc80").encode("utf-8")  # now encodable


def test_safe_json_escapes_every_string_keys_included() -> None:
    value = {"k\udc80": ["v\udcff", ("t\ud801", 3)], 7: {"n": None, "b": True, "f": 1.5}}
    assert safe_json(value) == {"k\\udc80": ["v\\udcff", ["t\\ud801", 3]], 7: {"n": None, "b": True, "f": 1.5}}
    json.dumps(safe_json(value), ensure_ascii=False).encode("utf-8")


# --------------------------------------------------------------------------- usage


def test_usage_cost_addition() -> None:
    a = UsageCost(input_tokens=1, output_tokens=2, cache_read_tokens=3, cache_write_tokens=4, cost_usd=0.5)
    b = UsageCost(input_tokens=10, output_tokens=20, cache_read_tokens=30, cache_write_tokens=40, cost_usd=0.25)
    s = a + b
    assert isinstance(s, UsageCost)
    assert (s.input_tokens, s.output_tokens, s.cache_read_tokens, s.cache_write_tokens) == (11, 22, 33, 44)
    assert s.cost_usd == 0.75 and s.total == 110


def test_an_unknown_cost_stays_unknown() -> None:
    known, unknown = UsageCost(input_tokens=1, cost_usd=0.5), UsageCost(input_tokens=2, cost_usd=None)
    assert (known + unknown).cost_usd is None and (unknown + known).cost_usd is None
    assert (known + unknown).input_tokens == 3


def test_adding_plain_usage_keeps_the_cost() -> None:
    s = UsageCost(input_tokens=1, cost_usd=0.5) + Usage(output_tokens=7)
    assert isinstance(s, UsageCost) and (s.output_tokens, s.cost_usd) == (7, 0.5)


def test_sum_of_usage_costs() -> None:
    parts = [UsageCost(input_tokens=i, cost_usd=0.125) for i in range(1, 5)]
    total = sum(parts)
    assert isinstance(total, UsageCost) and total.input_tokens == 10 and total.cost_usd == 0.5
    assert sum([*parts, UsageCost(cost_usd=None)], UsageCost()).cost_usd is None
    assert sum([], UsageCost()) == UsageCost()


def test_usage_cost_of() -> None:
    u = UsageCost.of(Usage(input_tokens=4, output_tokens=1), None)
    assert (u.input_tokens, u.output_tokens, u.cost_usd) == (4, 1, None)
