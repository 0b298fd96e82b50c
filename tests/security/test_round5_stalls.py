"""Round 5 red team, class 2: one run's workspace or task stalling the other runs of the same
campaign (the harness is one asyncio process). Written without reading the other tests in
tests/security/.

How a stall is seen through the CLI: a victim agent takes many quick steps (each a
`run_command` of `true`) while the attacker's run is graded; every step is an event with its
time, so the event loop held by the attacker's grading shows as one long gap between two
consecutive events of the victim's run."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from assay.env.sandbox import bwrap_available
from tests.fakes import reply
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.screen import is_screen_prompt
from tests.helpers import assay, model_alias, report, write_task

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")]

MAX_GAP_S = 4.0
"""A quick step of the victim takes well under a second even on a loaded 2-core machine."""


def _cwd(tmp_path: Path) -> Path:
    os.chmod(tmp_path, 0o711)
    cwd = tmp_path / "w"
    cwd.mkdir()
    os.chmod(cwd, 0o711)
    return cwd


def _script(path: Path, lines: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return f"script:{path}"


def _judge(body: dict[str, Any]) -> Any:
    prompt = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
    if is_screen_prompt(prompt):
        return reply('{"passages": []}')
    if '"supported"' in prompt:
        return reply('{"supported": true, "reason": "ok"}')
    met = "hello" in prompt.rsplit("<<<END-", 1)[0].lower()
    return reply(json.dumps({"items": [{"id": "greets", "met": met, "reason": "keyword"}]}))


def _greeting_task(folder: Path, marker: str) -> Path:
    return write_task(folder, {
        "title": "greet", "domain": "test", "execution": "multi-step-with-tools",
        "prompt": "Greet the user.",
        "rubric": {"items": [{"id": "greets", "text": "Says hello", "weight": 1, "tag": "IF"}]},
    }, {f"workspace/{marker}": "x\n"})


def _gaps(cwd: Path, run_id: str) -> float:
    shown = json.loads(assay("show", run_id, "--json", cwd=cwd).stdout)
    ts = [e["t"] for e in shown["events"] if e.get("kind") in ("tool_call", "tool_result")]
    ts = ts[2:]  # after the first step (the victim's opening sleep)
    return max((b - a for a, b in zip(ts, ts[1:], strict=False)), default=0.0)


def _checked_task(folder: Path, marker: str) -> Path:
    """A contract task graded by automated checks (no judge): the checks read the copy of the workspace."""
    return write_task(folder, {
        "title": "greet", "domain": "test", "execution": "multi-step-with-tools",
        "prompt": "Greet the user.", "grading": {"type": "automated", "checks": "checks.py"},
    }, {f"workspace/{marker}": "x\n", "checks.py": "def grade(workspace, final_message):\n"
                                                  "    return {'greets': 1.0 if 'hello' in final_message else 0.0}\n"})


def _campaign(tmp_path: Path, attack_cmd: str, task: Any = None) -> tuple[dict[str, float], dict[str, Any]]:
    cwd = _cwd(tmp_path)
    suite = tmp_path / "suite"
    task = task or _greeting_task
    task(suite / "a-target", "attack.txt")
    task(suite / "b-bystander", "bystander.txt")
    attacker = _script(tmp_path / "attacker.jsonl", [
        {"tool": "run_command", "args": {"command": f"if [ -f attack.txt ]; then {attack_cmd}; fi; echo made",
                                         "timeout_s": 600}},
        {"say": "hello"}])
    victim = _script(tmp_path / "victim.jsonl", [
        {"tool": "run_command", "args": {"command": "sleep 15"}},
        *([{"tool": "run_command", "args": {"command": "true"}}] * 300),
        {"say": "hello"}])
    with FakeOpenAIServer(handler=_judge) as srv:
        model_alias(cwd, "j", "openai", srv.url, model="judge-model")
        r = assay("run", str(suite), "--agent", attacker, "--agent", victim, "--judge", "j", "--max-turns", "1000",
                  "--concurrency", "4", "-q", cwd=cwd)
    assert r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]
    rep = report(cwd)
    gaps = {x["task_id"].split("/")[-1]: _gaps(cwd, x["run_id"]) for x in rep["runs"] if "victim" in x["agent"]}
    att = next(x for x in rep["runs"] if "attacker" in x["agent"] and x["task_id"].endswith("a-target"))
    return gaps, att


MKDIRS = ("python3 -c \"import os\nos.mkdir('d')\nfor i in range(420000): os.mkdir('d/%d' % i)\"")


def test_a_workspace_of_empty_folders_does_not_stall_other_runs(tmp_path: Path) -> None:
    gaps, att = _campaign(tmp_path, MKDIRS)
    assert att["status"] == "done" and att["score"] == 1.0, att
    assert max(gaps.values()) < MAX_GAP_S, gaps
    # The audit's walk stopped at its entry ceiling (in a worker process) and says so: the run is scored.
    audit = att["grade"]["audit"]
    assert audit["audited"] and any("entries" in c for c in audit.get("workspace_capped") or []), audit


def test_control_a_small_workspace_does_not_stall_other_runs(tmp_path: Path) -> None:
    """Control: the same campaign with an attacker that makes one folder: no long gap."""
    gaps, att = _campaign(tmp_path, "mkdir d")
    assert att["status"] == "done" and att["score"] == 1.0, att
    assert max(gaps.values()) < MAX_GAP_S, gaps


MKDIRS_100K = ("python3 -c \"import os\nos.mkdir('d')\nfor i in range(100000): os.mkdir('d/%d' % i)\"")


def test_checks_on_a_workspace_of_many_folders_do_not_stall_other_runs(tmp_path: Path) -> None:
    """Automated checks copy the workspace (in a thread, capped at 100,000 entries) and hand the
    copy to the checks' uid (`Sandbox.prepare`): with 100,000 folders the other runs go on."""
    gaps, att = _campaign(tmp_path, MKDIRS_100K, _checked_task)
    assert att["status"] == "done" and att["score"] == 1.0, att
    assert max(gaps.values()) < MAX_GAP_S, gaps
