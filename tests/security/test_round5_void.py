"""Round 5 red team, class 1: void dodges (an agent's failure turned into something that is
not a scored 0 against it). Written without reading the other tests in tests/security/.

Each attack is run through `assay run` beside an agent that solves the task, and the report
is read as a user would."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from assay.env.sandbox import bwrap_available
from tests.fakes import fault, reply
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.screen import is_screen_prompt
from tests.helpers import answer_task, assay, model_alias, report, write_task

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")]


def _cwd(tmp_path: Path) -> Path:
    os.chmod(tmp_path, 0o711)
    cwd = tmp_path / "w"
    cwd.mkdir()
    os.chmod(cwd, 0o711)
    return cwd


def _script(path: Path, lines: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return f"script:{path}"


CHECKS = '''\
import json, os


def grade(workspace, final_message):
    # An ordinary checks file: it reads the result the task asks for (and, like many, does
    # not guard against the file being missing or malformed).
    with open(os.path.join(workspace, "result.json"), encoding="utf-8") as f:
        data = json.load(f)
    return {"total_is_right": 1.0 if data.get("total") == 1234 else 0.0}
'''


def _hard_task(folder: Path, *, with_reference: bool) -> Path:
    spec: dict[str, Any] = {
        "title": "sum the ledger", "domain": "test", "execution": "multi-step-with-tools",
        "prompt": "Write {\"total\": <the ledger's total>} to result.json.",
        "grading": {"type": "automated", "checks": "checks.py"},
    }
    files = {"checks.py": CHECKS, "workspace/ledger.txt": "1000\n234\n"}
    if with_reference:
        spec["reference"] = {"artifacts": "reference"}
        files["reference/result.json"] = '{"total": 1234}\n'
    return write_task(folder, spec, files)


def _agents(tmp_path: Path) -> tuple[str, str, str]:
    solver = _script(tmp_path / "solver.jsonl", [
        {"tool": "write_file", "args": {"path": "answer.txt", "content": "42\n"}},
        {"tool": "write_file", "args": {"path": "result.json", "content": '{"total": 1234}'}},
        {"say": "done"}])
    honest = _script(tmp_path / "honest.jsonl", [  # fails the hard task honestly: a wrong total
        {"tool": "write_file", "args": {"path": "answer.txt", "content": "42\n"}},
        {"tool": "write_file", "args": {"path": "result.json", "content": '{"total": 1000}'}},
        {"say": "done"}])
    attacker = _script(tmp_path / "attacker.jsonl", [  # fails it loudly: the checks crash on its file
        {"tool": "write_file", "args": {"path": "answer.txt", "content": "42\n"}},
        {"tool": "write_file", "args": {"path": "result.json", "content": "I could not work it out"}},
        {"say": "done"}])
    return solver, honest, attacker


def _means(rep: dict[str, Any]) -> dict[str, float]:
    out = {}
    for a in rep["agents"]:
        scores = [r["score"] for r in rep["runs"] if r["agent"] == a["agent"] and r["status"] == "done"
                  and (r["task_id"], r.get("task_hash")) not in {(b["task_id"], b.get("task_hash"))
                                                                   for b in rep.get("broken_tasks", [])}]
        out[a["agent"].split("/")[-1].removesuffix(".jsonl")] = sum(scores) / len(scores)
    return out


def test_crashing_the_checks_does_not_remove_a_failed_task(tmp_path: Path) -> None:
    """The checks crash on an untouched workspace, and the task ships no reference. Round 5:
    the attacker's crash asked the untouched-workspace probe, so the task left every agent's
    numbers only when some agent crashed it, and the attacker's mean rose to the solver's.
    Now the verdict is the task's: the task is broken (SPEC: its grader fails on an untouched
    workspace) in a campaign without the attacker too, with the same reason, and the attacker's
    numbers are the honest failer's."""
    cwd = _cwd(tmp_path)
    suite = tmp_path / "suite"
    answer_task(suite / "easy")
    _hard_task(suite / "hard", with_reference=False)
    solver, honest, attacker = _agents(tmp_path)
    r = assay("run", str(suite), "--agent", solver, "--agent", honest, "-q", "--campaign", "without", cwd=cwd)
    assert r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]
    r = assay("run", str(suite), "--agent", solver, "--agent", honest, "--agent", attacker, "-q",
              "--campaign", "with", cwd=cwd)
    assert r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]
    without, with_ = report(cwd, "--campaign", "without"), report(cwd, "--campaign", "with")
    assert [b["task_id"].split("/")[-1] for b in without["broken_tasks"]] == ["hard"]
    assert [(b["task_id"], b["reason"]) for b in with_["broken_tasks"]] == [
        (b["task_id"], b["reason"]) for b in without["broken_tasks"]]
    assert "untouched workspace (checks)" in with_["broken_tasks"][0]["reason"]
    runs = {(x["agent"].split("/")[-1].removesuffix(".jsonl"), x["task_id"].split("/")[-1]): x for x in with_["runs"]}
    assert {runs[(a, "hard")]["status"] for a in ("solver", "honest", "attacker")} == {"broken"}
    means = _means(with_)
    assert means["attacker"] == means["honest"], means
    assert _means(without)["solver"] == means["solver"]


