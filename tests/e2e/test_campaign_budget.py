"""`--max-campaign-usd X`: no new run starts once the campaign's spend (runs stored before
included) reaches X; runs left stay to do (exit 1) and a re-run with a higher budget does them."""

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

N_TASKS = 6
TOKENS = 500_000  # at $2 per million input tokens (tests.helpers.model_alias): $1 a call


def _after_a_tool_result_say_done(body: dict[str, Any]) -> Fault | Reply | None:
    msgs = body.get("messages") or []
    if msgs and msgs[-1].get("role") == "tool":
        return reply("done: answer.txt holds 40", prompt_tokens=TOKENS, completion_tokens=0)
    return None


def _runs(cwd: Path) -> list[dict[str, Any]]:
    out = cwd / "report.json"
    r = assay("report", "--json", str(out), cwd=cwd)
    assert r.returncode == 0, r.stderr
    runs: list[dict[str, Any]] = json.loads(out.read_text())["runs"]
    return runs


def test_the_campaign_budget_stops_new_runs_and_a_higher_one_resumes(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    for i in range(N_TASKS):
        answer_task(tasks / f"t{i}", want="40")
    srv = FakeOpenAIServer(default=reply("", [("write_file", {"path": "answer.txt", "content": "40\n"})],
                                         prompt_tokens=TOKENS, completion_tokens=0),
                           handler=_after_a_tool_result_say_done)
    with srv:
        model_alias(tmp_path, "m", "openai", srv.url, api_key_env="M_KEY")
        env = {"M_KEY": "sk-test"}
        base = ("run", str(tasks), "--agent", "m", "--concurrency", "1", "--max-turns", "4", "-q")
        r = assay(*base, "--max-campaign-usd", "5", cwd=tmp_path, env=env)
        assert r.returncode == 1, r.stdout + r.stderr
        runs = _runs(tmp_path)
        cost = runs[0]["usage"]["cost_usd"]
        assert cost >= 1.0 and all(x["status"] == "done" and x["usage"]["cost_usd"] == pytest.approx(cost)
                                   for x in runs)
        n = next(k for k in range(1, N_TASKS + 1) if k * cost >= 5)  # runs start while the spend is under $5
        assert len(runs) == n < N_TASKS
        assert f"campaign budget reached: ${n * cost:.4f} spent of --max-campaign-usd 5" in r.stderr, r.stderr
        assert f"{N_TASKS - n} left to do (not started)" in r.stderr

        # The spend already stored counts: the same budget starts nothing more.
        calls = len(srv.requests)
        r = assay(*base, "--max-campaign-usd", "5", cwd=tmp_path, env=env)
        assert r.returncode == 1 and "campaign budget reached" in r.stderr, r.stderr
        assert len(srv.requests) == calls and len(_runs(tmp_path)) == n

        # A higher budget does the rest; without one there is no cap.
        r = assay(*base, "--max-campaign-usd", "100", cwd=tmp_path, env=env)
        assert r.returncode == 0, r.stderr
        assert f"{n} already done" in r.stderr and "budget reached" not in r.stderr
    assert len(_runs(tmp_path)) == N_TASKS


@pytest.mark.parametrize("bad", ["0", "-1", "nan", "inf"])
def test_a_bad_campaign_budget_is_exit_2(tmp_path: Path, bad: str) -> None:
    answer_task(tmp_path / "t")
    r = assay("run", str(tmp_path / "t"), "--agent", "noop", "--max-campaign-usd", bad, cwd=tmp_path)
    assert r.returncode == 2 and "--max-campaign-usd" in r.stderr, r.stderr
    assert not (tmp_path / ".assay").exists()
