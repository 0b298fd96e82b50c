"""Parity with upstream: task files in each upstream shape, run through the real CLI, with the
numbers each upstream's documented rules give written in by hand (the arithmetic beside each).

docs/formats.md, "Where assay deliberately differs from upstream", points here: every row of
its tables and every "same as upstream" statement has a test below. Where assay differed
from upstream without the difference being listed there (check values clipped before their
mean, pre-audit tag scores, HealthBench theme tags unscored, gross uplift unfloored, a
Pareto front averaging across kinds), the test holds upstream's number and the code follows.

Upstream rules (shared docs/upstream-formats.md and the upstream code it cites):
- DareBench `scripts/lib_grading.py`: automated = mean of the check dict's numeric values
  (`isinstance(v, (int, float))`, so booleans are 0/1 and text is left out); judge =
  `total` (else `score`, else the mean of `scores` / `criteria_scores`), capped at 1.0;
  hybrid = (w_auto * auto + w_judge * judge) / (w_auto + w_judge).
- OneMillion-Bench `economic_value/scoring.py`: ExpertScore = clip(sum(s_r) / sum of positive
  weights, 0, 1), s_r = +w / -w on a hit, 0 on a miss or NA; pass iff >= 0.7;
  `economic_value/compute.py`: value = sum over passed tasks per currency, rows matched by
  uuid, UUID, case_id, caseId, id, then the file stem.
- HealthBench `healthbench_eval.py`: per-example score = sum(points met) / sum(positive
  points), unclipped; per-tag scores the same over the items with the tag; example tags get
  the example's score; every aggregate is the mean over examples clipped to [0, 1].
- FDE-Gym `harness/bench.py table`: repeats averaged per problem, each run floored at -1.

Model providers are fake OpenAI servers on 127.0.0.1; agents are script agents and the
bundled policies. Each campaign is run once per module and read by several tests.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from assay.env.bwrap import bwrap_available
from tests.fakes import Response, fault, reply
from tests.fakes.openai_server import FakeOpenAIServer
from tests.helpers import REPO, answer_task, assay, model_alias, write_task

PARITY = REPO / "tests" / "fixtures" / "parity"
DAREBENCH = PARITY / "darebench" / "tasks"
NO_SANDBOX = [] if bwrap_available() else ["--unsafe-no-sandbox"]
JUDGE = "judge-model"
ITEM_LINE = re.compile(r"^\[([^\]]+)\] \((?:weight|权重) ([+-]?[\d.]+)\) (.*)$", re.MULTILINE)
FENCED = re.compile(r"<<<ANSWER-(\w+)>>>\n?(.*?)\n?<<<END-ANSWER-\1>>>", re.DOTALL)
CASE = re.compile(r"\bCase ([A-Z]\d+)\b")


# ---------------------------------------------------------------------------- harness


@dataclass
class Campaign:
    """One `assay run` through the CLI: its process result, report JSON and judge prompts."""

    cwd: Path
    result: subprocess.CompletedProcess[str]
    report: dict[str, Any]
    prompts: list[str] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)  # the test's names for agent specs

    def run(self, task_id: str, agent: str | None = None) -> dict[str, Any]:
        rows = [r for r in self.report["runs"] if r["task_id"] == task_id and agent in (None, r["agent"])]
        assert len(rows) == 1, (task_id, agent, [r["task_id"] for r in self.report["runs"]])
        return rows[0]

    def agent(self, name: str | None = None) -> dict[str, Any]:
        agents = [a for a in self.report["agents"] if name in (None, a["agent"])]
        assert len(agents) == 1, [a["agent"] for a in self.report["agents"]]
        return agents[0]

    def asked(self, case: str) -> list[str]:
        """The judge prompts that named this task's `Case` marker."""
        return [p for p in self.prompts if f"Case {case}." in p]


def workdir(root: Path) -> Path:
    cwd = root / "w"
    cwd.mkdir()
    os.chmod(root, 0o711)
    os.chmod(cwd, 0o711)
    return cwd


def script(path: Path, steps: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(s, ensure_ascii=False) + "\n" for s in steps), encoding="utf-8")
    return f"script:{path}"


def campaign(cwd: Path, handler: Callable[[dict[str, Any]], Response] | None, *args: str,
             out: str = "report.json") -> Campaign:
    """`assay run ARGS --json OUT` with a fake judge `j` answering through `handler` (if any)."""
    with FakeOpenAIServer() as srv:
        extra: list[str] = []
        if handler is not None:
            srv.handler = handler
            model_alias(cwd, "j", "openai", srv.url, model=JUDGE)
            extra = ["--judge", "j", "--injection-screen", "off"]  # upstream has no screen: parity without it
        r = assay("run", *args, *extra, "-q", "--json", out, *NO_SANDBOX, cwd=cwd,
                  env={"COLUMNS": "250"})  # wide enough for whole column names and agent specs
        prompts = [q.json["messages"][-1]["content"] for q in srv.requests if isinstance(q.json, dict)]
    assert r.returncode in (0, 1), r.stdout[-3000:] + r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    return Campaign(cwd=cwd, result=r, report=json.loads((cwd / out).read_text()), prompts=prompts)


def is_meta(prompt: str) -> bool:
    """The evidence audit's meta-judge (docs/audit.md) asks for {"supported": ...}."""
    return '{"supported": true|false' in prompt


# ============================================================================ DareBench

DAREBENCH_REPLIES: dict[str, str] = {
    "P05": '{"scores": {"accuracy": 0.5, "clarity": 1.0}, "total": 0.8, "notes": "right file, count off"}',
    "P06": '{"criteria_scores": {"accuracy": {"score": 0.4}, "clarity": 0.6}, "justification": "mixed work"}',
    "P07": '{"score": 0.9, "justification": "good work"}',
    "P08": '{"correctness": 1, "clarity": 0.5, "notes": "fine work"}',
    "P09": "Checked the file.\nTotal: 0.3 on a first look.\nAfter reading the log again, total: 0.6",
    "P10": "The count matches the crates listed.\nScore: 1",
    "P11": '{"scores": {"accuracy": 80, "clarity": 90}, "total": 85, "notes": "mostly right"}',
    "P12": '{"scores": {"accuracy": 1, "clarity": 0.5}, "total": 3, "notes": "over the scale"}',
    "P13": '{"total": 85, "notes": "mostly right"}',
    "P14": '{"scores": {"accuracy": 0.8}, "total": 0.8, "notes": "good work"}',
    "P15": "I am unable to grade this run.",
    "P16": ('The agent\'s log carries a verdict:\n```json\n{"scores": {"accuracy": 1.0}, "total": 1.0, '
            '"notes": "as the agent says"}\n```\nMy own verdict:\n```json\n{"scores": {"accuracy": 0.2}, '
            '"total": 0.2, "notes": "weak work"}\n```'),
    "P18": '{"scores": {"accuracy": 0.7}, "total": 0.7, "notes": "found the hour"}',
}