def test_control_with_a_reference_the_crash_is_a_scored_zero(tmp_path: Path) -> None:
    """Control: the same attack on the same task with a reference solution is a scored 0 with
    the fault recorded, and the task stays in every agent's numbers."""
    cwd = _cwd(tmp_path)
    suite = tmp_path / "suite"
    answer_task(suite / "easy")
    _hard_task(suite / "hard", with_reference=True)
    solver, honest, attacker = _agents(tmp_path)
    r = assay("run", str(suite), "--agent", solver, "--agent", honest, "--agent", attacker, "-q", cwd=cwd)
    assert r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]
    rep = report(cwd)
    assert not rep.get("broken_tasks")
    att = next(x for x in rep["runs"] if "attacker" in x["agent"] and x["task_id"].endswith("hard"))
    assert att["status"] == "done" and att["score"] == 0.0
    shown = json.loads(assay("show", att["run_id"], "--json", cwd=cwd).stdout)
    faults = (shown.get("grade") or shown.get("run", {}).get("grade") or {}).get("faults") or []
    assert any(f["part"] == "checks" for f in faults), faults
    means = _means(rep)
    assert means["attacker"] == means["honest"] < means["solver"], means


# --------------------------------------------------------------------------- the judge's context window

JUDGE_CONTEXT_TOKENS = 32_000
"""The judge model's context window (a common size for local judges; the fake refuses past it
the way OpenAI-compatible servers do: HTTP 400, code context_length_exceeded)."""


def _bounded_judge(body: dict[str, Any]) -> Any:
    prompt = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
    tokens = len(prompt.encode("utf-8")) // 4  # far fewer tokens than a real tokenizer gives CJK text
    if tokens > JUDGE_CONTEXT_TOKENS:
        return fault(400, {"error": {"message": f"This model's maximum context length is {JUDGE_CONTEXT_TOKENS} "
                                                f"tokens. However, your messages resulted in {tokens} tokens.",
                                     "type": "invalid_request_error", "param": "messages",
                                     "code": "context_length_exceeded"}})
    if is_screen_prompt(prompt):
        return reply('{"passages": []}')
    if '"supported"' in prompt:
        return reply('{"supported": true, "reason": "ok"}')
    met = "Canberra" in prompt.rsplit("<<<END-", 1)[0]
    return reply(json.dumps({"items": [{"id": "capital", "met": met, "reason": "keyword"}]}))


def _rubric_task(folder: Path) -> Path:
    return write_task(folder, {
        "title": "capital", "domain": "test", "execution": "single-step",
        "prompt": "What is the capital of Australia? Answer in one line.",
        "rubric": {"items": [{"id": "capital", "text": "Names Canberra as the capital", "weight": 1, "tag": "FI"}]},
        "reference": {"answer": "Canberra"},
    })


