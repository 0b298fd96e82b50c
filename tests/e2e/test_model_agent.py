"""A model agent end to end: fake provider servers on 127.0.0.1, the real loop, the real sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assay.env.bwrap import bwrap_available
from tests.fakes import fault, malformed, reply
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.fakes.openai_server import FakeOpenAIServer
from tests.helpers import answer_task, assay, model_alias, report

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")


def _show(cwd: Path, run_id: str) -> dict:
    r = assay("show", run_id, "--json", cwd=cwd)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_model_solves_task_through_loop_and_sandbox(tmp_path: Path, provider: str) -> None:
    task = answer_task(tmp_path / "tasks" / "t1")
    server_cls = FakeOpenAIServer if provider == "openai" else FakeAnthropicServer
    with server_cls() as srv:
        srv.script(
            reply("Let me look.", [("list_files", {})], prompt_tokens=1000, completion_tokens=20, cached_tokens=400),
            reply("", [("run_command", {"command": "echo 42 > answer.txt && id -u && cat /proc/1/cmdline | tr '\\0' ' '"})],
                  prompt_tokens=1200, completion_tokens=30),
            reply("Done: answer.txt holds 42.", prompt_tokens=1300, completion_tokens=10),
            reply("Final summary: wrote 42.", prompt_tokens=1350, completion_tokens=8),
        )
        model_alias(tmp_path, "fake", provider, srv.url)
        r = assay("run", str(task), "--agent", "fake", "-q", cwd=tmp_path)
        assert r.returncode == 0, r.stdout + r.stderr
        sent = srv.requests
    rep = report(tmp_path)
    (run,) = rep["runs"]
    assert run["status"] == "done" and run["end_reason"] == "finished"
    assert run["passed"] is True and run["score"] == 1.0
    assert run["sandbox"] == "bwrap"
    u = run["usage"]
    assert u["input_tokens"] + u["cache_read_tokens"] == 1000 + 1200 + 1300 + 1350
    assert u["cache_read_tokens"] == 400 and u["output_tokens"] == 68
    expected = ((u["input_tokens"] * 2.0 + 400 * 0.5 + u["cache_write_tokens"] * 2.5 + 68 * 8.0) / 1e6)
    assert u["cost_usd"] == pytest.approx(expected)
    shown = _show(tmp_path, run["run_id"])
    kinds = [e["kind"] for e in shown["events"]]
    assert kinds.count("tool_call") == 2 and kinds.count("tool_result") == 2
    results = [e["data"]["output"] for e in shown["events"] if e["kind"] == "tool_result"]
    assert "README.md" in results[0]
    assert results[1].startswith("[exit code 0]")
    uid_line = results[1].splitlines()[1]
    assert int(uid_line) != 0  # never root inside
    # The model saw the tool outputs: the third request carries the command's output.
    assert "exit code 0" in json.dumps(sent[2].json)
    # The nudge after the first tool-less reply is in the transcript.
    assert any(e["kind"] == "user" and e["data"].get("nudge") for e in shown["events"])


def test_provider_errors_void_the_run_and_resume_reruns(tmp_path: Path) -> None:
    task = answer_task(tmp_path / "tasks" / "t1")
    with FakeOpenAIServer() as srv:
        srv.script(fault(500), fault(500), fault(500))
        model_alias(tmp_path, "fake", "openai", srv.url)
        r = assay("run", str(task), "--agent", "fake", "-q", cwd=tmp_path)
        assert r.returncode == 1, r.stderr
        rep = report(tmp_path)
        (run,) = rep["runs"]
        assert run["status"] == "void" and run["end_reason"] == "api_error" and run["score"] is None
        # Resume: the void run is re-run, and now the provider answers.
        srv.script(reply("", [("write_file", {"path": "answer.txt", "content": "42\n"})]), reply("done"), reply("done"))
        r = assay("run", str(task), "--agent", "fake", "-q", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    rep = report(tmp_path)
    (run,) = rep["runs"]
    assert run["status"] == "done" and run["passed"] is True and run["attempt"] == 2


def test_retry_after_429_and_malformed_body(tmp_path: Path) -> None:
    task = answer_task(tmp_path / "tasks" / "t1")
    with FakeOpenAIServer() as srv:
        srv.script(fault(429), malformed(), reply("", [("write_file", {"path": "answer.txt", "content": "42"})]),
                   reply("ok"), reply("ok"))
        model_alias(tmp_path, "fake", "openai", srv.url)
        r = assay("run", str(task), "--agent", "fake", "-q", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    (run,) = report(tmp_path)["runs"]
    assert run["passed"] is True


def test_bad_tool_arguments_and_unknown_tools_are_reported_to_the_model(tmp_path: Path) -> None:
    task = answer_task(tmp_path / "tasks" / "t1")
    with FakeOpenAIServer() as srv:
        srv.script(reply("", [("write_file", '{"path": "answer.txt", "content": ')]),
                   reply("", [("rm_rf", {"path": "/"})]),
                   reply("", [("read_file", {"path": "../../etc/passwd"})]),
                   reply("", [("read_file", {"path": "/etc/passwd"})]),
                   reply("giving up"), reply("giving up"))
        model_alias(tmp_path, "fake", "openai", srv.url)
        r = assay("run", str(task), "--agent", "fake", "-q", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    (run,) = report(tmp_path)["runs"]
    assert run["passed"] is False and run["end_reason"] == "finished"
    outs = [e["data"]["output"] for e in _show(tmp_path, run["run_id"])["events"] if e["kind"] == "tool_result"]
    assert outs[0].startswith("error: arguments are not a JSON object")
    assert outs[1].startswith("error: unknown tool")
    assert "root:" not in outs[2] and outs[2].startswith("error")
    assert "root:" not in outs[3] and outs[3].startswith("error")


def test_turn_limit_ends_run_and_grades_workspace_as_it_stands(tmp_path: Path) -> None:
    task = answer_task(tmp_path / "tasks" / "t1")
    with FakeOpenAIServer() as srv:
        srv.script(reply("", [("write_file", {"path": "answer.txt", "content": "42"})]))
        srv.default = reply("", [("list_files", {})])
        model_alias(tmp_path, "fake", "openai", srv.url)
        r = assay("run", str(task), "--agent", "fake", "--max-turns", "3", "-q", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    (run,) = report(tmp_path)["runs"]
    assert run["end_reason"] == "max_turns" and run["status"] == "done" and run["passed"] is True


def test_unknown_price_gives_null_cost(tmp_path: Path) -> None:
    task = answer_task(tmp_path / "tasks" / "t1")
    with FakeOpenAIServer() as srv:
        srv.script(reply("", [("write_file", {"path": "answer.txt", "content": "42"})]), reply("ok"), reply("ok"))
        (tmp_path / "assay.toml").write_text(
            f'[models.noprice]\nprovider = "openai"\nmodel = "mystery-model"\nbase_url = "{srv.url}"\n'
            "max_retries = 1\nretry_base_delay = 0.01\n")
        r = assay("run", str(task), "--agent", "noprice", "-q", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    rep = report(tmp_path)
    assert rep["runs"][0]["usage"]["cost_usd"] is None
    assert rep["agents"][0]["cost_usd"] is None


def test_images_reach_the_model(tmp_path: Path) -> None:
    import base64

    png = base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
    folder = tmp_path / "tasks" / "img"
    answer_task(folder, images=["chart.png"])
    (folder / "chart.png").write_bytes(png)
    for provider, cls in (("openai", FakeOpenAIServer), ("anthropic", FakeAnthropicServer)):
        with cls() as srv:
            srv.script(reply("", [("write_file", {"path": "answer.txt", "content": "42"})]), reply("ok"), reply("ok"))
            (tmp_path / "assay.toml").unlink(missing_ok=True)
            model_alias(tmp_path, "fake", provider, srv.url)
            r = assay("run", str(folder), "--agent", "fake", "-q", "--campaign", provider, cwd=tmp_path)
            assert r.returncode == 0, r.stderr
            assert srv.images, f"{provider}: no image reached the server"
