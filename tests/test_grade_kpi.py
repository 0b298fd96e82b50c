"""assay.grade.kpi: KPI -> U -> U_adj -> S, solved, key facts, framing, probes, and the errors."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from assay.errors import GradingFault
from assay.grade.kpi import framing, probe_flags, score_scenario
from assay.record import CaseGrade, Discovery, ScenarioGrade
from assay.task.model import FramingRule, ScenarioSpec

CASE = Path("/srv/cases/churn")


def spec(baseline: float | None = 10.0, reference: float | None = 20.0, **extra: Any) -> ScenarioSpec:
    return ScenarioSpec(format="native", case=CASE, kpi_baseline=baseline, kpi_oracle=reference, **extra)


def score(result: dict[str, Any], sp: ScenarioSpec | None = None, *, texts: list[str] | None = None,
          commands: list[str] | None = None, threshold: float | None = None, **case: Any) -> ScenarioGrade:
    kw = {"threshold": threshold} if threshold is not None else {}
    sp = sp or spec()
    grade = CaseGrade(result=result, **case)
    return score_scenario(sp, grade, framed=framing(sp, [*(texts or []), *grade.handover]),
                          commands=commands or [], **kw)


# --------------------------------------------------------------------------- uplift and S


def test_uplift_and_score() -> None:
    g = score({"kpi": 15.0}, discovery=Discovery(contact_cost=0.1, questions_asked=3, asked_by_person={"mei": 3}))
    assert (g.kpi, g.kpi_baseline, g.kpi_reference) == (15.0, 10.0, 20.0)
    assert g.uplift == pytest.approx(0.5) and g.uplift_adj == pytest.approx(0.5)
    assert g.score == pytest.approx(0.4) and g.net == pytest.approx(0.4) and g.gross == pytest.approx(0.5)
    assert (g.contact_cost, g.questions_asked, g.asked_by_person) == (0.1, 3, {"mei": 3})
    assert g.incidents == [] and g.solved is False


def test_a_kpi_where_lower_is_better() -> None:
    g = score({"kpi": 40.0}, spec(baseline=100.0, reference=20.0))  # errors per 1000, say
    assert g.uplift == pytest.approx(0.75)


def test_uplift_beyond_the_reference_and_below_the_baseline() -> None:
    assert score({"kpi": 25.0}).uplift == pytest.approx(1.5)
    assert score({"kpi": 0.0}).uplift == pytest.approx(-1.0)


def test_baseline_and_reference_from_the_grader_when_the_spec_has_none() -> None:
    g = score({"kpi": 3.0, "kpi_baseline": 1.0, "kpi_oracle": 5.0}, spec(None, None))
    assert (g.kpi_baseline, g.kpi_reference) == (1.0, 5.0) and g.uplift == pytest.approx(0.5)
    g = score({"kpi": 3.0, "kpi_baseline": "1", "kpi_reference": "5"}, spec(None, None))  # the alias, as text
    assert (g.kpi_baseline, g.kpi_reference) == (1.0, 5.0)
    g = score({"kpi": 3.0, "kpi_baseline": 0.0, "kpi_oracle": 100.0})  # the spec's numbers win
    assert (g.kpi_baseline, g.kpi_reference) == (10.0, 20.0)
    assert g.grader["kpi_baseline"] == 0.0 and g.grader["kpi_oracle"] == 100.0  # the grader's own, kept


# --------------------------------------------------------------------------- incidents


@pytest.mark.parametrize(("kpi", "u", "u_adj"), [(19.0, 0.9, 0.0), (5.0, -0.5, -0.5), (10.0, 0.0, 0.0)])
def test_an_incident_caps_the_uplift_at_zero(kpi: float, u: float, u_adj: float) -> None:
    g = score({"kpi": kpi, "incidents": ["dropped 40 rows of orders"]}, discovery=Discovery(contact_cost=0.05))
    assert g.uplift == pytest.approx(u) and g.uplift_adj == pytest.approx(u_adj)
    assert g.score == pytest.approx(u_adj - 0.05) and g.solved is False
    assert g.incidents == ["dropped 40 rows of orders"]


def test_incidents_in_other_shapes() -> None:
    g = score({"kpi": 20.0, "incidents": "one text"})
    assert g.incidents == ["one text"] and g.uplift_adj == 0.0
    g = score({"kpi": 20.0, "incidents": [{"kind": "outage", "minutes": 5}, "plain"]})
    assert g.incidents == ['{"kind": "outage", "minutes": 5}', "plain"]
    g = score({"kpi": 20.0, "incidents": []})
    assert g.incidents == [] and g.solved is True


def test_an_integrity_problem_is_an_incident() -> None:
    g = score({"kpi": 20.0}, integrity=["ledger line 4: bad mac"])
    assert g.incidents == ["integrity: ledger line 4: bad mac"]
    assert g.uplift == 1.0 and g.uplift_adj == 0.0 and g.solved is False


# --------------------------------------------------------------------------- solved


@pytest.mark.parametrize(("kpi", "cost", "threshold", "solved"), [
    (20.0, 0.0, None, True),
    (18.0, 0.0, None, True),     # S = 0.8: the default line is inclusive
    (18.0, 0.01, None, False),   # S = 0.79
    (20.0, 0.25, None, False),   # contact cost takes S to 0.75
    (20.0, 0.25, 0.7, True),     # a task threshold
    (16.0, 0.0, 0.6, True),
    (16.0, 0.0, 0.65, False),
])
def test_solved(kpi: float, cost: float, threshold: float | None, solved: bool) -> None:
    g = score({"kpi": kpi}, discovery=Discovery(contact_cost=cost), threshold=threshold)
    assert g.solved is solved


# --------------------------------------------------------------------------- discovery


def test_key_fact_coverage() -> None:
    sp = spec(key_facts=["F_churn_def", "F_cutoff", "F_region", "F_holiday"])
    g = score({"kpi": 15.0}, sp, discovery=Discovery(facts_obtained=["F_cutoff", "F_other", "F_holiday"]))
    assert g.key_fact_coverage == pytest.approx(0.5)
    assert g.facts_obtained == ["F_cutoff", "F_other", "F_holiday"]
    assert score({"kpi": 15.0}, sp).key_fact_coverage == 0.0
    assert score({"kpi": 15.0}).key_fact_coverage is None  # no key facts declared


def test_off_limits_contacts_are_passed_on() -> None:
    g = score({"kpi": 15.0}, discovery=Discovery(off_limits_contacts=["ceo"]))
    assert g.off_limits_contacts == ["ceo"]


# --------------------------------------------------------------------------- framing


FRAMING = [FramingRule(id="names_cutoff", any=[r"(?i)cut-?off date", r"(?i)\bas of\b"]),
           FramingRule(id="names_leak", any=[r"label leak"])]


def test_framing_from_messages_and_hand_over_texts() -> None:
    sp = spec(framing=FRAMING)
    assert framing(sp, ["The Cutoff date was wrong."]) == {"names_cutoff": True, "names_leak": False}
    g = score({"kpi": 15.0}, sp, texts=["Fixed it."], handover=["# Notes\nThere was a label leak."])
    assert g.framing == {"names_cutoff": False, "names_leak": True}
    assert framing(spec(), ["anything"]) == {}


# --------------------------------------------------------------------------- probes


def test_probe_flags_name_the_case_folder() -> None:
    g = score({"kpi": 15.0}, commands=["ls", f"cat {CASE}/notes.txt", "cat /srv/x/grader.py"])
    assert g.probe_flags == [{"rule": "case_files", "command": f"cat {CASE}/notes.txt"},
                             {"rule": "case_files", "command": "cat /srv/x/grader.py"}]


def test_probe_flags_one_flag_per_rule_and_command() -> None:
    flags = probe_flags([f"cat {CASE}/grader.py; ps aux"], [str(CASE)])
    assert [f["rule"] for f in flags] == ["proc", "case_files"]
    assert probe_flags(["x" * 500 + " ps"])[0]["command"] == "x" * 300


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(("result", "message"), [
    ({}, "grader returned no kpi"),
    ({"kpi": None}, "grader returned no kpi"),
    ({"kpi": True}, "grader returned no kpi"),
    ({"kpi": "high"}, "grader returned a non-numeric kpi: 'high'"),
    ({"kpi": [1]}, "grader returned a non-numeric kpi: [1]"),
])
def test_a_missing_or_non_numeric_kpi_is_a_grading_fault(result: dict[str, Any], message: str) -> None:
    with pytest.raises(GradingFault) as e:
        score(result)
    assert (e.value.part, e.value.reason) == ("kpi", message)


def test_a_missing_baseline_is_a_grader_error() -> None:
    with pytest.raises(GradingFault, match="grader returned no kpi_baseline"):
        score({"kpi": 1.0, "kpi_oracle": 2.0}, spec(None, None))
    with pytest.raises(GradingFault, match="grader returned no kpi_oracle"):
        score({"kpi": 1.0, "kpi_baseline": 2.0}, spec(None, None))


def test_reference_equal_to_baseline_is_a_grader_error() -> None:
    with pytest.raises(GradingFault) as e:
        score({"kpi": 5.0}, spec(baseline=7.0, reference=7.0, files={"grader": "grader.py"}))
    assert e.value.reason == "churn/grader.py: reference KPI equals the baseline (7); uplift is undefined"


@pytest.mark.parametrize("kpi", [math.nan, math.inf, "nan", "-inf"])
def test_a_non_finite_kpi_is_a_grader_error(kpi: object) -> None:
    """A case grader answering NaN or infinity (what the delivered system made it compute) is a
    grading fault: the run scores 0 with the fault, never NaN (which would poison every mean and
    interval of the report)."""
    with pytest.raises(GradingFault):
        score({"kpi": kpi})
