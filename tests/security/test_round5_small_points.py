"""Round 5 red team, class 7: small points (control and invisible characters in what people
read, tool arguments of odd types). Written without reading the other tests in tests/security/."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from assay.env.sandbox import bwrap_available
from tests.helpers import answer_task, assay, report, served

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")]

RAW = {"\x1b": "ESC", "\u202e": "RLO (bidi override)", "\u200b": "ZWSP", "\r": "CR", "\x07": "BEL"}
"""Characters that must never reach a reader raw: they rewrite, reorder or hide what is shown."""


def _cwd(tmp_path: Path) -> Path:
    os.chmod(tmp_path, 0o711)
    cwd = tmp_path / "w"
    cwd.mkdir()
    os.chmod(cwd, 0o711)
    return cwd


def _script(path: Path, lines: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return f"script:{path}"


def _hostile_suite(tmp_path: Path) -> Path:
    """A downloaded suite whose task folders (so task ids) carry terminal escapes and a bidi override."""
    suite = tmp_path / "suite"
    base = answer_task(tmp_path / "base")
    for name in ("invoice\u202etxt.exe", "ok\x1b]0;owned\x07\x1b[2J", "cr\rfake-task", "zw\u200bsp"):
        shutil.copytree(base, suite / name)
    return suite


def _raw(text: str) -> dict[str, int]:
    return {name: text.count(ch) for ch, name in RAW.items() if ch in text}


def test_the_markdown_report_shows_control_characters_escaped(tmp_path: Path) -> None:
    cwd = _cwd(tmp_path)
    suite = _hostile_suite(tmp_path)
    agent = _script(tmp_path / "a.jsonl", [{"tool": "write_file", "args": {"path": "answer.txt", "content": "42\n"}},
                                           {"say": "done"}])
    r = assay("run", str(suite), "--agent", agent, "-q", cwd=cwd)
    assert r.returncode == 0, r.stdout[-1000:] + r.stderr[-1000:]
    r = assay("report", "--md", "r.md", cwd=cwd)
    assert r.returncode == 0, r.stderr
    assert _raw((cwd / "r.md").read_text(encoding="utf-8")) == {}


def test_control_terminal_and_web_views_escape_hostile_task_ids_and_texts(tmp_path: Path) -> None:
    """Control: `assay run`, `runs`, `report`, `show`, `report --html` and the web app's pages
    show the same task ids, a file name with a bidi override and command output with ESC/NUL
    escaped."""
    cwd = _cwd(tmp_path)
    suite = _hostile_suite(tmp_path)
    agent = _script(tmp_path / "a.jsonl", [
        {"tool": "write_file", "args": {"path": "report\u202efdp.exe", "content": "x"}},
        {"tool": "run_command", "args": {"command": "printf 'a\\033[31mRED\\033]0;t\\007b'"}},
        {"tool": "list_files", "args": {}},
        {"tool": "write_file", "args": {"path": "answer.txt", "content": "42\n"}},
        {"say": "done \u202eevil\u200b \x1b[2J"}])
    r = assay("run", str(suite), "--agent", agent, cwd=cwd)
    assert r.returncode == 0, r.stdout[-1000:] + r.stderr[-1000:]
    assert _raw(r.stdout + r.stderr) == {}
    for args in (["runs"], ["report"]):
        r = assay(*args, cwd=cwd)
        assert r.returncode == 0 and _raw(r.stdout) == {}, args
    assert report(cwd)["runs"]
    rid = json.loads(assay("runs", "--json", cwd=cwd).stdout)["runs"][0]["run_id"]
    r = assay("show", rid, cwd=cwd)
    assert r.returncode == 0 and _raw(r.stdout) == {}
    assert assay("report", "--html", "r.html", cwd=cwd).returncode == 0
    assert _raw((cwd / "r.html").read_text(encoding="utf-8")) == {}
    import urllib.request

    with served(cwd) as (base, _port, _proc):
        for path in ("/", "/campaigns/default", f"/runs/{rid}"):
            with urllib.request.urlopen(base + path, timeout=30) as resp:
                assert _raw(resp.read().decode("utf-8")) == {}, path


def test_control_odd_tool_arguments_are_tool_errors_and_the_run_goes_on(tmp_path: Path) -> None:
    """Control: arguments of odd types and values are tool errors the agent reads; the run is
    then graded as usual (not void)."""
    cwd = _cwd(tmp_path)
    answer_task(tmp_path / "suite" / "t")
    odd = [
        {"tool": "write_file", "args": {"path": {"$ref": "#"}, "content": "x"}},
        {"tool": "write_file", "args": {"path": "a.txt", "content": ["x"]}},
        {"tool": "read_file", "args": {"path": "README.md", "offset": -1}},
        {"tool": "read_file", "args": {"path": "README.md", "offset": 10**18, "limit": 10**18}},
        {"tool": "run_command", "args": {"command": "true", "timeout_s": 1e-320}},
        {"tool": "run_command", "args": {"command": "true", "timeout_s": -0.0}},
        {"tool": "run_command", "args": {"command": "true", "cwd": "."  * 200}},
        {"tool": "run_command", "args": {"command": "true", "cwd": "/"}},
        {"tool": "list_files", "args": {"path": "README.md\x00"}},
        {"tool": "edit_file", "args": {"path": "README.md", "old_text": "hello", "new_text": None}},
        {"tool": "no_such_tool", "args": {"x": 1}},
        {"tool": "write_file", "args": {"path": "answer.txt", "content": "42\n"}},
        {"say": "done"},
    ]
    r = assay("run", str(tmp_path / "suite"), "--agent", _script(tmp_path / "odd.jsonl", odd), "-q", cwd=cwd)
    assert r.returncode == 0, r.stdout[-1000:] + r.stderr[-1000:]
    run = report(cwd)["runs"][0]
    assert (run["status"], run["score"]) == ("done", 1.0), run
