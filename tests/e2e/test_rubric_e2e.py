"""The rubric protocol end to end through the real CLI: starter tasks, the judge over the wire,
NA, epochs (pass@k), local-corpus search and its delta, HealthBench and OneMillion-Bench files,
judge-human agreement. Model providers are the fake servers on 127.0.0.1."""

from __future__ import annotations

import itertools
import json
import os
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from assay.env.bwrap import bwrap_available
from tests.fakes import reply
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.screen import is_screen_prompt
from tests.helpers import REPO, assay, model_alias, report, write_task

RUBRIC = REPO / "suites" / "starter" / "rubric"
FIXTURES = REPO / "tests" / "fixtures"
ITEM_LINE = re.compile(r"^\[([^\]]+)\] \((?:weight|权重) ([+-]?[\d.]+)\) (.*)$", re.MULTILINE)
JUDGE_MODEL = "judge-model"
NO_SANDBOX = [] if bwrap_available() else ["--unsafe-no-sandbox"]


def workdir(tmp_path: Path, name: str = "w") -> Path:
    cwd = tmp_path / name
    cwd.mkdir()
    os.chmod(tmp_path, 0o711)
    os.chmod(cwd, 0o711)
    return cwd


def by_agent(rep: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {a["agent"]: a for a in rep["agents"]}


def show(cwd: Path, run_id: str) -> dict[str, Any]:
    r = assay("show", run_id, "--json", cwd=cwd)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def judge_reply(body: dict[str, Any], decide) -> Any:  # noqa: ANN001
    """A batched judge: `decide(item_id, weight, text, prompt)` -> met, for every item in the prompt."""
    prompt = body["messages"][-1]["content"]
    if is_screen_prompt(prompt):  # the audit's injection screen: these answers address no grader
        return reply('{"passages": []}', prompt_tokens=300, completion_tokens=5)
    items = ITEM_LINE.findall(prompt)
    if not items:  # e.g. the evidence audit's meta-judge
        return reply('{"supported": true, "reason": "fine"}', prompt_tokens=500, completion_tokens=20)
    out = [{"id": i, "met": bool(decide(i, float(w), text, prompt)), "reason": f"judged {i}"} for i, w, text in items]
    return reply(json.dumps({"items": out}, ensure_ascii=False), prompt_tokens=1000, completion_tokens=50)


def grading_requests(srv: FakeOpenAIServer) -> list[Any]:
    """The judge's grading calls, without the injection screen's (one per judged run that scored)."""
    return [q for q in srv.requests if not is_screen_prompt(q.json["messages"][-1]["content"])]


def positives_met(item_id: str, weight: float, text: str, prompt: str) -> bool:
    return weight > 0


# ---------------------------------------------------------------------------- starter suite, offline


def test_starter_rubric_tasks_graded_offline(tmp_path: Path) -> None:
    cwd = workdir(tmp_path)
    r = assay("run", str(RUBRIC), "--agent", "reference", "--agent", "noop", "--agent", "shortcut:plausible",
              "-q", "--json", "run.json", cwd=cwd)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rep = json.loads((cwd / "run.json").read_text())
    runs = rep["runs"]
    assert len(runs) == 30 and all(x["status"] == "done" for x in runs)
    scores = {(x["agent"], x["task_id"]): x["score"] for x in runs}
    tasks = sorted({x["task_id"] for x in runs})
    assert len(tasks) == 10
    for t in tasks:
        assert scores[("reference", t)] >= 0.9, t
        assert scores[("shortcut:plausible", t)] < 0.7, t
        assert scores[("noop", t)] == 0.0, t
    # No judge was needed: every starter item has a machine check, and no judge tokens were spent.
    assert all(x["judge_usage"]["input_tokens"] == 0 for x in runs)
    agents = by_agent(rep)
    for name in ("reference", "noop", "shortcut:plausible"):
        tags = agents[name]["rubric"]["tags"]
        assert set(tags) >= {"FI", "AR", "IF", "SF"} and all(tags[t] is not None for t in ("FI", "AR", "IF", "SF"))
        assert set(agents[name]["economic_value"]) >= {"USD", "CNY"}
        assert agents[name]["rubric"]["na"] == 0
    ref = agents["reference"]
    assert ref["economic_value"]["USD"] > 0 and ref["economic_value"]["CNY"] > 0
    assert ref["rubric"]["expert_score"] >= 0.9 and ref["pass_rate"] == 1.0
    assert agents["noop"]["economic_value"] == {"USD": 0.0, "CNY": 0.0}
    assert agents["shortcut:plausible"]["pass_rate"] == 0.0
    # Items carry the SPEC fields.
    row = next(x for x in runs if x["agent"] == "reference")
    assert {"id", "weight", "tag", "hit", "na", "check"} <= set(row["grade"]["items"][0])
    assert "judge" not in ref  # nothing was judged


# ---------------------------------------------------------------------------- a native judged task

ANSWER = "The answer is 42, citing source X."


def judged_task(root: Path) -> Path:
    return write_task(root / "tasks" / "judged", {
        "id": "judged", "title": "a judged answer", "domain": "finance", "language": "en",
        "execution": "single-step", "prompt": "What is the answer? Name your source.",
        "value": {"amount": 100, "currency": "USD"},
        "reference": {"answer": ANSWER},
        "rubric": {"items": [
            {"id": "cites", "text": "Cites the source by name.", "weight": 5, "tag": "FI",
             "human_labels": {"alice": True, "bob": True}},
            {"id": "units", "text": "States the units of the answer.", "weight": 3, "tag": "SF",
             "human_labels": {"alice": False}},
            {"id": "value", "text": "Gives the value 42.", "weight": 2, "tag": "AR", "check": {"regex": r"\b42\b"}},
            {"id": "rude", "text": "Insults the reader.", "weight": -4, "tag": "IF"},
        ]},
    })


def decide_judged(item_id: str, weight: float, text: str, prompt: str) -> bool:
    return item_id == "cites" and "source X" in prompt


def test_native_judged_task_end_to_end(tmp_path: Path) -> None:
    cwd = workdir(tmp_path)
    task = judged_task(tmp_path)
    with FakeOpenAIServer() as srv:
        srv.handler = lambda body: judge_reply(body, decide_judged)
        model_alias(cwd, "j", "openai", srv.url, model=JUDGE_MODEL)
        # Without a judge the run is refused up front.
        r = assay("run", str(task), "--agent", "reference", "-q", cwd=cwd)
        assert r.returncode == 2 and "--judge" in r.stderr and "judged" in r.stderr
        r = assay("run", str(task), "--agent", "reference", "--judge", "j", "-q", cwd=cwd)
        assert r.returncode == 0, r.stderr
        sent = len(srv.requests)
        assert len(grading_requests(srv)) == 1  # batched: one call for the three judged items
        assert sent == 2  # and the injection screen's, since the run scored
        prompt = grading_requests(srv)[0].json["messages"][-1]["content"]
        for text in ("Cites the source by name.", "States the units of the answer.", "Insults the reader."):
            assert text in prompt
        assert "Gives the value 42." not in prompt  # machine-checked items never reach the judge
        assert ANSWER in prompt
        # A re-grade of the same answer (a new campaign, same store) is served by the judge cache.
        r = assay("run", str(task), "--agent", "reference", "--judge", "j", "--campaign", "again", "-q", cwd=cwd)
        assert r.returncode == 0, r.stderr
        assert len(srv.requests) == sent
    rep = report(cwd, "--campaign", "default")
    (run,) = rep["runs"]
    assert run["status"] == "done" and run["score"] == pytest.approx(0.7) and run["passed"] is True
    items = {i["id"]: i for i in run["grade"]["items"]}
    assert items["cites"]["hit"] and not items["cites"]["check"]
    assert items["value"]["hit"] and items["value"]["check"]
    assert not items["units"]["hit"] and not items["rude"]["hit"]
    # Judge tokens are recorded apart from the agent's (the reference agent spends none).
    assert run["usage"]["input_tokens"] == 0 and run["usage"]["output_tokens"] == 0
    # The grading call (1,000 in, 50 out) and the screen's (300 in, 5 out).
    assert run["judge_usage"]["input_tokens"] + run["judge_usage"]["cache_read_tokens"] == 1300
    assert run["judge_usage"]["output_tokens"] == 55
    assert run["judge_usage"]["cost_usd"] == pytest.approx((1300 * 2.0 + 55 * 8.0) / 1e6)
    assert run["options"]["judges"] == ["j"]
    ref = by_agent(rep)["reference"]
    assert ref["judge"]["agreement"] == 1.0 and ref["judge"]["na"] == 0 and ref["judge"]["votes"] == 1
    assert ref["judge_cost_usd"] == pytest.approx(run["judge_usage"]["cost_usd"])
    assert ref["cost_usd"] == 0
    # The task file's human labels describe its reference answer, not this run's answer: the
    # report compares the judge with people on the same answers only (`assay calibrate` uses them).
    assert "human_agreement" not in ref
    again = report(cwd, "--campaign", "again")
    assert again["runs"][0]["judge_usage"]["input_tokens"] == 0  # the cache hit cost nothing
    assert again["runs"][0]["score"] == pytest.approx(0.7)
    # A labels file labels runs' own answers, each row naming its run.
    other = again["runs"][0]["run_id"]
    labels = tmp_path / "labels.jsonl"
    labels.write_text("\n".join(json.dumps(x) for x in [
        {"run_id": run["run_id"], "task_id": "judged", "item_id": "rude", "met": False, "labeller": "carol"},
        {"run_id": run["run_id"][:8], "task_id": "judged", "item_id": "units", "met": True, "labeller": "carol"},
        {"run_id": run["run_id"], "task_id": "judged", "item_id": "cites", "met": True, "labeller": "dave"},
        {"run_id": run["run_id"], "task_id": "judged", "item_id": "value", "met": True, "labeller": "dave"},
        {"run_id": other, "task_id": "judged", "item_id": "cites", "met": False, "labeller": "erin"},
    ]) + "\n")
    rep = report(cwd, "--campaign", "default", "--labels", str(labels))
    ha = by_agent(rep)["reference"]["human_agreement"]["finance"]
    # rude (agree), units (disagree), cites (agree); `value` is a machine check and the last row
    # labels the other campaign's run: neither is a judge-human pair of this run.
    assert ha["n"] == 3 and ha["raw_agreement"] == pytest.approx(2 / 3)
    for bad_row, field in (('{"task_id": "judged"}', "item_id"),
                           ('{"task_id": "judged", "item_id": "rude", "met": true}', "run_id")):
        bad = tmp_path / "bad.jsonl"
        bad.write_text(bad_row + "\n")
        r = assay("report", "--labels", str(bad), cwd=cwd)
        assert r.returncode == 2 and field in r.stderr and "Traceback" not in r.stderr


def test_judge_garbage_is_na_reported_per_run_and_agent(tmp_path: Path) -> None:
    cwd = workdir(tmp_path)
    task = judged_task(tmp_path)
    with FakeOpenAIServer() as srv:
        srv.handler = lambda body: reply("<html>I am not JSON</html>", prompt_tokens=200, completion_tokens=10)
        model_alias(cwd, "j", "openai", srv.url, model=JUDGE_MODEL)
        r = assay("run", str(task), "--agent", "reference", "--judge", "j", "-q", cwd=cwd)
        assert r.returncode == 0, r.stderr  # NA is a graded outcome, not a void run
        assert len(grading_requests(srv)) == 3  # a first try and two retries
        assert len(srv.requests) == 4  # and the screen's call (the checked item scored), its reply garbage too
    rep = report(cwd)
    (run,) = rep["runs"]
    assert run["status"] == "done"
    assert run["grade"]["na"] == 3
    items = {i["id"]: i for i in run["grade"]["items"]}
    assert all(items[i]["na"] and not items[i]["hit"] for i in ("cites", "units", "rude"))
    assert run["score"] == pytest.approx(0.2)  # only the machine-checked item counts; NA counts 0
    assert run["judge_usage"]["input_tokens"] == 800  # the failed calls still cost (3 grading tries and the screen, 200 each)
    ref = by_agent(rep)["reference"]
    assert ref["rubric"]["na"] == 3 and ref["judge"]["na"] == 3
    # Nothing agreed on: NA items carry no human-agreement pairs.
    assert "human_agreement" not in ref
    shown = show(cwd, run["run_id"])
    assert shown["run"]["grade"]["judge_info"]["errors"]


def test_epochs_give_pass_at_k_and_pass_hat_k(tmp_path: Path) -> None:
    cwd = workdir(tmp_path)
    task = judged_task(tmp_path)
    answers = itertools.cycle([ANSWER, "The answer is 41.", ANSWER])
    lock = threading.Lock()

    def handler(body: dict[str, Any]) -> Any:
        if body["model"] == JUDGE_MODEL:
            return judge_reply(body, decide_judged)
        with lock:
            text = next(answers)
        return reply(text, prompt_tokens=100, completion_tokens=10)

    with FakeOpenAIServer() as srv:
        srv.handler = handler
        model_alias(cwd, "j", "openai", srv.url, model=JUDGE_MODEL)
        model_alias(cwd, "m", "openai", srv.url, model="agent-model")
        r = assay("run", str(task), "--agent", "m", "--judge", "j", "--epochs", "3", "--concurrency", "1",
                  "-q", *NO_SANDBOX, cwd=cwd)
        assert r.returncode == 0, r.stderr
        judge_calls = sum(1 for q in grading_requests(srv) if q.json["model"] == JUDGE_MODEL)
        screen_calls = len(srv.requests) - len(grading_requests(srv))
        agent_calls = sum(1 for q in srv.requests if q.json["model"] == "agent-model")
    assert agent_calls == 3 and judge_calls == 2  # the third epoch repeats the first answer: a cache hit
    assert screen_calls == 1  # the first answer's (the second scores 0; the third is the cache's)
    rep = report(cwd)
    runs = rep["runs"]
    assert sorted(x["epoch"] for x in runs) == [1, 2, 3]
    assert sum(1 for x in runs if x["passed"]) == 2
    # The agent's tokens and the judge's are kept apart.
    assert sum(x["usage"]["input_tokens"] + x["usage"]["cache_read_tokens"] for x in runs) == 300
    assert sum(x["usage"]["output_tokens"] for x in runs) == 30
    assert sum(x["judge_usage"]["input_tokens"] + x["judge_usage"]["cache_read_tokens"] for x in runs) == 2300  # 2 grading calls, 1 screen call
    m = by_agent(rep)["m"]
    assert m["pass_at_k"]["1"] == pytest.approx(2 / 3)
    assert m["pass_at_k"]["2"] == pytest.approx(1.0) and m["pass_at_k"]["3"] == pytest.approx(1.0)
    assert m["pass_hat_k"]["1"] == pytest.approx(2 / 3)
    assert m["pass_hat_k"]["2"] == pytest.approx(1 / 3) and m["pass_hat_k"]["3"] == pytest.approx(0.0)
    (row,) = [t for t in rep["tasks"] if t["agent"] == "m"]
    assert row["task_id"] == "judged" and row["epochs"] == 3 and row["passes"] == 2
    assert row["pass_at_k"]["2"] == pytest.approx(1.0) and row["pass_hat_k"]["3"] == pytest.approx(0.0)


# ---------------------------------------------------------------------------- local search


def test_search_local_gives_web_search_over_the_corpus(tmp_path: Path) -> None:
    cwd = workdir(tmp_path)
    task_id = "en-finance-roth-ira-phaseout"
    reference = (RUBRIC / task_id / "reference.md").read_text()
    shortcut = (RUBRIC / task_id / "shortcut.md").read_text()
    query = "2024 Roth IRA MAGI phase-out single filer"

    def handler(body: dict[str, Any]) -> Any:
        tools = [t["function"]["name"] for t in body.get("tools") or []]
        if not tools:  # --search off: a single-step task has no tools; the agent answers from memory
            return reply(shortcut, prompt_tokens=300, completion_tokens=40)
        if not any(m["role"] == "tool" for m in body["messages"]):
            return reply("", [("web_search", {"query": query})], prompt_tokens=300, completion_tokens=15)
        return reply(reference, prompt_tokens=900, completion_tokens=60)

    with FakeOpenAIServer() as srv:
        srv.handler = handler
        model_alias(cwd, "m", "openai", srv.url, model="agent-model")
        for mode in ("off", "local"):
            r = assay("run", str(RUBRIC), "--task", task_id, "--agent", "m", "--search", mode, "-q",
                      *NO_SANDBOX, cwd=cwd)
            assert r.returncode == 0, r.stderr
        bodies = [q.json for q in srv.requests]
    assert len(bodies) == 3
    assert "tools" not in bodies[0] or not bodies[0]["tools"]
    assert [t["function"]["name"] for t in bodies[1]["tools"]] == ["web_search"]  # only search, no workspace tools
    tool_msg = next(m for m in bodies[2]["messages"] if m["role"] == "tool")
    assert "corpus://irs-2024-ira-limits.md" in tool_msg["content"]
    assert "$146,000 to $161,000" in tool_msg["content"]
    rep = report(cwd)
    runs = {x["options"]["search"]: x for x in rep["runs"]}
    assert set(runs) == {"off", "local"}
    assert runs["local"]["score"] >= 0.9 and runs["local"]["passed"]
    assert runs["off"]["score"] < 0.7
    shown = show(cwd, runs["local"]["run_id"])
    results = [e["data"]["output"] for e in shown["events"] if e["kind"] == "tool_result"]
    assert len(results) == 1 and "corpus://irs-2024-ira-limits.md" in results[0]
    calls = [e["data"] for e in shown["events"] if e["kind"] == "tool_call"]
    assert calls[0]["name"] == "web_search" and calls[0]["arguments"] == {"query": query}
    # The final answer is the reply after the search (no nudge replaced it).
    assert not any(e["kind"] == "user" and e["data"].get("nudge") for e in shown["events"])
    delta = rep["search_delta"]["m"]
    assert delta == pytest.approx(runs["local"]["score"] - runs["off"]["score"])
    assert delta > 0.5
    assert rep["search_deltas"]["m"]["local"]["tasks"] == 1


def test_search_local_script_agent_searches_a_chinese_query(tmp_path: Path) -> None:
    """The same web_search tool through a script agent: the corpus is indexed with CJK bigrams."""
    cwd = workdir(tmp_path)
    corpus_task = write_task(tmp_path / "tasks" / "zh-search", {
        "id": "zh-search", "language": "zh", "execution": "single-step", "search": "corpus", "corpus": "corpus/",
        "prompt": "请查资料后回答：年终奖单独计税政策延续到哪一年？",
        "rubric": {"items": [{"id": "year", "text": "给出 2027 年。", "weight": 5, "tag": "FI",
                              "check": {"regex": "2027"}}]},
    }, {"corpus/bonus.md": "# 年终奖单独计税\n全年一次性奖金单独计税优惠政策延续执行至2027年12月31日。\n",
        "corpus/other.md": "# 个人养老金\n个人养老金缴费每年上限12000元。\n"})
    script = tmp_path / "search.jsonl"
    script.write_text(json.dumps({"tool": "web_search", "args": {"query": "年终奖 单独计税 延续"}}, ensure_ascii=False)
                      + "\n" + json.dumps({"say": "延续执行至2027年12月31日。"}, ensure_ascii=False) + "\n")
    r = assay("run", str(corpus_task), "--agent", f"script:{script}", "--search", "local", "-q", *NO_SANDBOX, cwd=cwd)
    assert r.returncode == 0, r.stderr
    rep = report(cwd)
    (run,) = rep["runs"]
    assert run["passed"]
    out = [e["data"]["output"] for e in show(cwd, run["run_id"])["events"] if e["kind"] == "tool_result"]
    assert out and out[0].startswith("1. 年终奖单独计税 (corpus://bonus.md")


# ---------------------------------------------------------------------------- HealthBench and OneMillion-Bench


def test_healthbench_fixture_with_reference_and_judge(tmp_path: Path) -> None:
    cwd = workdir(tmp_path)
    with FakeOpenAIServer() as srv:
        srv.handler = lambda body: judge_reply(body, positives_met)
        model_alias(cwd, "j", "openai", srv.url, model=JUDGE_MODEL)
        r = assay("run", str(FIXTURES / "healthbench" / "sample.jsonl"), "--agent", "reference", "--judge", "j",
                  "-q", cwd=cwd)
        assert r.returncode == 0, r.stderr
        prompts = [q.json["messages"][-1]["content"] for q in srv.requests]
    assert "skip reference" in r.stderr  # rows without an ideal completion have no reference
    rep = report(cwd)
    (run,) = rep["runs"]
    assert run["task_id"] == "hb-0001" and run["status"] == "done"
    assert run["score"] == pytest.approx(1.0)
    assert [i["id"] for i in run["grade"]["items"]] == ["1", "2", "3", "4"]  # 1-based positions
    assert "Tells the user to call emergency services immediately." in prompts[0]
    assert run["judge_usage"]["input_tokens"] > 0 and run["usage"]["input_tokens"] == 0


def test_onemillion_bench_fixture_with_script_agent_and_calibration(tmp_path: Path) -> None:
    cwd = workdir(tmp_path)
    script = tmp_path / "answer.jsonl"
    script.write_text(json.dumps({"say": "Check the lease first; give written notice; do not withhold rent."}) + "\n")
    with FakeOpenAIServer() as srv:
        srv.handler = lambda body: judge_reply(body, positives_met)
        model_alias(cwd, "j", "openai", srv.url, model=JUDGE_MODEL)
        r = assay("run", str(FIXTURES / "omb"), "--agent", f"script:{script}", "--judge", "j", "-q",
                  *NO_SANDBOX, cwd=cwd)
        assert r.returncode == 0, r.stderr
        prompts = [q.json["messages"][-1]["content"] for q in srv.requests]
        systems = [q.json["messages"][0]["content"] for q in srv.requests]
    rep = report(cwd)
    runs = {x["task_id"]: x for x in rep["runs"]}
    assert len(runs) == 6 and all(x["status"] == "done" for x in runs.values())
    assert all(x["score"] == pytest.approx(1.0) for x in runs.values())
    assert [i["id"] for i in runs["9001"]["grade"]["items"]] == ["1", "2", "3", "4", "5"]  # rubric_number
    # The Chinese task was judged with the Chinese prompt.
    zh = [p for p in prompts if "戈登增长模型" in p]
    assert len(zh) == 1 and "【评分细则】" in zh[0]
    assert any("评审" in s for s in systems)
    agent = by_agent(rep)[f"script:{script}"]
    assert set(agent["economic_value"]) >= {"USD", "CNY"}
    assert agent["judge"]["na"] == 0
    # Human `scores` (law case only) label upstream's stored response, not this run's answer:
    # they never enter the report; `assay calibrate` compares the judge with them.
    assert "human_agreement" not in agent
    with FakeOpenAIServer() as srv:
        srv.handler = lambda body: judge_reply(body, positives_met)
        model_alias(cwd, "j2", "openai", srv.url, model=JUDGE_MODEL)
        r = assay("calibrate", str(FIXTURES / "omb"), "--judge", "j2", "--json", "cal.json", cwd=cwd)
        assert r.returncode == 0, r.stderr
    (cal,) = json.loads((cwd / "cal.json").read_text())["judges"]
    # response_1 of case 9001: items 1, 2, 5 scored; the judge meets positives only, so it
    # agrees on 1 (hit) and 2 (human 0 vs judge hit: no) and 5 (human -5 = hit vs not met: no).
    assert list(cal["domains"]) == ["law"] and cal["overall"]["n_responses"] == 1
    assert cal["overall"]["n_items"] == 3 and cal["overall"]["item_agreement"] == pytest.approx(1 / 3)