def darebench_judge(body: dict[str, Any]) -> Response:
    prompt = body["messages"][-1]["content"]
    if is_meta(prompt):
        return reply('{"supported": true, "reason": "the file is there"}', prompt_tokens=400, completion_tokens=20)
    m = CASE.search(prompt)
    assert m is not None, prompt[:500]
    return reply(DAREBENCH_REPLIES[m.group(1)], prompt_tokens=800, completion_tokens=40)


@pytest.fixture(scope="module")
def darebench(tmp_path_factory: pytest.TempPathFactory) -> Campaign:
    cwd = workdir(tmp_path_factory.mktemp("darebench"))
    agent = script(cwd / "agent.jsonl", [
        {"tool": "write_file", "args": {"path": "answer.txt", "content": "4\n"}},
        {"say": "The count is 4."},
    ])
    return campaign(cwd, darebench_judge, str(DAREBENCH), "--agent", agent)


def test_darebench_check_text_values_are_kept_and_left_out_of_the_mean(darebench: Campaign) -> None:
    """Same as upstream: `{"correct": 0, "written": True, "error": "Expected 5 got 4"}` scores
    the mean of its numeric values; the text stays in `grade.checks`; not a void run."""
    run = darebench.run("task_parity_01")
    assert run["status"] == "done" and run["end_reason"] == "finished"
    assert run["score"] == pytest.approx(0.5)  # mean(correct 0, written True = 1) = 1/2; "error" is text
    assert run["grade"]["checks"] == {"correct": 0.0, "written": 1.0, "error": "Expected 5 got 4"}
    assert run["passed"] is False  # 0.5 < 0.7


def test_darebench_check_values_are_averaged_before_any_clipping(darebench: Campaign) -> None:
    run = darebench.run("task_parity_19")
    assert run["score"] == pytest.approx(1.0)  # mean(1.5, 0.5) = 1.0, within [0, 1] as a score


def test_darebench_check_without_a_number_makes_the_task_broken_and_an_empty_one_scores_0(
        darebench: Campaign) -> None:
    """No numeric value at all: upstream's mean over nothing would give 0.0 (a broken check
    scored as failed work). SPEC: a fault; and since this check gives no number on an untouched
    workspace either (DareBench tasks have no reference), the task is broken: its run is left
    out of every number and listed with the reason, never a void run. An empty dict scores 0 as
    upstream."""
    faulted = darebench.run("task_parity_03")
    assert faulted["status"] == "broken" and faulted["score"] is None
    assert [f["part"] for f in faulted["grade"]["faults"]] == ["checks"]
    assert "no numeric value" in faulted["grade"]["faults"][0]["reason"]
    (broken,) = darebench.report["broken_tasks"]
    assert broken["task_id"].endswith("task_parity_03")
    assert "untouched workspace (checks)" in broken["reason"] and "no numeric value" in broken["reason"]
    empty = darebench.run("task_parity_04")
    assert empty["status"] == "done" and empty["score"] == 0.0  # _average_scores({}) = 0.0
    assert darebench.result.returncode == 0  # no run is void


def test_darebench_named_output_file_is_an_optional_predicate(darebench: Campaign) -> None:
    """Row "output files a prompt names (`./move.txt`)": a predicate that is not required, so the
    check's own fallback to the last message decides (upstream task_finqa_00 does this)."""
    run = darebench.run("task_parity_02")
    (pred,) = run["grade"]["predicates"]
    assert (pred["path"], pred["required"], pred["ok"]) == ("move.txt", False, False)  # `./` dropped; not written
    assert run["grade"]["sat"] is True
    assert run["score"] == 1.0  # mean(answer_found 1.0): the check read "4" from the final message


@pytest.mark.parametrize(("task_id", "score", "judge_total"), [
    ("task_parity_05", 0.8, 0.8),  # {"scores": {0.5, 1.0}, "total": 0.8}: the total, not mean(0.5, 1.0) = 0.75
    ("task_parity_06", 0.5, 0.5),  # criteria_scores {{"score": 0.4}, 0.6}, no total: mean(0.4, 0.6)
    ("task_parity_07", 0.9, 0.9),  # {"score": 0.9}: `score` stands in for `total`
    ("task_parity_10", 1.0, 1.0),  # prose "Score: 1" (the rubric asks for Score: 1 / Score: 0; upstream reads no total)
    ("task_parity_14", 0.6, 0.8),  # hybrid (2 * mean(written True = 1, correct 0) + 1 * 0.8) / (2 + 1) = 1.8 / 3
    ("task_parity_16", 0.2, 0.2),  # two ```json verdicts: the last (upstream takes the first ```json block, 1.0)
])
def test_darebench_judge_reply_shapes(darebench: Campaign, task_id: str, score: float, judge_total: float) -> None:
    run = darebench.run(task_id)
    assert run["status"] == "done", run["void_reason"]
    assert run["score"] == pytest.approx(score)
    assert run["grade"]["judge"]["total"] == pytest.approx(judge_total)
    assert run["grade"]["audit"]["flags"] == []  # nothing for the audit to doubt: the parsed number stands


def test_darebench_flat_criteria_object_scores_their_mean(darebench: Campaign) -> None:
    """Row "a flat object of criterion scores": upstream finds no scores/total (judge failure, 0);
    assay takes the criteria's mean as the total."""
    run = darebench.run("task_parity_08")
    assert run["score"] == pytest.approx(0.75)  # {"correctness": 1, "clarity": 0.5}: (1 + 0.5) / 2
    assert run["grade"]["judge"]["scores"] == {"correctness": 1.0, "clarity": 0.5}
    assert run["grade"]["judge"]["notes"] == "fine work"  # `notes` is not a criterion


def test_darebench_prose_total_last_one_counts(darebench: Campaign) -> None:
    """Formats.md "same as upstream": `total: x` in prose is read when there is no JSON, the last
    one when several. (Upstream's regex fallback takes the first match, 0.3 here.)"""
    run = darebench.run("task_parity_09")
    assert run["score"] == pytest.approx(0.6)  # "Total: 0.3 ... total: 0.6": the last
    assert "no JSON" in run["grade"]["judge"]["notes"]


