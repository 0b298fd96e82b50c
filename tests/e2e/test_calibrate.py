"""`assay calibrate` end to end: a judge (a fake OpenAI server on 127.0.0.1) grades the answers
stored in OneMillion-Bench files and is compared with their human scores, per domain and
overall; the numbers below are worked out by hand from the files."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import fault, reply
from tests.fakes.openai_server import FakeOpenAIServer
from tests.helpers import assay, model_alias
from tests.shipped_schemas import schema_errors

ITEM_LINE = re.compile(r"^\[([^\]]+)\] \(weight [+-]?[\d.]+\) (.*)$", re.MULTILINE)
FENCED = re.compile(r"<<<ANSWER-(\w+)>>>\n?(.*?)<<<END-ANSWER-\1>>>", re.DOTALL)
MARKER = re.compile(r"\b[A-Z]{3,}\b")


def omb_task(case_id: str, items: list[tuple[str, float, dict[str, float]]], responses: dict[int, str]) -> dict[str, Any]:
    """An upstream-shaped task: items (detail, weight, human scores) and stored responses."""
    return {
        "case_id": case_id,
        "prompt": f"Question {case_id}: write a short answer.",
        "tags": ["Topic", "Sub-topic"],
        "rubrics": [{"rubric_number": n, "rubric_detail": detail, "rubric_weight": w,
                     "rubricLabel": "Factual Information", **({"scores": scores} if scores else {})}
                    for n, (detail, w, scores) in enumerate(items, start=1)],
        "model_response": {f"model_response_{i}": {"model_name": "example/model", "response_text": text}
                           for i, text in responses.items()},
    }


def write_suite(root: Path) -> Path:
    law = root / "omb" / "law"
    health = root / "omb" / "healthcare_and_medicine"
    law.mkdir(parents=True)
    health.mkdir(parents=True)
    (law / "l1.json").write_text(json.dumps(omb_task("L1", [
        ("Mentions ALPHA.", 10, {"response_1_human_score_1": 10, "response_2_human_score_1": 10}),
        ("Mentions BRAVO.", 5, {"response_1_human_score_1": 0, "response_2_human_score_1": 5}),
        ("Mentions GAMMA, a harmful claim.", -5, {"response_1_human_score_1": -5, "response_2_human_score_1": 0}),
    ], {1: "ALPHA and also GAMMA.", 2: "Only BRAVO here."})))
    (law / "l2.json").write_text(json.dumps(omb_task("L2", [
        ("Mentions DELTA.", 8, {"response_1_human_score_1": 8, "response_1_human_score_2": 8,
                                "response_2_human_score_1": 0}),
        ("Mentions ECHO.", 2, {"response_1_human_score_1": 2, "response_1_human_score_2": 0,
                               "response_2_human_score_1": 0, "response_3_human_score_1": 2}),
        ("Unlabelled item about FOXTROT.", 4, {}),
    ], {1: "DELTA and ECHO.", 2: "Nothing relevant."})))
    (health / "h1.json").write_text(json.dumps(omb_task("H1", [
        ("Mentions ZULU.", 4, {"response_1_human_score_1": 4}),
        ("Mentions KILO.", 6, {"response_1_human_score_1": 6}),
    ], {1: "ZULU."})))
    return root / "omb"


def answer_of(prompt: str) -> str:
    return FENCED.findall(prompt)[-1][1]  # the last fenced block (the note before it names the markers)


def marker_judge(body: dict[str, Any], *, always_met: bool = False) -> Any:
    """Met when the item's marker word is in the answer (or always, for a lenient judge)."""
    prompt = body["messages"][-1]["content"]
    answer = answer_of(prompt)
    items = ITEM_LINE.findall(prompt)

    def met(text: str) -> bool:
        return always_met or any(m in answer for m in MARKER.findall(text))

    if '"items": [' in prompt:
        out = [{"id": i, "met": met(text), "reason": "marker"} for i, text in items]
        return reply(json.dumps({"items": out}), prompt_tokens=300, completion_tokens=20)
    ((_, text),) = items
    return reply(json.dumps({"met": met(text), "reason": "marker"}), prompt_tokens=200, completion_tokens=10)


def calibrate(cwd: Path, *args: str) -> Any:
    return assay("calibrate", *args, cwd=cwd)


# Per-answer expert scores over the items people scored (several people: the mean of their points):
#   L1/response_1: judge (10 + 0 - 5) / 15 = 1/3;  people (10 + 0 - 5) / 15 = 1/3; 3 of 3 items agree
#   L1/response_2: judge (0 + 5 + 0) / 15 = 1/3;   people (10 + 5 + 0) / 15 = 1;  2 of 3 agree
#   L2/response_1: judge (8 + 2) / 10 = 1;         people (8 + 1) / 10 = 0.9;     3 of 4 agree (two people)
#   L2/response_2: judge 0;                        people 0;                      2 of 2 agree
#   H1/response_1: judge 4 / 10 = 0.4;             people 10 / 10 = 1;            1 of 2 agree
LAW_JUDGE, LAW_PEOPLE = [1 / 3, 1 / 3, 1.0, 0.0], [1 / 3, 1.0, 0.9, 0.0]


