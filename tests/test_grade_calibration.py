"""Which answers a calibration compares: labels matched to the answer they were given to."""

from __future__ import annotations

from pathlib import Path

from assay.grade.calibration import Comparison, labelled_answers, summarise
from assay.task.formats.omb import read_omb
from assay.task.model import PolicySpec, Rubric, RubricItem, Task

FIXTURES = Path(__file__).parent / "fixtures"


def test_omb_scores_pair_with_the_stored_response_they_name() -> None:
    (task,) = read_omb(FIXTURES / "omb" / "law" / "case_a.json")
    assert task.responses == {"response_1": "Check the lease first..."}
    found, unmatched = labelled_answers(task)
    (one,) = found
    assert one.response == "response_1" and one.text == "Check the lease first..." and one.domain == "law"
    assert one.labels == {"1": {"1": True}, "2": {"1": False}, "5": {"1": True}}  # -5 is non-zero: the bad thing occurred
    assert unmatched == [f"{task.id}/response_2"]  # scored, but the file stores no second response


def test_native_labels_are_verdicts_on_the_reference_answer() -> None:
    task = Task(id="n1", prompt="Q?", execution="single-step", domain="finance",
                policies={"reference": PolicySpec(answer="The answer is 42.")},
                rubric=Rubric(items=[
                    RubricItem(id="a", text="Says 42.", weight=5, tag="FI", human_labels={"alice": True, "bob": False}),
                    RubricItem(id="b", text="Has 42.", weight=2, tag="FI", check={"regex": "42"},
                               human_labels={"alice": True}),  # a machine check: not the judge's
                ]))
    (one,) = labelled_answers(task)[0]
    assert one.response == "reference" and one.text == "The answer is 42."
    assert one.labels == {"a": {"alice": True, "bob": False}}
    no_reference = task.model_copy(update={"policies": {}})
    assert labelled_answers(no_reference) == ([], ["n1/reference"])


def test_summary_counts_item_verdicts_and_leaves_r_undefined_when_constant() -> None:
    rows = [Comparison(task_id=f"t{i}", domain="d", response="response_1", pairs=[(True, True), (False, True)],
                       judge_score=0.5, human_score=1.0, na=i) for i in range(3)]
    s = summarise(rows)
    assert s.n_responses == 3 and s.n_items == 6 and s.item_agreement == 0.5 and s.na == 3
    assert s.pearson_r is None and s.p_value is None  # both sides constant: r undefined
    assert summarise([]).item_agreement is None and summarise([]).n_items == 0