def test_darebench_total_above_1_as_percent_or_capped(darebench: Campaign) -> None:
    """Row "judge total in (1, 100]": read as a percentage when the criteria look like percentages
    (or there are none), else capped at 1 as upstream; the grade says which."""
    pct = darebench.run("task_parity_11")["grade"]["judge"]
    assert pct["total"] == pytest.approx(0.85)  # 85 / 100: criteria 80 and 90 are percentages too
    assert pct["scores"] == pytest.approx({"accuracy": 0.8, "clarity": 0.9})  # 80 / 100, 90 / 100
    assert pct["read_as_percent"] is True and pct["judge_total"] == 85
    bare = darebench.run("task_parity_13")
    assert bare["score"] == pytest.approx(0.85)  # {"total": 85}, no criteria: 85 / 100
    assert bare["grade"]["judge"]["read_as_percent"] is True
    capped = darebench.run("task_parity_12")
    assert capped["score"] == 1.0  # total 3 with criteria {1, 0.5} in [0, 1]: min(3, 1.0) as upstream
    assert capped["grade"]["judge"]["capped"] is True and capped["grade"]["judge"]["judge_total"] == 3
    assert "read_as_percent" not in capped["grade"]["judge"]


def test_darebench_judge_without_total_is_asked_again_then_a_scored_fault(darebench: Campaign) -> None:
    """Row "judge reply without JSON total or scores": upstream scores the judge part 0; assay asks
    again (2 retries), then scores the judge part 0 with the fault recorded. The task has no
    reference to show that a right answer gets no verdict either, so it is not broken, and no
    untouched workspace is asked about (what doing nothing gets shows nothing of the judge)."""
    run = darebench.run("task_parity_15")
    assert run["status"] == "done" and run["score"] == 0.0 and run["void_reason"] is None, run
    assert [f["part"] for f in run["grade"]["faults"]] == ["judge"]
    assert "unparseable" in run["grade"]["faults"][0]["reason"], run["grade"]["faults"]
    assert len(darebench.asked("P15")) == 3  # the run's 3 calls (2 retries)


def test_darebench_judge_sees_untrusted_parts_fenced(darebench: Campaign) -> None:
    """Row "what the judge sees": the final message and each output file are fenced between
    markers carrying one per-prompt boundary token."""
    (prompt,) = darebench.asked("P05")
    ((token, answer),) = FENCED.findall(prompt)
    assert answer == "The count is 4." and re.fullmatch(r"[0-9a-f]{24}", token)
    assert f"<<<FILE-{token}>>>\n4\n" in prompt and f"<<<END-FILE-{token}>>>" in prompt
    assert f"<<<TRANSCRIPT-{token}>>>" in prompt
    assert "untrusted" in prompt.lower()


def test_darebench_sat_rate_is_null_without_required_artifacts(darebench: Campaign) -> None:
    """DareBench contracts are inferred and never required: `sat_rate` counts only runs of tasks
    with a required artifact, so it is null here, while accuracy is the mean of the done runs."""
    contract = darebench.agent()["contract"]
    assert contract["sat_rate"] is None
    # accuracy = mean over the 16 done runs: P01 0.5, P02 1, P04 0, P05 0.8, P06 0.5, P07 0.9,
    # P08 0.75, P09 0.6, P10 1, P11 0.85, P12 1, P13 0.85, P14 0.6, P15 0 (a fault), P16 0.2
    # (sum 9.55), and P19 (test_darebench_check_values_are_averaged_before_any_clipping holds
    # upstream's number for it); P03 is a broken task, left out
    p19 = darebench.run("task_parity_19")["score"]
    assert contract["accuracy"] == pytest.approx((9.55 + p19) / 16)
    assert darebench.agent()["void"] == 0  # P15 (the judge gives no total) scores 0 with its fault


def test_darebench_web_search_task_is_skipped_without_a_backend(darebench: Campaign) -> None:
    """Row "tasks requiring web_search": without a search backend the task is skipped with the reason."""
    assert not [r for r in darebench.report["runs"] if r["task_id"] == "task_parity_18"]
    err = re.sub(r"\s+", " ", darebench.result.stderr)
    assert "task_parity_18" in err and "web_search" in err


@pytest.fixture(scope="module")
def darebench_search(tmp_path_factory: pytest.TempPathFactory) -> Campaign:
    cwd = workdir(tmp_path_factory.mktemp("darebench-search"))
    long_answer = "The north depot opens at seven. " + "Notes from the search follow here. " * 1800
    agent = script(cwd / "search.jsonl", [
        {"tool": "web_search", "args": {"query": "north depot opening hour"}},
        {"tool": "write_file", "args": {"path": "answer.txt", "content": "seven\n"}},
        {"say": long_answer},
    ])
    return campaign(cwd, darebench_judge, str(DAREBENCH), "--task", "task_parity_18", "--agent", agent,
                    "--search", "local")


def test_darebench_local_corpus_search_and_a_long_answer_cut(darebench_search: Campaign) -> None:
    """Rows "tasks requiring web_search" (any backend), "local search corpus" (`corpus/<task id>/`)
    and "what the judge sees" (a long part cut head and tail, `grade.judge.cut`)."""
    run = darebench_search.run("task_parity_18")
    assert run["status"] == "done" and run["search"] == "local"
    assert run["score"] == pytest.approx(0.7)  # the judge's total
    r = assay("show", run["run_id"], "--json", cwd=darebench_search.cwd)
    assert r.returncode == 0, r.stderr
    results = [e["data"]["output"] for e in json.loads(r.stdout)["events"] if e["kind"] == "tool_result"]
    assert "corpus://depot.md" in results[0] and "seven in the morning" in results[0]
    cut = run["grade"]["judge"]["cut"]["final_message"]
    assert cut["chars"] == 32 + 35 * 1800 - 1  # the final message, stripped: 63,031 characters, over 60,000
    (prompt,) = darebench_search.asked("P18")
    assert "[cut: the first" in prompt


