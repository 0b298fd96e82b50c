"""Search for the tasks that need it, through the CLI: DareBench tasks that require `web_search`
run with `--search brave` (a fake Brave server on 127.0.0.1), `local` (a corpus beside the
task) or `native` (a model's own search), are skipped with the reason with none, and every
run records the search it was offered."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from assay.env.bwrap import bwrap_available
from tests.fakes import reply
from tests.fakes.brave_server import FakeBraveServer, Page
from tests.fakes.openai_server import FakeOpenAIServer
from tests.helpers import assay, model_alias, report

NO_SANDBOX = [] if bwrap_available() else ["--unsafe-no-sandbox"]
KEY = "brave-test-key"
TASK = """---
id: task_seal0_00
name: Seal-0 style lookup (assay test)
category: search_qa
level: L2
grading_type: automated
timeout_seconds: 300
environment:
  type: sandbox
  requirements:
    - web_search
---

## Prompt

In which year did the first crewed Moon landing happen? Search the web, then write the year to
`answer.txt` in the workspace.

## Automated Checks

```python
def grade(transcript, workspace_path):
    from pathlib import Path
    p = Path(workspace_path) / "answer.txt"
    text = p.read_text() if p.exists() else ""
    return {"correct": 1.0 if "1969" in text else 0.0}
```
"""
OTHER = TASK.replace("task_seal0_00", "task_logiqa_00").replace(
    "  requirements:\n    - web_search\n", "  requirements: []\n")
PAGES = [Page("Apollo 11", "https://www.nasa.gov/apollo11", "Apollo 11 landed on the Moon on July 20, 1969.")]


def setup(tmp_path: Path) -> tuple[Path, Path]:
    os.chmod(tmp_path, 0o711)
    cwd = tmp_path / "w"
    (tmp_path / "suite" / "tasks").mkdir(parents=True)
    cwd.mkdir()
    (tmp_path / "suite" / "tasks" / "task_seal0_00.md").write_text(TASK)
    (tmp_path / "suite" / "tasks" / "task_logiqa_00.md").write_text(OTHER)
    script = tmp_path / "agent.jsonl"
    script.write_text("\n".join(json.dumps(x) for x in [
        {"tool": "web_search", "args": {"query": "first crewed moon landing year"}},
        {"tool": "write_file", "args": {"path": "answer.txt", "content": "1969\n"}},
        {"say": "1969"},
    ]) + "\n")
    return cwd, script


def events(cwd: Path, run_id: str) -> list[dict[str, Any]]:
    r = assay("show", run_id, "--json", cwd=cwd)
    assert r.returncode == 0, r.stderr
    return list(json.loads(r.stdout)["events"])


def test_brave_search_runs_the_task_that_needs_it(tmp_path: Path) -> None:
    cwd, script = setup(tmp_path)
    suite = str(tmp_path / "suite")
    # Without a backend the task is skipped, with the reason, and the other task runs.
    r = assay("run", suite, "--agent", f"script:{script}", "-q", *NO_SANDBOX, cwd=cwd)
    assert r.returncode == 0, r.stderr
    assert "needs web_search: run it with --search native" in r.stderr and "task_seal0_00" in r.stderr
    # --search brave without a key: refused before anything runs.
    r = assay("run", suite, "--agent", f"script:{script}", "--search", "brave", "-q", *NO_SANDBOX, cwd=cwd)
    assert r.returncode == 2 and "BRAVE_API_KEY" in r.stderr
    with FakeBraveServer(KEY, PAGES) as srv:
        env = {"BRAVE_API_KEY": KEY, "ASSAY_BRAVE_URL": srv.url}
        r = assay("run", suite, "--agent", f"script:{script}", "--search", "brave", "-q", *NO_SANDBOX,
                  cwd=cwd, env=env)
        assert r.returncode == 0, r.stderr
    assert "skip" not in r.stderr
    assert [s.params["q"] for s in srv.requests] == ["first crewed moon landing year"] * 2
    rows = {(x["task_id"], x["options"]["search"]): x for x in report(cwd)["runs"]}
    assert set(rows) == {("task_logiqa_00", "off"), ("task_logiqa_00", "brave"), ("task_seal0_00", "brave")}
    run = rows[("task_seal0_00", "brave")]
    assert run["status"] == "done" and run["score"] == 1.0 and run["search"] == "brave"
    # Upstream's agent has search on every task: the other DareBench task is offered it too.
    assert rows[("task_logiqa_00", "brave")]["search"] == "brave"
    assert rows[("task_logiqa_00", "off")]["search"] is None
    out = [e["data"]["output"] for e in events(cwd, run["run_id"]) if e["kind"] == "tool_result"]
    assert out[0].startswith("1. Apollo 11 (https://www.nasa.gov/apollo11)\nApollo 11 landed on the Moon")


def test_brave_outage_voids_the_run_and_resume_reruns_it(tmp_path: Path) -> None:
    cwd, script = setup(tmp_path)
    task = str(tmp_path / "suite" / "tasks" / "task_seal0_00.md")
    with FakeBraveServer(KEY, PAGES) as srv:
        env = {"BRAVE_API_KEY": KEY, "ASSAY_BRAVE_URL": srv.url}
        srv.faults.extend([500] * 10)
        r = assay("run", task, "--agent", f"script:{script}", "--search", "brave", "-q", *NO_SANDBOX,
                  cwd=cwd, env=env)
        assert r.returncode == 1, r.stderr  # done, with a void run
        (run,) = report(cwd)["runs"]
        assert run["status"] == "void" and run["end_reason"] == "api_error"
        assert "brave search: HTTP 500" in run["void_reason"]
        srv.faults.clear()
        r = assay("run", task, "--agent", f"script:{script}", "--search", "brave", "-q", *NO_SANDBOX,
                  cwd=cwd, env=env)
        assert r.returncode == 0, r.stderr
    (run,) = report(cwd)["runs"]
    assert run["status"] == "done" and run["score"] == 1.0 and run["attempt"] == 2


def test_local_corpus_beside_a_darebench_task(tmp_path: Path) -> None:
    cwd, script = setup(tmp_path)
    corpus = tmp_path / "suite" / "corpus" / "task_seal0_00"
    corpus.mkdir(parents=True)
    (corpus / "apollo.md").write_text("# Apollo 11\nThe first crewed Moon landing was in 1969.\n")
    r = assay("run", str(tmp_path / "suite"), "--agent", f"script:{script}", "--search", "local", "-q",
              *NO_SANDBOX, cwd=cwd)
    assert r.returncode == 0, r.stderr
    rows = {x["task_id"]: x for x in report(cwd)["runs"]}
    assert rows["task_seal0_00"]["search"] == "local" and rows["task_seal0_00"]["score"] == 1.0
    out = [e["data"]["output"] for e in events(cwd, rows["task_seal0_00"]["run_id"]) if e["kind"] == "tool_result"]
    assert out[0].startswith("1. Apollo 11 (corpus://apollo.md")
    # The task without a corpus folder runs without search.
    assert rows["task_logiqa_00"]["search"] is None
    assert any(e["kind"] == "tool_result" and "unknown tool 'web_search'" in e["data"]["output"]
               for e in events(cwd, rows["task_logiqa_00"]["run_id"]))


def test_model_agent_gets_web_search_beside_its_tools(tmp_path: Path) -> None:
    """Under --search brave a model sees the five tools plus web_search; under native, its
    provider's own search (the Responses API's web_search tool), and no harness web_search."""
    cwd, _ = setup(tmp_path)
    task = str(tmp_path / "suite" / "tasks" / "task_seal0_00.md")

    def handler(body: dict[str, Any]) -> Any:
        if "messages" in body:  # Chat Completions (--search brave): search, write, answer
            done = sum(m["role"] == "tool" for m in body["messages"])
            steps = [("web_search", {"query": "moon landing year"}), ("write_file", {"path": "answer.txt",
                                                                                    "content": "1969"})]
        else:  # the Responses API (--search native): the provider searches; write, answer
            done = sum(isinstance(m, dict) and m.get("type") == "function_call_output" for m in body["input"])
            steps = [("write_file", {"path": "answer.txt", "content": "1969"})]
        return reply("", [steps[done]]) if done < len(steps) else reply("1969")

    with FakeOpenAIServer() as llm, FakeBraveServer(KEY, PAGES) as srv:
        llm.handler = handler
        model_alias(cwd, "m", "openai", llm.url)
        env = {"BRAVE_API_KEY": KEY, "ASSAY_BRAVE_URL": srv.url}
        r = assay("run", task, "--agent", "m", "--search", "brave", "--max-turns", "6", "-q", *NO_SANDBOX,
                  cwd=cwd, env=env)
        assert r.returncode == 0, r.stderr
        first = llm.requests[0].json
        assert sorted(t["function"]["name"] for t in first["tools"]) == [
            "edit_file", "list_files", "read_file", "run_command", "web_search", "write_file"]
        assert len(srv.requests) == 1
        n = len(llm.requests)
        r = assay("run", task, "--agent", "m", "--search", "native", "--max-turns", "6", "-q", *NO_SANDBOX, cwd=cwd)
        assert r.returncode == 0, r.stderr
        native = llm.requests[n].json
        names = [t.get("name") or t.get("type") for t in native["tools"]]
        assert "web_search" in names and names.count("web_search") == 1  # the provider's tool only
        assert llm.requests[n].path.endswith("/responses")
    rows = {x["options"]["search"]: x for x in report(cwd)["runs"]}
    assert rows["brave"]["search"] == "brave" and rows["native"]["search"] == "native"
    assert rows["brave"]["score"] == 1.0
