"""Third-party packages extend assay through entry points, with no file of src/assay changed:
tests/plugins/assay_plugin_demo (a provider speaking its own JSON wire format, a calculator
tool) is pip-installed into a folder of its own, and the real CLI, with that folder on its
path, runs a task that uses the tool with an agent on that provider (a real HTTP server on
127.0.0.1 answering as a scripted model), grades it, reports, compares and shows the run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from assay.env.bwrap import bwrap_available
from tests.helpers import REPO, answer_task, assay_process, model_alias, write_task

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")]

PLUGIN = REPO / "tests" / "plugins" / "assay_plugin_demo"


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo plugin installed (no network, no build isolation) into a folder of its own."""
    root = tmp_path_factory.mktemp("plugin")
    src = root / "src"
    shutil.copytree(PLUGIN, src)  # the build writes egg-info next to the sources: not into the repo
    site = root / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--no-index", "--target", str(site), str(src)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert list(site.glob("assay_plugin_demo-*.dist-info/entry_points.txt"))  # what assay reads
    return site


def _env(site: Path | None) -> dict[str, str]:
    paths = [str(REPO / "src")] + ([str(site)] if site is not None else [])
    return {"PYTHONPATH": os.pathsep.join(paths)}


class _Model(BaseHTTPRequestHandler):
    """A scripted model on the demowire wire format: compute with the calculator, write its
    result to answer.txt, then say it is done."""

    requests: list[dict[str, Any]]

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.requests.append({"path": self.path, "body": body})
        tool_messages = [m for m in body["messages"] if m["role"] == "tool"]
        if not tool_messages:
            out = {"text": "Let me compute it.", "calls": [{"id": "c1", "name": "calculator",
                                                            "arguments": {"expression": "1234 * 5678 + 9"}}]}
        elif len(tool_messages) == 1:
            out = {"text": "", "calls": [{"id": "c2", "name": "write_file",
                                          "arguments": {"path": "answer.txt",
                                                        "content": tool_messages[0]["content"] + "\n"}}]}
        else:
            out = {"text": "answer.txt holds the result.", "calls": []}
        out["usage"] = {"in": 100, "out": 10}
        raw = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        return


@pytest.fixture
def model_server() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    requests: list[dict[str, Any]] = []
    handler = type("Handler", (_Model,), {"requests": requests})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requests
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _calc_task(folder: Path) -> Path:
    return write_task(folder, {
        "title": "multiply with the calculator", "domain": "test", "execution": "multi-step",
        "tools": ["calculator", "write_file"],
        "prompt": "Compute 1234 * 5678 + 9 with the calculator and write the number into answer.txt.",
        "contract": [{"path": "answer.txt", "predicate": "regex", "pattern": "^7006661\\s*$"}],
    })


def test_a_plugin_provider_and_tool_run_grade_report_compare_and_show(
        tmp_path: Path, plugin_site: Path, model_server: tuple[str, list[dict[str, Any]]]) -> None:
    url, requests = model_server
    task = _calc_task(tmp_path / "tasks" / "calc")
    model_alias(tmp_path, "demo", "demowire", url)
    env = _env(plugin_site)

    r = assay_process("validate", str(task), cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    r = assay_process("run", str(task), "--agent", "demo", "--agent", "noop", "-q", cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stdout + r.stderr

    # The provider spoke its own wire format, and offered exactly the task's tools.
    assert requests and all(q["path"] == "/turn" for q in requests)
    assert [t["name"] for t in requests[0]["body"]["tools"]] == ["calculator", "write_file"]
    assert requests[0]["body"]["model"] == "fake-model"

    out = tmp_path / "report.json"
    r = assay_process("report", "--json", str(out), cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    runs = {run["agent"]: run for run in json.loads(out.read_text())["runs"]}
    demo = runs["demo"]
    assert demo["status"] == "done" and demo["end_reason"] == "finished"
    assert demo["passed"] is True and demo["score"] == 1.0  # graded: answer.txt holds the calculator's result
    assert demo["usage"]["input_tokens"] == 100 * len(requests)
    assert runs["noop"]["passed"] is False

    r = assay_process("show", demo["run_id"], "--json", cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    events = json.loads(r.stdout)["events"]
    calls = [(e["data"]["name"], e["data"]["output"]) for e in events if e["kind"] == "tool_result"]
    assert calls[0] == ("calculator", "7006661")
    assert calls[1][0] == "write_file"

    cmp = tmp_path / "compare.json"
    r = assay_process("compare", "noop", "demo", "--json", str(cmp), cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "demo" in cmp.read_text()


def test_without_the_plugin_its_tool_and_provider_are_clear_input_errors(tmp_path: Path) -> None:
    task = _calc_task(tmp_path / "tasks" / "calc")
    r = assay_process("validate", str(task), cwd=tmp_path, env=_env(None))
    assert r.returncode == 2
    assert "task.yaml: field 'tools[0]': unknown tool 'calculator'" in r.stdout + r.stderr
    model_alias(tmp_path, "demo", "demowire", "http://127.0.0.1:9")
    plain = answer_task(tmp_path / "plain")
    r = assay_process("run", str(plain), "--agent", "demo", "-q", cwd=tmp_path, env=_env(None))
    assert r.returncode == 2
    out = r.stdout + r.stderr
    assert "assay.toml: field 'models.demo.provider': unknown provider 'demowire' (openai, anthropic, " in out
    assert "demowire" not in out.split("(", 1)[1]  # the list names the providers there are, not the plugin's