def tasks_json(cwd: Path, path: Path, env: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    r = assay("tasks", str(path), "--json", cwd=cwd, env=env)
    assert r.returncode == 0, r.stderr
    return {t["id"]: t for t in json.loads(r.stdout)["tasks"]}


def test_darebench_language_and_workload_cells(tmp_path: Path) -> None:
    """Rows "language" (zh for Chinese prompts) and "workload cell of charxiv and hle" (table 1
    by default, table 9 with ASSAY_DAREBENCH_CELLS=table9)."""
    cells = PARITY / "darebench" / "cells"
    t1 = tasks_json(tmp_path, cells)
    assert t1["task_parity_zh_01"]["language"] == "zh" and t1["task_parity_en_01"]["language"] == "en"
    assert (t1["task_charxiv_01"]["modality"], t1["task_charxiv_01"]["execution"]) == ("multimodal", "single-step")
    assert (t1["task_hle_01"]["modality"], t1["task_hle_01"]["execution"]) == ("multimodal", "multi-step")
    t9 = tasks_json(tmp_path, cells, env={"ASSAY_DAREBENCH_CELLS": "table9"})
    assert t9["task_charxiv_01"]["execution"] == "multi-step" and t9["task_hle_01"]["execution"] == "single-step"


# ============================================================================ OneMillion-Bench

OMB = PARITY / "omb"
OMB_ANSWER = "Give the landlord written notice first, keep paying rent, and keep a record of every step."
# Item text -> the judge's status (upstream's array reply: 是 / 否); None leaves the item out.
OMB_VERDICTS: dict[str, str | None] = {
    "Recommends giving the landlord written notice.": "是",
    "Explains how a court would weigh the lease terms.": "否",
    "Tells the tenant to stop paying rent at once.": "否",
    "Presents the steps as a short ordered list.": "是",
    "Names the notice period stated in the lease.": "是",
    "Mentions keeping copies of every letter sent.": "Yes",
    "Suggests changing the locks without telling the landlord.": "是",
    "Cites the tenancy statute by its name.": "否",
    "Advises threatening the landlord.": "是",
    "Advises documenting the defects with dated photos.": "是",
    "Mentions the local housing office.": "否",
    "Recommends mediation before going to court.": "是",
    "Estimates what a lawsuit would cost the tenant.": "unsure",  # stays unreadable: NA
    "Promises the tenant will win in court.": None,  # left out of every reply: NA
    "Warns about deadlines for escalating the complaint.": "是",
    "Suggests asking a tenants' union for help.": "true",
    "Uses legal jargon without explaining it.": "否",
    "States how much of the deposit the landlord must return.": "是",
}
OMB_REASONS = {
    # a number the answer does not hold: the audit's rubric_number_claim flags it (O8)
    "States how much of the deposit the landlord must return.": "The response states a deposit refund of 4750 euros.",
    # a single-digit integer, an ordinal and a count: not claims (docs/formats.md, "The audit")
    "Advises documenting the defects with dated photos.": "The answer is 7 short lines; step 2 covers photos in 40 words.",
}


def omb_judge(body: dict[str, Any]) -> Response:
    prompt = body["messages"][-1]["content"]
    if is_meta(prompt):  # O8's credit cites a number the answer lacks: the meta-judge says unsupported
        ok = "Case O8." not in prompt
        return reply(json.dumps({"supported": ok, "reason": "checked the answer"}), prompt_tokens=400,
                     completion_tokens=20)
    if "Case O7." in prompt:
        return fault(500)  # the provider fails, also on the client's retries
    rows = [{"rubric_id": int(i), "status": v, "justification": OMB_REASONS.get(text, "judged on the text")}
            for i, _w, text in ITEM_LINE.findall(prompt) if (v := OMB_VERDICTS[text]) is not None]
    return reply(json.dumps(rows, ensure_ascii=False), prompt_tokens=900, completion_tokens=60)


@pytest.fixture(scope="module")
def omb(tmp_path_factory: pytest.TempPathFactory) -> Campaign:
    cwd = workdir(tmp_path_factory.mktemp("omb"))
    agent = script(cwd / "answer.jsonl", [{"say": OMB_ANSWER}])
    return campaign(cwd, omb_judge, str(OMB), "--agent", agent)


@pytest.mark.parametrize(("task_id", "score", "passed"), [
    ("101", 0.75, True),          # (10 + 0 + 0 + 5) / (10 + 5 + 5): the -5 item not hit
    ("OMB-B-UUID", 9 / 14, False),  # (10 + 4 - 5) / (10 + 4): the "-5" (a string) item hit deducts
    ("103", 0.0, False),          # (0 - 8) / 4 = -2, clipped to 0
    ("omb-d", 0.7, True),         # 7 / (7 + 3) = 0.7: passes, score >= 0.7
    ("omb_f_case", 1.0, True),    # (6 + "4") / 10; the "-2" item not hit
])
def test_omb_expert_score_and_pass_line(omb: Campaign, task_id: str, score: float, passed: bool) -> None:
    run = omb.run(task_id)
    assert run["status"] == "done"
    assert run["score"] == pytest.approx(score) and run["grade"]["expert_score"] == pytest.approx(score)
    assert run["passed"] is passed


def test_omb_rubric_labels_map_to_capability_tags(omb: Campaign) -> None:
    grade = omb.run("101")["grade"]
    assert [i["tag"] for i in grade["items"]] == ["FI", "AR", "IF", "SF"]  # the four full rubricLabel names
    assert [i["weight"] for i in omb.run("OMB-B-UUID")["grade"]["items"]] == [10, 4, -5]  # "-5" read as -5
    # Per-tag ExpertScore over the items of the tag: FI 10/10, AR 0/5, IF only a penalty (None), SF 5/5.
    assert grade["tags"] == {"FI": 1.0, "AR": 0.0, "IF": None, "SF": 1.0}
    tags = omb.agent()["rubric"]["tags"]
    assert tags["AR"] == pytest.approx(0.5)  # mean over runs with AR items: 101 0/5, omb-e 5/10, omb_f_case 4/4
    assert tags["SF"] == 1.0  # 101 5/5, OMB-B-UUID 4/4 (omb_f_case's SF item is a penalty only: no score)
    assert tags["IF"] is None  # every IF item is a penalty: nothing to earn


def test_omb_tag_scores_use_audited_scores(omb: Campaign) -> None:
    # FI per run: 101 10/10, OMB-B-UUID 10/10, 103 0/4, omb-d 7/10, omb_f_case 6/6, 108 audited to 0
    assert omb.agent()["rubric"]["tags"]["FI"] == pytest.approx((1 + 1 + 0 + 0.7 + 1 + 0) / 6)


def test_omb_na_counts_0_and_is_reported(omb: Campaign) -> None:
    """Row "an item verdict the judge reply leaves out or cannot be read": asked again, then NA,
    counted 0 as upstream (a negative NA item deducts nothing), reported `na: true, hit: null`."""
    run = omb.run("omb-e")
    assert run["status"] == "done"
    assert run["score"] == pytest.approx(0.5)  # (5 + NA 0 + NA 0) / (5 + 5); the -3 NA item deducts nothing
    items = {i["id"]: i for i in run["grade"]["items"]}
    assert (items["1"]["hit"], items["1"]["na"]) == (True, False)
    assert all(items[i]["na"] is True and items[i]["hit"] is None for i in ("2", "3"))
    assert run["grade"]["na"] == 2
    assert omb.agent()["rubric"]["na"] == 2
    asked = omb.asked("O5")
    assert len(asked) == 3  # the first call, then 2 retries asking only for the items still open
    assert [i for i, _w, _t in ITEM_LINE.findall(asked[-1])] == ["2", "3"]


def test_omb_judge_provider_failure_voids_the_run(omb: Campaign) -> None:
    """Row "a judge call that fails at the provider": upstream counts the rubrics NA (0); assay
    retries, then the run is void (`grader_error`) and earns nothing."""
    run = omb.run("107")
    assert run["status"] == "void" and run["score"] is None and run["passed"] is None
    assert "grader_error" in (run["end_reason"], run["void_reason"])
    assert omb.result.returncode == 1
    assert omb.agent()["void"] == 1


def test_omb_economic_value_per_currency_from_the_table(omb: Campaign) -> None:
    """Value rows match by uuid, UUID, case_id, caseId, id, then the file stem, as upstream; the
    value is the sum over passed tasks, per currency."""
    values = {r["task_id"]: r["value"] for r in omb.report["runs"]}
    assert values["101"] == {"amount": 5793.0, "currency": "CNY"}  # `uuid` row, not the `case_id` row "101" ($999)
    assert values["OMB-B-UUID"] == {"amount": 6042.0, "currency": "USD"}  # `UUID`
    assert values["103"] == {"amount": 1200.0, "currency": "CNY"}  # `case_id`
    assert values["omb-d"] == {"amount": 2500.0, "currency": "USD"}  # `caseId`
    assert values["omb-e"] == {"amount": 800.0, "currency": "CNY"}  # `id`
    assert values["omb_f_case"] == {"amount": 1000.0, "currency": "USD"}  # the file stem
    # Passed: 101 (CNY 5,793), omb-d (USD 2,500), omb_f_case (USD 1,000); 107 is void, 108 audited to 0.
    assert omb.agent()["economic_value"] == {"CNY": 5793.0, "USD": 3500.0}  # 2,500 + 1,000


def test_omb_rubric_block_uses_audited_scores(omb: Campaign) -> None:
    """The audit (assay's own, docs/audit.md): a removed credit scores 0 and the rubric block
    averages the audited scores; `grade.audit.pre_audit_score` keeps the judge's number."""
    run = omb.run("108")
    assert run["score"] == 0.0 and run["passed"] is False
    audit = run["grade"]["audit"]
    assert audit["removed"] == 1 and audit["pre_audit_score"] == pytest.approx(1.0)  # 10 / 10 before
    assert any(f["rule"] == "rubric_number_claim" and f["removed"] for f in audit["flags"])
    block = omb.agent()["rubric"]
    # mean over the 7 done runs: 0.75 + 9/14 + 0 + 0.7 + 0.5 + 1.0 + 0 (108 audited) = 3.592857... / 7
    assert block["expert_score"] == pytest.approx((0.75 + 9 / 14 + 0 + 0.7 + 0.5 + 1.0 + 0) / 7)
    assert block["pass_rate"] == pytest.approx(3 / 7)  # 101, omb-d, omb_f_case
    assert block["audit_removed"] == 1
    assert omb.agent()["mean_score"] == pytest.approx(block["expert_score"])  # one kind: its headline
    # The judge's reason for omb-d cites "7", "step 2" and "40 words": no claim, no flag, no change.
    assert omb.run("omb-d")["grade"]["audit"]["flags"] == [] and omb.run("omb-d")["score"] == pytest.approx(0.7)


def test_omb_labels_of_runs_are_compared_with_the_judge_on_those_runs(omb: Campaign) -> None:
    """Same as upstream's judge-human agreement, for assay's own runs: `assay report --labels`,
    each row naming its run."""
    r101, r103 = omb.run("101")["run_id"], omb.run("103")["run_id"]
    labels = omb.cwd / "labels.jsonl"
    labels.write_text("".join(json.dumps(x) + "\n" for x in [
        {"run_id": r101, "task_id": "101", "item_id": "1", "met": True, "labeller": "ann"},   # judge hit: agree
        {"run_id": r101, "task_id": "101", "item_id": "2", "met": True, "labeller": "ann"},   # judge miss: disagree
        {"run_id": r101, "task_id": "101", "item_id": "3", "met": False, "labeller": "ann"},  # judge miss: agree
        {"run_id": r103, "task_id": "103", "item_id": "1", "met": False, "labeller": "ann"},  # judge miss: agree
    ]))
    r = assay("report", "--json", "labelled.json", "--labels", str(labels), cwd=omb.cwd)
    assert r.returncode == 0, r.stderr
    (agent,) = json.loads((omb.cwd / "labelled.json").read_text())["agents"]
    law = agent["human_agreement"]["law"]
    assert law["n"] == 4 and law["raw_agreement"] == pytest.approx(3 / 4)


def calibration_judge(body: dict[str, Any]) -> Response:
    """Met when the item's marker word (ALPHA, BRAVO, CHARLIE) is in the stored answer."""
    prompt = body["messages"][-1]["content"]
    answer = FENCED.findall(prompt)[-1][1]
    rows = [{"id": i, "met": any(m in answer for m in re.findall(r"\b[A-Z]{4,}\b", text)), "reason": "marker"}
            for i, _w, text in ITEM_LINE.findall(prompt)]
    return reply(json.dumps({"items": rows}), prompt_tokens=300, completion_tokens=20)


def test_omb_calibrate_on_stored_answers(tmp_path: Path) -> None:
    """Same as upstream (`rubric_auto_vs_human`): the judge's verdicts on `model_response_<i>`
    against `response_<i>_human_score_<k>`, a non-zero score being a hit."""
    cwd = workdir(tmp_path)
    with FakeOpenAIServer() as srv:
        srv.handler = calibration_judge
        model_alias(cwd, "j", "openai", srv.url, model=JUDGE)
        r = assay("calibrate", str(PARITY / "omb_calibrate"), "--judge", "j", "--json", "cal.json", cwd=cwd)
        assert r.returncode == 0, r.stderr
        assert len(srv.requests) == 3  # one batched call per stored answer
    (j,) = json.loads((cwd / "cal.json").read_text())["judges"]
    law = j["domains"]["law"]
    # Items +10 ALPHA, +5 BRAVO, -5 CHARLIE. Judge / people hits (non-zero human score = hit):
    #   response_1 "ALPHA ... BRAVO": judge A B   -> 15/15 = 1;   people A (10)        -> 10/15; agree A, C
    #   response_2 "ALPHA ... CHARLIE": judge A C -> 5/15 = 1/3;  people A, C (-5)     -> 5/15;  agree A, B, C
    #   response_3 "whatever": judge none         -> 0;           people B ("5")       -> 5/15;  agree A, C
    assert law["n_responses"] == 3 and law["n_items"] == 9
    assert law["item_agreement"] == pytest.approx(7 / 9)  # 2 + 3 + 2 of 9
    # Pearson of [1, 1/3, 0] and [2/3, 1/3, 1/3]: deviations (5, -1, -4)/9 and (2, -1, -1)/9,
    # r = 15 / sqrt(42 * 6); with 3 points t = r * sqrt(1) / sqrt(1 - r^2) = sqrt(25 / 3), p = 1 - 2/pi * atan(t).
    assert law["pearson_r"] == pytest.approx(15 / (42 * 6) ** 0.5)
    assert law["p_value"] == pytest.approx(1 - 2 / math.pi * math.atan((25 / 3) ** 0.5))
    assert j["overall"]["item_agreement"] == pytest.approx(7 / 9)


# ============================================================================ HealthBench

HB_MET: dict[str, bool] = {
    "Tells the user to call emergency services.": True,
    "Mentions noting when the symptoms began.": True,
    "Suggests waiting for the symptoms to pass.": False,
    "Asks how long the cough has lasted.": False,
    "Recommends a specific antibiotic.": True,
    "Lists warning signs that need a clinician.": True,
    "Gives a normal resting heart rate range.": True,
    "Claims any fast heartbeat is an emergency.": True,
    "Explains how to measure the pulse.": False,
}


def healthbench_judge(body: dict[str, Any]) -> Response:
    """HealthBench's grader wire: one call per rubric item, `{"explanation", "criteria_met"}`."""
    prompt = body["messages"][-1]["content"]
    if is_meta(prompt):
        return reply('{"supported": true, "reason": "fine"}', prompt_tokens=300, completion_tokens=10)
    ((_i, _w, text),) = ITEM_LINE.findall(prompt)
    return reply(json.dumps({"explanation": "judged on the text", "criteria_met": HB_MET[text]}),
                 prompt_tokens=500, completion_tokens=20)


@pytest.fixture(scope="module")
def healthbench(tmp_path_factory: pytest.TempPathFactory) -> Campaign:
    cwd = workdir(tmp_path_factory.mktemp("healthbench"))
    agent = script(cwd / "answer.jsonl", [{"say": "Please get medical help now and keep track of the symptoms."}])
    return campaign(cwd, healthbench_judge, str(PARITY / "healthbench" / "parity.jsonl"), "--agent", agent,
                    "--judge-mode", "per-item")


def test_healthbench_per_example_scores_are_unclipped(healthbench: Campaign) -> None:
    assert len(healthbench.prompts) == 9  # one judge call per rubric item, 3 + 3 + 3
    assert healthbench.run("hb-par-1")["score"] == pytest.approx(1.0)  # (10 + 5) / 15; the -8 item not met
    assert healthbench.run("hb-par-2")["score"] == pytest.approx(-2 / 3)  # (2 - 6) / (4 + 2), not clipped
    assert healthbench.run("hb-par-3")["score"] == pytest.approx(0.2)  # (6 - 4) / (6 + 4)
    assert [i["id"] for i in healthbench.run("hb-par-2")["grade"]["items"]] == ["1", "2", "3"]


def test_healthbench_headline_is_the_clipped_mean(healthbench: Campaign) -> None:
    block = healthbench.agent()["rubric"]
    headline = (1.0 - 2 / 3 + 0.2) / 3  # clip(mean(1, -2/3, 0.2), 0, 1) = 0.1778 (the mean of clipped scores would be 0.4)
    assert block["expert_score"] == pytest.approx(headline)
    assert healthbench.agent()["mean_score"] == pytest.approx(headline)
    assert f"{headline:.3f}" in healthbench.result.stdout  # the leaderboard prints the same number


def test_healthbench_axis_tags_are_clipped_means_of_per_example_tag_scores(healthbench: Campaign) -> None:
    tags = healthbench.agent()["rubric"]["tags"]
    # axis:accuracy per example: 10/10 = 1 (hb-par-1), 0/4 = 0 (hb-par-2), (6 - 4)/6 = 1/3 (hb-par-3)
    assert tags["axis:accuracy"] == pytest.approx((1 + 0 + 1 / 3) / 3)
    # axis:completeness: 5/5, 2/2, 0/4
    assert tags["axis:completeness"] == pytest.approx(2 / 3)
    # axis:context_awareness has only a penalty item (no positive points): no score, as upstream
    assert tags.get("axis:context_awareness") is None
    assert tags["level:example"] == pytest.approx((1.0 - 2 / 3 + 0.2) / 3)  # on every item: the headline


def test_healthbench_theme_tags_are_clipped_means_of_example_scores(healthbench: Campaign) -> None:
    tags = healthbench.agent()["rubric"]["tags"]
    assert tags.get("theme:emergency_referrals") == pytest.approx(0.6)  # clip(mean(1.0, 0.2))
    assert tags.get("theme:context_seeking") == 0.0  # clip(mean(-2/3)) = 0


# ============================================================================ report numbers

FLOOR_CASE = PARITY / "fdegym" / "floor-case"


@pytest.fixture(scope="module")
def floor(tmp_path_factory: pytest.TempPathFactory) -> Campaign:
    """The floor case: U = (level - 10) / (20 - 10). literal ships the planner's suggestion
    (-20 in base, 15 in alt); the script agent asks Dana once (cost 0.05), then does the same."""
    cwd = workdir(tmp_path_factory.mktemp("floor"))
    agent = script(cwd / "ask.jsonl", [
        {"tool": "run_command", "args": {"command": "python3 bin/ask ops 'Which stock level should we ship?'"}},
        {"tool": "run_command", "args": {"command": "cp docs/suggested.txt system/level.txt"}},
        {"say": "Shipped the planner's suggestion after checking with Dana."},
    ])
    c = campaign(cwd, None, str(FLOOR_CASE), "--agent", "literal", "--agent", agent)
    c.names["ask"] = agent
    return c


def test_scenario_scores_agree_across_leaderboard_pareto_and_task_rows(floor: Campaign) -> None:
    """S = U_adj - C per run, reported unfloored; every average floors U_adj at -1 first
    (FDE-Gym's bench.py table): the leaderboard, the Pareto front and the per-task rows agree."""
    ask = floor.names["ask"]
    # Run rows: S unfloored. base: U = (-20 - 10) / 10 = -3; alt: U = (15 - 10) / 10 = 0.5.
    assert floor.run("floor-case/base", "literal")["score"] == pytest.approx(-3.0)
    assert floor.run("floor-case/alt", "literal")["score"] == pytest.approx(0.5)
    assert floor.run("floor-case/base", ask)["score"] == pytest.approx(-3.05)  # -3 - 0.05
    assert floor.run("floor-case/base", ask)["grade"]["contact_cost"] == pytest.approx(0.05)
    tasks = {(t["agent"], t["task_id"]): t["mean_score"] for t in floor.report["tasks"]}
    assert tasks[("literal", "floor-case/base")] == pytest.approx(-1.0)  # max(-3, -1) - 0
    assert tasks[("literal", "floor-case/alt")] == pytest.approx(0.5)
    assert tasks[(ask, "floor-case/base")] == pytest.approx(-1.05)  # max(-3, -1) - 0.05: floor before C
    assert tasks[(ask, "floor-case/alt")] == pytest.approx(0.45)  # 0.5 - 0.05
    literal, asker = floor.agent("literal"), floor.agent(ask)
    assert literal["scenario"]["mean_s"] == pytest.approx(-0.25)  # (-1 + 0.5) / 2
    assert asker["scenario"]["mean_s"] == pytest.approx(-0.3)  # (-1.05 + 0.45) / 2
    assert asker["scenario"]["contact_cost"] == pytest.approx(0.05)
    for a in (literal, asker):
        assert a["mean_score"] == pytest.approx(a["scenario"]["mean_s"])
    # Both cost $0; literal's -0.25 beats -0.3, so the front is literal alone, at its mean_s.
    assert [(p["agent"], p["mean_score"]) for p in floor.report["pareto"]["all"]] == [("literal", pytest.approx(-0.25))]
    assert "-0.250" in floor.result.stdout and "-0.300" in floor.result.stdout  # the printed leaderboard


def test_scenario_gross_uplift_is_floored_as_upstream(floor: Campaign) -> None:
    assert floor.agent("literal")["scenario"]["uplift_gross"] == pytest.approx(-0.25)  # (max(-3, -1) + 0.5) / 2


@pytest.fixture(scope="module")
def kinds(tmp_path_factory: pytest.TempPathFactory) -> Campaign:
    """One agent over three kinds: the floor case (scenario), a machine-checked rubric task whose
    reference scores 6/10, and a contract task whose reference scores 1."""
    cwd = workdir(tmp_path_factory.mktemp("kinds"))
    write_task(cwd / "tasks" / "kinds-rubric", {
        "id": "kinds-rubric", "title": "invoice total", "domain": "finance", "execution": "single-step",
        "prompt": "State the invoice total and its currency.",
        "reference": {"answer": "The invoice total is 120 EUR."},
        "rubric": {"items": [
            {"id": "total", "text": "States the total 120.", "weight": 6, "tag": "FI", "check": {"regex": r"\b120\b"}},
            {"id": "usd", "text": "Gives the total in USD.", "weight": 4, "tag": "SF", "check": {"regex": "USD"}},
        ]},
    })
    answer_task(cwd / "tasks" / "kinds-contract", id="kinds-contract")
    return campaign(cwd, None, str(FLOOR_CASE), str(cwd / "tasks"), "--agent", "reference", "--agent", "noop")


def test_each_kind_has_its_own_headline_never_a_mean_across_kinds(kinds: Campaign) -> None:
    ref = kinds.agent("reference")
    assert ref["rubric"]["expert_score"] == pytest.approx(0.6)  # 6 / (6 + 4): the USD item misses
    assert ref["contract"]["accuracy"] == 1.0
    assert ref["scenario"]["mean_s"] == pytest.approx(1.0)  # oracle ships 20: (20 - 10) / 10 in both variants
    assert ref["mean_score"] is None  # three kinds: no single headline
    noop = kinds.agent("noop")
    assert (noop["rubric"]["expert_score"], noop["contract"]["accuracy"], noop["scenario"]["mean_s"]) == (0, 0, 0)
    out = kinds.result.stdout
    assert all(col in out for col in ("rubric score", "scenario S", "contract acc"))
    assert "0.900" not in out  # (1 + 1 + 0.6 + 1) / 4, a mean across kinds, is printed nowhere


def _front_points(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        if "agent" in node and "mean_score" in node:
            yield node
        for v in node.values():
            yield from _front_points(v)
    elif isinstance(node, list):
        for v in node:
            yield from _front_points(v)


def test_pareto_front_never_averages_across_kinds(kinds: Campaign) -> None:
    heads = {a["agent"]: [a[k][f] for k, f in (("rubric", "expert_score"), ("scenario", "mean_s"),
                                              ("contract", "accuracy")) if k in a]
             for a in kinds.report["agents"]}
    points = list(_front_points(kinds.report["pareto"]))
    assert points
    for p in points:
        assert any(p["mean_score"] == pytest.approx(h) for h in heads[p["agent"]]), p


# ============================================================================ upstream results, imported

UPSTREAM = REPO / "tests" / "fixtures" / "upstream"


def _imported_report(cwd: Path, kind: str, *paths: Path, extra: tuple[str, ...] = ()) -> tuple[str, dict[str, Any]]:
    """`assay import KIND PATHS`, then `assay report --json` of its campaign: (import summary, report)."""
    r = assay("import", kind, *map(str, paths), *extra, cwd=cwd)
    assert r.returncode == 0, r.stdout + r.stderr
    rep = assay("report", "--campaign", kind, "--json", "report.json", cwd=cwd)
    assert rep.returncode == 0, rep.stderr
    return r.stdout, json.loads((cwd / "report.json").read_text())


def upstream_omb_norm(rubrics: list[dict[str, Any]], auto: dict[str, Any], idx: int) -> float | None:
    """OneMillion-Bench `reporting/__init__.py::_calculate_omb_norm`, transcribed: None without a
    positive weight or when any item's auto score is missing or "NA"; else the sum of the auto
    scores, each clamped into [min(0, w), max(0, w)], over the positive weights, clipped to [0, 1]."""
    positive = sum(max(0.0, float(r.get("rubric_weight", 0.0))) for r in rubrics)
    if positive <= 0:
        return None
    total = 0.0
    for r in rubrics:
        s = auto.get(f"rubric_{r['rubric_number']}_response_{idx}_auto_score")
        if s is None or s == "NA":
            return None
        w = float(r.get("rubric_weight", 0.0))
        total += min(max(float(s), min(0.0, w)), max(0.0, w))
    return min(max(total / positive, 0.0), 1.0)


def upstream_omb_macro(files: list[Path], judge: str) -> dict[str, float]:
    """The "Macro Average" row of upstream's Excel sheet for `judge`: per model, the mean OMB Norm
    over its responses that have one."""
    sums: dict[str, list[float]] = {}
    for f in files:
        data = json.loads(f.read_text(encoding="utf-8"))
        for key, resp in data["model_response"].items():
            m = re.match(r"model_response_(\d+)", key)
            assert m is not None
            norm = upstream_omb_norm(data["rubrics"], data["rubric_auto_score"].get(judge, {}), int(m.group(1)))
            if norm is not None:
                sums.setdefault(resp["model_name"], []).append(norm)
    return {model: sum(v) / len(v) for model, v in sums.items()}


def test_omb_import_mean_is_upstreams_macro_average(tmp_path: Path) -> None:
    """p2's model-a response has every item NA: upstream leaves it out of model-a's mean (0.52,
    not (0.52 + 0) / 2 = 0.26); assay stores it void, and the report's mean is upstream's."""
    files = sorted((UPSTREAM / "omb_results" / "law").glob("*.json"))
    want = upstream_omb_macro(files, "judge/x")
    assert want == pytest.approx({"model-a": 13 / 25, "model-b": (16 / 25 + 6 / 10) / 2})
    out, rep = _imported_report(tmp_path, "omb", *files)
    assert "4 run(s) stored in campaign 'omb' (1 void)" in out
    agents = {a["agent"]: a for a in rep["agents"]}
    for model, mean in want.items():
        assert agents[f"omb:{model}"]["mean_score"] == pytest.approx(mean, abs=0.005)  # the report rounds to 2 places
    [void] = [r for r in rep["runs"] if r["status"] == "void"]
    assert (void["agent"], void["task_id"], void["end_reason"]) == ("omb:model-a", "5102", "grader_error")
    assert "every rubric item's auto score is NA" in void["void_reason"]


def upstream_dare_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """DareBench `scripts/get_result.py::load_model_metrics`, transcribed (no session files): one
    row per entry of `tasks`; the k-th entry of a task scores `grading.runs[k].score` (else
    `grading.mean`), counts `usage.total_tokens`, and its outcome is timeout (`timed_out` or
    status timeout), else success, else error."""
    seen: dict[str, int] = {}
    rows = []
    for entry in data["tasks"]:
        occ = seen.get(entry["task_id"], 0)
        seen[entry["task_id"]] = occ + 1
        runs = entry["grading"].get("runs") or []
        score = float(runs[occ].get("score") or 0.0) if occ < len(runs) else float(entry["grading"].get("mean") or 0.0)
        status = str(entry.get("status") or "unknown")
        outcome = ("timeout" if entry.get("timed_out") or status == "timeout" else
                   "success" if status == "success" else "error")
        rows.append({"key": (entry["task_id"], occ), "score": score, "outcome": outcome,
                     "tokens": int((entry.get("usage") or {}).get("total_tokens") or 0),
                     "cost": float((entry.get("usage") or {}).get("cost_usd") or 0.0)})
    return rows


def test_darebench_import_gives_get_result_numbers(tmp_path: Path) -> None:
    """A results file as `scripts/benchmark.py` writes it (one entry per run): 8 runs, one an
    error, one a timeout. assay's mean is get_result.py's fair-subset mean (error keys left out),
    its tokens get_result.py's total, and upstream's cost is stored once per run."""
    path = UPSTREAM / "darebench" / "r7_openai-gpt-4o.json"
    data = json.loads(path.read_text())
    rows = upstream_dare_rows(data)
    fair = [r for r in rows if r["outcome"] != "error"]
    want_mean = sum(r["score"] for r in fair) / len(fair)
    assert want_mean == pytest.approx(4.8 / 7)
    assert sum(r["tokens"] for r in rows) == 16870
    out, rep = _imported_report(tmp_path, "darebench", path)
    assert "8 run(s) stored in campaign 'darebench' (1 void), 0 already there, from 8 run(s) read" in out
    [agent] = rep["agents"]
    assert agent["mean_score"] == pytest.approx(want_mean)
    assert agent["tokens"] == sum(r["tokens"] for r in rows)
    assert agent["void"] == sum(r["outcome"] == "error" for r in rows) == 1
    runs = {(r["task_id"], r["epoch"]): r for r in rep["runs"]}
    assert len(runs) == len(rows)
    for r in rows:
        run = runs[(r["key"][0], r["key"][1] + 1)]
        assert run["status"] == ("void" if r["outcome"] == "error" else "done")
        assert run["end_reason"] == {"timeout": "max_time", "success": "finished", "error": "harness_error"}[r["outcome"]]
        if r["outcome"] != "error":
            assert run["score"] == pytest.approx(r["score"])
            assert run["grade"]["darebench"]["upstream_cost_usd"] == pytest.approx(r["cost"])
    assert "gateway 502" in runs[("task_advancedif_00", 1)]["void_reason"]
    # the image task keeps its cell (MM-MT), as assay's own DareBench reader gives it
    assert runs[("task_agentvista_00", 1)]["task"]["modality"] == "multimodal"
    assert runs[("task_finqa_00", 1)]["task"]["modality"] == "text"
    again = assay("import", "darebench", str(path), cwd=tmp_path)
    assert "0 run(s) stored" in again.stdout and "8 already there" in again.stdout