def test_calibrate_compares_the_judge_with_people_per_domain(tmp_path: Path) -> None:
    suite = write_suite(tmp_path)
    with FakeOpenAIServer() as srv:
        srv.handler = marker_judge
        model_alias(tmp_path, "j", "openai", srv.url, model="judge-model")
        r = calibrate(tmp_path, str(suite), "--judge", "j", "--json", "cal.json")
        assert r.returncode == 0, r.stderr
        sent = len(srv.requests)
        assert sent == 5  # batched: one call per answer
        cal = json.loads((tmp_path / "cal.json").read_text())
        # The same command again is served by the judge cache in the store.
        r = calibrate(tmp_path, str(suite), "--judge", "j", "--json", "again.json")
        assert r.returncode == 0, r.stderr
        assert len(srv.requests) == sent
        assert json.loads((tmp_path / "again.json").read_text()) == cal
    assert cal["schema"] == "assay.calibration/1" and cal["answers"] == 5
    assert schema_errors(cal) == []
    assert cal["unmatched"] == ["L2/response_3"]  # a score for an answer the file does not hold
    assert "L2/response_3" in r.stderr
    (j,) = cal["judges"]
    assert j["judge"] == "j" and j["failed"] == []
    law, health = j["domains"]["law"], j["domains"]["healthcare"]
    assert law["n_responses"] == 4 and law["n_items"] == 12 and law["na"] == 0
    assert law["item_agreement"] == pytest.approx(10 / 12)
    assert law["pearson_r"] == pytest.approx(0.693864, abs=1e-6)
    assert law["pearson_r"] == pytest.approx(statistics.correlation(LAW_JUDGE, LAW_PEOPLE))
    assert law["p_value"] == pytest.approx(0.306136, abs=1e-6)
    assert health["n_responses"] == 1 and health["n_items"] == 2 and health["item_agreement"] == 0.5
    assert health["pearson_r"] is None and health["p_value"] is None  # fewer than 3 answers
    overall = j["overall"]
    assert overall["n_responses"] == 5 and overall["n_items"] == 14
    assert overall["item_agreement"] == pytest.approx(11 / 14)
    assert overall["pearson_r"] == pytest.approx(statistics.correlation([*LAW_JUDGE, 0.4], [*LAW_PEOPLE, 1.0]))
    # The table names the judge and each domain.
    assert "law" in r.stdout and "healthcare" in r.stdout


def test_a_lenient_judge_scores_lower_agreement_than_a_careful_one(tmp_path: Path) -> None:
    """Calibration measures the judge, so two judges on the same answers get different numbers."""
    suite = write_suite(tmp_path)
    with FakeOpenAIServer() as careful, FakeOpenAIServer() as lenient:
        careful.handler = marker_judge
        lenient.handler = lambda body: marker_judge(body, always_met=True)
        model_alias(tmp_path, "careful", "openai", careful.url, model="careful-judge")
        model_alias(tmp_path, "lenient", "openai", lenient.url, model="lenient-judge")
        r = calibrate(tmp_path, str(suite), "--judge", "careful", "--judge", "lenient", "--judge-mode", "per-item",
                      "--json", "cal.json")
        assert r.returncode == 0, r.stderr
        # Per item: one call per judge item of each answer (the labelled ones are compared).
        assert len(careful.requests) == 14 and len(lenient.requests) == 14
    by = {j["judge"]: j for j in json.loads((tmp_path / "cal.json").read_text())["judges"]}
    assert by["careful"]["overall"]["item_agreement"] == pytest.approx(11 / 14)  # as batched
    # Always "met": agrees where the person marked the item met (9 of the 14 item verdicts).
    assert by["lenient"]["overall"]["item_agreement"] == pytest.approx(9 / 14)


def test_a_judge_failing_at_the_provider_leaves_answers_out_and_exits_1(tmp_path: Path) -> None:
    suite = write_suite(tmp_path)
    with FakeOpenAIServer(default=fault(500)) as srv:
        model_alias(tmp_path, "j", "openai", srv.url, model="judge-model")
        r = calibrate(tmp_path, str(suite), "--judge", "j", "--json", "cal.json")
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr and "not judged: L1/response_1" in r.stderr
    (j,) = json.loads((tmp_path / "cal.json").read_text())["judges"]
    assert len(j["failed"]) == 5 and j["overall"]["n_responses"] == 0 and j["overall"]["item_agreement"] is None


def test_calibrate_refuses_bad_input_with_exit_2(tmp_path: Path) -> None:
    suite = write_suite(tmp_path)
    model_alias(tmp_path, "j", "openai", "http://127.0.0.1:9/v1", model="judge-model")
    r = calibrate(tmp_path, str(suite))
    assert r.returncode == 2 and "--judge" in r.stderr
    bare = tmp_path / "bare"
    bare.mkdir()
    task = omb_task("B1", [("Mentions ALPHA.", 10, {})], {1: "ALPHA"})
    (bare / "b1.json").write_text(json.dumps(task))
    r = calibrate(tmp_path, str(bare), "--judge", "j")
    assert r.returncode == 2 and "no task here holds an answer people scored" in r.stderr
    task["model_response"] = {"model_response_1": {"model_name": "m"}}
    (bare / "b1.json").write_text(json.dumps(task))
    r = calibrate(tmp_path, str(bare), "--judge", "j")
    assert r.returncode == 2 and "model_response.model_response_1.response_text" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / ".assay").exists()  # nothing was written for refused input


def test_stored_responses_do_not_change_a_tasks_hash_or_reach_an_agent(tmp_path: Path) -> None:
    suite = write_suite(tmp_path)
    r = assay("tasks", str(suite), "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    before = {t["id"]: t["hash"] for t in json.loads(r.stdout)["tasks"]}
    path = suite / "law" / "l1.json"
    data = json.loads(path.read_text())
    data["model_response"]["model_response_1"]["response_text"] = "A different stored answer."
    path.write_text(json.dumps(data))
    r = assay("tasks", str(suite), "--json", cwd=tmp_path)
    after = {t["id"]: t["hash"] for t in json.loads(r.stdout)["tasks"]}
    assert after == before