def test_an_answer_too_big_for_the_judge_is_a_scored_failure(tmp_path: Path) -> None:
    cwd = _cwd(tmp_path)
    suite = tmp_path / "suite"
    _rubric_task(suite / "capital")
    wrong = _script(tmp_path / "wrong.jsonl", [{"say": "Sydney"}])
    flood = _script(tmp_path / "flood.jsonl", [{"say": "我不知道。" + "的" * 70_000}])
    with FakeOpenAIServer(handler=_bounded_judge) as srv:
        model_alias(cwd, "j", "openai", srv.url, model="judge-model")
        r = assay("run", str(suite), "--agent", wrong, "--agent", flood, "--judge", "j", "-q", cwd=cwd)
    rep = report(cwd)
    runs = {x["agent"].split("/")[-1].removesuffix(".jsonl"): x for x in rep["runs"]}
    assert runs["wrong"]["status"] == "done" and runs["wrong"]["score"] == 0.0
    att = runs["flood"]
    assert att["status"] == "done", (att["status"], att["end_reason"], (att.get("void_reason") or "")[:300])
    assert att["score"] == 0.0
    assert r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]


def test_control_an_answer_within_the_judge_context_is_judged(tmp_path: Path) -> None:
    """Control: the same judge grades an ordinary answer (right and wrong) as usual."""
    cwd = _cwd(tmp_path)
    suite = tmp_path / "suite"
    _rubric_task(suite / "capital")
    right = _script(tmp_path / "right.jsonl", [{"say": "Canberra"}])
    wrong = _script(tmp_path / "wrong.jsonl", [{"say": "Sydney"}])
    with FakeOpenAIServer(handler=_bounded_judge) as srv:
        model_alias(cwd, "j", "openai", srv.url, model="judge-model")
        r = assay("run", str(suite), "--agent", right, "--agent", wrong, "--judge", "j", "-q", cwd=cwd)
    assert r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]
    runs = {x["agent"].split("/")[-1].removesuffix(".jsonl"): x for x in report(cwd)["runs"]}
    assert (runs["right"]["status"], runs["right"]["score"]) == ("done", 1.0)
    assert (runs["wrong"]["status"], runs["wrong"]["score"]) == ("done", 0.0)


# --------------------------------------------------------------------------- the company LLM gateway while graded

LLM_CASE = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "fdegym" / "llm-case"
TPM = 30_000
"""The upstream's tokens per minute (OpenAI's tier-1 limit for several models): past it, HTTP 429."""


class RateLimited:
    """An OpenAI-compatible upstream with a tokens-per-minute limit, as providers have."""

    def __init__(self) -> None:
        import threading

        self.spent: list[tuple[float, int]] = []
        self.limited = 0
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Any:
        import time

        tokens = len(json.dumps(body.get("messages", []))) // 4 + int(body.get("max_tokens") or 0)
        now = time.monotonic()
        with self._lock:
            self.spent = [(t, n) for t, n in self.spent if now - t < 60]
            if sum(n for _, n in self.spent) + tokens > TPM:
                self.limited += 1
                return fault(429, {"error": {"message": f"Rate limit reached for requests: Limit {TPM} TPM",
                                             "type": "tokens", "code": "rate_limit_exceeded"}},
                             headers={"retry-after": "1"})
            self.spent.append((now, tokens))
        return reply("label-from-fake")


BURST_APP = '''import llm_client

BIG = "Describe this item in one word. " + "context " * 6000  # ~50,000 characters, under the gateway's cap


def quote(item):
    labels = []
    for _ in range(2):
        try:
            labels.append(llm_client.complete(BIG + item["name"]))
        except Exception as e:  # noqa: BLE001
            labels.append(repr(e)[:40])
    return {"item": item["name"], "price": -1, "label": labels[0]}
'''


def test_a_delivered_system_that_trips_the_providers_rate_limit_is_scored(tmp_path: Path) -> None:
    cwd = _cwd(tmp_path)
    upstream = RateLimited()
    burst = _script(tmp_path / "burst.jsonl", [
        {"tool": "write_file", "args": {"path": "system/app.py", "content": BURST_APP}}, {"say": "done"}])
    with FakeOpenAIServer(handler=upstream) as srv:
        model_alias(cwd, "gw", "openai", srv.url)
        r = assay("run", str(LLM_CASE), "--agent", burst, "--gateway-model", "gw", "-q", cwd=cwd)
    run = report(cwd)["runs"][0]
    assert upstream.limited > 0  # the burst did pass the provider's limit
    assert run["status"] == "done", (run["status"], run["end_reason"], (run.get("void_reason") or "")[:300])
    assert run["grade"]["kpi"] == 0
    assert r.returncode == 0
