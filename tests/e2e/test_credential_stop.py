"""SPEC: an agent whose provider refuses its credentials (HTTP 401) on 3 runs in a row is
stopped for the rest of the campaign with one message; its other runs stay to do (exit 1),
the other agents go on, and a re-run with the key fixed does the rest."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from assay.env.bwrap import bwrap_available
from tests.fakes import Fault, Reply, reply
from tests.fakes.openai_server import FakeOpenAIServer
from tests.helpers import answer_task, assay, model_alias

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")

SRC = str(Path(__file__).resolve().parents[2] / "src")
N_TASKS = 6


def _after_a_tool_result_say_done(body: dict[str, Any]) -> Fault | Reply | None:
    msgs = body.get("messages") or []
    return reply("done: answer.txt holds 40") if msgs and msgs[-1].get("role") == "tool" else None


class KeyCheckingOpenAI(FakeOpenAIServer):
    """The fake OpenAI server, answering 401 (the provider's own error body) to a wrong key."""

    def __init__(self, key: str) -> None:
        super().__init__(default=reply("", [("write_file", {"path": "answer.txt", "content": "40\n"})]),
                         handler=_after_a_tool_result_say_done)
        self.key = key
        self.refused = 0

    def _serve_inner(self, h: BaseHTTPRequestHandler) -> None:
        if h.headers.get("authorization") != f"Bearer {self.key}":
            length = int(h.headers.get("content-length") or 0)
            h.rfile.read(length)
            with self._lock:
                self.refused += 1
            self._send(h, 401, self.error_body(401, "Incorrect API key provided"))
            return
        super()._serve_inner(h)


def _report(cwd: Path) -> dict[str, object]:
    out = cwd / "report.json"
    r = assay("report", "--json", str(out), cwd=cwd, env={"PYTHONPATH": SRC})
    assert r.returncode == 0, r.stderr
    data: dict[str, object] = json.loads(out.read_text())
    return data


def test_refused_credentials_stop_one_agent_and_the_rest_go_on(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    for i in range(N_TASKS):
        answer_task(tasks / f"t{i}", want="40")
    bad_srv, good_srv = KeyCheckingOpenAI("sk-right"), KeyCheckingOpenAI("sk-good")
    with bad_srv, good_srv:
        model_alias(tmp_path, "bad", "openai", bad_srv.url, api_key_env="BAD_KEY")
        model_alias(tmp_path, "good", "openai", good_srv.url, api_key_env="GOOD_KEY")
        args = ("run", str(tasks), "--agent", "bad", "--agent", "good", "--concurrency", "1", "--max-turns", "4", "-q")
        r = assay(*args, cwd=tmp_path, env={"PYTHONPATH": SRC, "BAD_KEY": "sk-wrong", "GOOD_KEY": "sk-good"})
        assert r.returncode == 1, r.stdout + r.stderr
        stops = [line for line in r.stderr.splitlines() if "stopped" in line]
        assert len(stops) == 1, r.stderr
        assert stops[0].startswith("agent bad stopped:") and "HTTP 401" in stops[0] and "3 runs in a row" in stops[0]
        assert bad_srv.refused == 3  # a 401 is not retried, and no fourth run started
        assert "3 left to do (not started)" in r.stderr.strip().splitlines()[-1]
        runs = _report(tmp_path)["runs"]
        assert isinstance(runs, list)
        bad = [x for x in runs if x["agent"] == "bad"]
        good = [x for x in runs if x["agent"] == "good"]
        assert len(bad) == 3 and all(x["status"] == "void" and x["end_reason"] == "api_error" for x in bad)
        assert len(good) == N_TASKS and all(x["status"] == "done" and x["passed"] for x in good)

        # The key fixed: the re-run does the bad agent's remaining runs (and re-runs its void ones).
        r = assay(*args, cwd=tmp_path, env={"PYTHONPATH": SRC, "BAD_KEY": "sk-right", "GOOD_KEY": "sk-good"})
        assert r.returncode == 0, r.stdout + r.stderr
        assert "stopped" not in r.stderr
        assert bad_srv.refused == 3
    runs = _report(tmp_path)["runs"]
    assert isinstance(runs, list)
    bad = [x for x in runs if x["agent"] == "bad"]
    assert len(bad) == N_TASKS and all(x["status"] == "done" and x["passed"] for x in bad)
    assert sorted(x["attempt"] for x in bad) == [1, 1, 1, 2, 2, 2]
