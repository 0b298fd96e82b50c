"""`--response-cache`: the agents' model replies are kept under the hash of the full request
and the run's identity (not its campaign), so the same work again makes zero model calls,
while epochs stay separate samples and nothing is cached without the flag."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from assay.env.bwrap import bwrap_available
from tests.fakes import Fault, Reply, reply
from tests.fakes.openai_server import FakeOpenAIServer
from tests.helpers import answer_task, assay, model_alias

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")


def _after_a_tool_result_say_done(body: dict[str, Any]) -> Fault | Reply | None:
    msgs = body.get("messages") or []
    if msgs and msgs[-1].get("role") == "tool":
        return reply("done: answer.txt holds 40", prompt_tokens=1000, completion_tokens=10)
    return None


def _runs(cwd: Path, campaign: str) -> list[dict[str, Any]]:
    out = cwd / f"{campaign}.json"
    r = assay("report", "--campaign", campaign, "--json", str(out), cwd=cwd)
    assert r.returncode == 0, r.stderr
    runs: list[dict[str, Any]] = json.loads(out.read_text())["runs"]
    return runs


def _summary(runs: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted((x["task_id"], x["epoch"], x["status"], x["score"], x["usage"]["input_tokens"]) for x in runs)


def test_the_same_work_again_makes_no_model_call(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    for i in range(3):
        answer_task(tasks / f"t{i}", want="40")
    srv = FakeOpenAIServer(default=reply("", [("write_file", {"path": "answer.txt", "content": "40\n"})],
                                         prompt_tokens=1000, completion_tokens=10),
                           handler=_after_a_tool_result_say_done)
    with srv:
        model_alias(tmp_path, "m", "openai", srv.url, api_key_env="M_KEY")
        env = {"M_KEY": "sk-test"}
        base = ("run", str(tasks), "--agent", "m", "--epochs", "2", "--max-turns", "4", "-q")
        r = assay(*base, "--campaign", "uncached", cwd=tmp_path, env=env)
        assert r.returncode == 0, r.stderr
        made = len(srv.requests)  # what the work costs in model calls without the cache
        assert made > 0 and made % 6 == 0

        r = assay(*base, "--campaign", "first", "--response-cache", cwd=tmp_path, env=env)
        assert r.returncode == 0, r.stderr
        assert len(srv.requests) == 2 * made  # an empty cache: every request asked, epochs not shared
        r = assay(*base, "--campaign", "again", "--response-cache", cwd=tmp_path, env=env)
        assert r.returncode == 0, r.stderr
        assert len(srv.requests) == 2 * made, "the same work under another campaign name called the model"
        first, again = _runs(tmp_path, "first"), _runs(tmp_path, "again")
        assert _summary(first) == _summary(again) and all(x["status"] == "done" for x in again)
        per_run = made // 6
        show = assay("show", again[0]["run_id"], "--json", cwd=tmp_path)
        assert f"response cache: {per_run} of {per_run} model replies came from it" in show.stdout

        (tasks / "t0" / "task.yaml").write_text((tasks / "t0" / "task.yaml").read_text().replace(
            "Write", "Please write"))  # another prompt: another request, answered by the model
        r = assay(*base, "--campaign", "changed", "--response-cache", cwd=tmp_path, env=env)
        assert r.returncode == 0, r.stderr
        assert len(srv.requests) == 2 * made + 2 * per_run  # only t0's two epochs asked again
