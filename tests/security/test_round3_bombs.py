"""Round 3, class 2: one input stalling or crashing everyone.

Inputs the user hands the CLI (a script agent's file, assay.toml, an Inspect log to import)
and a task whose JSON Schema holds a catastrophic pattern: exit 2 naming the file (fast), or
the task fails alone while the other runs of the campaign finish.
"""

from __future__ import annotations

import time
import zipfile
from pathlib import Path

import pytest

from assay.env.bwrap import bwrap_available
from tests.helpers import HOSTILE_S, answer_task, assay
from tests.security._round3 import home, run, script, task


def _refused(r: object, *needles: str) -> None:
    out = getattr(r, "stderr", "")
    assert getattr(r, "returncode", None) == 2, out
    assert "Traceback" not in out and all(n in out for n in needles), out


@pytest.mark.parametrize("line", [
    '{"tool": "list_files", "args": ' + "[" * 100_000 + "]" * 100_000 + "}",
    '{"tool": "list_files", "args": {"path": ' + "9" * 5000 + "}}",
])
def test_a_script_agent_file_nested_deep_or_with_a_huge_integer_is_exit_2(tmp_path: Path, line: str) -> None:
    """Before round 3: a RecursionError / ValueError traceback (exit 1), and no run of any agent."""
    answer_task(tmp_path / "t")
    (tmp_path / "bomb.jsonl").write_text(line + "\n")
    t0 = time.monotonic()
    r = assay("run", str(tmp_path / "t"), "--agent", "script:bomb.jsonl", "--agent", "noop", "-q", cwd=tmp_path)
    _refused(r, "bomb.jsonl:1")
    assert time.monotonic() - t0 < HOSTILE_S


@pytest.mark.parametrize("text", ["a = " + "[" * 100_000 + "]" * 100_000, "a = " + "{x = " * 5000 + "1" + "}" * 5000])
def test_an_assay_toml_nested_deep_is_exit_2(tmp_path: Path, text: str) -> None:
    """tomllib recurses once per array or inline table: a traceback before round 3."""
    answer_task(tmp_path / "t")
    (tmp_path / "assay.toml").write_text(text + "\n")
    _refused(assay("run", str(tmp_path / "t"), "--agent", "noop", "-q", cwd=tmp_path), "assay.toml")


def test_an_inspect_log_that_is_a_zip_bomb_is_refused_before_it_is_unpacked(tmp_path: Path) -> None:
    """300 KB of zip unpacking to 300 MB of whitespace took 700 MB of memory to refuse; 3 MB of
    it would take 7 GB. Refused from the zip's directory now, before Inspect reads a byte."""
    pytest.importorskip("inspect_ai")
    bomb = tmp_path / "bomb.eval"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z, z.open("header.json", "w") as f:
        f.write(b'{"version": 2, "status": "success", "eval": {')
        for _ in range(300):
            f.write(b" " * (1 << 20))
        f.write(b"}}")
    t0 = time.monotonic()
    _refused(assay("import", "inspect", str(bomb), cwd=tmp_path), "bomb.eval", "header.json", "zip bomb")
    assert time.monotonic() - t0 < HOSTILE_S


@pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")
def test_a_json_schema_with_a_catastrophic_pattern_is_graded_in_linear_time(tmp_path: Path) -> None:
    """A JSON Schema `pattern` runs on RE2 like every task pattern (`assay.task.json_schemas`):
    `^(a+)+$` on 40 a's and a '!' (hours for Python's `re`, which jsonschema uses) is a plain
    mismatch, scored 0 at once with the reason; the reference's matching name scores 1, and the
    other task's runs are untouched."""
    cwd = home(tmp_path)
    task(cwd / "tasks" / "redos", {
        "title": "t", "domain": "test", "prompt": "Write out.json.",
        "contract": [{"path": "out.json", "predicate": "json", "schema": {
            "type": "object", "properties": {"name": {"type": "string", "pattern": "^(a+)+$"}}}}],
        "reference": {"artifacts": "ref"}}, {"ref/out.json": '{"name": "' + "a" * 40 + '"}', "workspace/R.md": "x"})
    answer_task(cwd / "tasks" / "good")
    agent = script(cwd / "agent.jsonl", [
        {"tool": "write_file", "args": {"path": "out.json", "content": '{"name": "' + "a" * 40 + '!"}'}},
        {"tool": "write_file", "args": {"path": "answer.txt", "content": "42\n"}}, {"say": "done"}])
    t0 = time.monotonic()
    runs = run(cwd, str(cwd / "tasks"), "--agent", agent, "--agent", "reference", "--concurrency", "4",
               env={"ASSAY_PREDICATE_TIMEOUT_S": "30"})
    assert time.monotonic() - t0 < HOSTILE_S
    assert runs[("good", agent)]["status"] == "done" and runs[("good", agent)]["score"] == 1.0
    assert runs[("good", "reference")]["score"] == 1.0
    assert runs[("redos", "reference")]["status"] == "done" and runs[("redos", "reference")]["score"] == 1.0
    assert runs[("redos", agent)]["status"] == "done" and runs[("redos", agent)]["score"] == 0.0
