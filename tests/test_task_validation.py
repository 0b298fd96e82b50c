"""Every validation rule of SPEC.md: refused with exit 2, a precise message, nothing written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers import assay, assay_process, write_task

BASE: dict[str, Any] = {
    "title": "t", "execution": "single-step", "prompt": "Say hi.", "answer_path": "answer.txt",
    "contract": [{"path": "answer.txt", "predicate": "regex", "pattern": "hi"}],
}
RUBRIC: dict[str, Any] = {
    "title": "r", "execution": "single-step", "prompt": "Explain.",
    "rubric": {"items": [
        {"id": "a", "text": "mentions x", "weight": 5, "tag": "FI", "check": {"regex": "x"}},
        {"id": "b", "text": "no y", "weight": -5, "tag": "SF", "check": {"regex": "y"}},
    ]},
}


def _with(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = {k: v for k, v in base.items()}
    for k, v in changes.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def _items(*weights: Any, tag: str = "FI") -> dict[str, Any]:
    return {"items": [{"id": str(i), "text": f"item {i}", "weight": w, "tag": tag, "check": {"regex": "z"}}
                      for i, w in enumerate(weights)]}


CASES: list[tuple[str, dict[str, Any], str, str]] = [
    ("unknown-field", _with(BASE, colour="blue"), "colour", "unknown field"),
    ("missing-prompt", _with(BASE, prompt=None), "prompt", "missing brief/prompt"),
    ("zero-weight", _with(RUBRIC, rubric=_items(5, 0)), "weight", "zero"),
    ("nan-weight", _with(RUBRIC, rubric=_items(5, "ten")), "weight", "not a number"),
    ("weight-too-high", _with(RUBRIC, rubric=_items(11)), "weight", "outside [-20, 10]"),
    ("weight-too-low", _with(RUBRIC, rubric=_items(5, -21)), "weight", "outside [-20, 10]"),
    ("no-positive", _with(RUBRIC, rubric=_items(-3, -2)), "rubric.items", "no positive weight"),
    ("bad-tag", _with(RUBRIC, rubric=_items(5, tag="XX")), "tag", "unknown capability tag"),
    ("abs-contract-path", _with(BASE, contract=[{"path": "/etc/passwd", "predicate": "exists"}]),
     "contract[0].path", "absolute"),
    ("dotdot-contract-path", _with(BASE, contract=[{"path": "../x", "predicate": "exists"}]),
     "contract[0].path", "escapes"),
    ("dotdot-workspace-file", _with(BASE, workspace_files=[{"path": "../../x", "content": "a"}]),
     "workspace_files[0].path", "escapes"),
    ("unknown-predicate", _with(BASE, contract=[{"path": "a", "predicate": "telepathy"}]),
     "contract.0.predicate", "Input should be"),
    ("unknown-grader", _with(BASE, grading={"type": "vibes"}), "grading.type", "Input should be"),
    ("negative-budget", _with(BASE, budget={"minutes": -1}), "budget", "negative"),
    ("negative-value", _with(BASE, value={"amount": -5, "currency": "USD"}), "value", "negative"),
    ("unknown-currency", _with(BASE, value={"amount": 5, "currency": "XYZ"}), "value", "unknown currency"),
    ("missing-L3", _with(BASE, briefs={"L0": "all facts"}), "briefs.L3", "missing required level brief"),
    ("missing-L0", _with(BASE, briefs={"L3": "ask"}), "briefs.L0", "missing required level brief"),
    ("placeholder", _with(BASE, prompt="Use {{threshold}} here"), "prompt", "unfilled placeholder"),
    ("unknown-tool", _with(BASE, tools=["teleport"]), "tools[0]", "unknown tool"),
    ("nul-in-id", _with(BASE, id="a\x00b"), "id", "NUL"),  # no PostgreSQL text holds one
]


def _check_refused(r: Any, cwd: Path, *needles: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    msg = " ".join(r.stderr.split())
    for n in needles:
        assert n in msg, f"{n!r} not in {msg!r}"
    assert "Traceback" not in r.stderr
    assert not (cwd / ".assay").exists(), "a refused command wrote a store"


@pytest.mark.parametrize(("name", "spec", "field", "reason"), CASES, ids=[c[0] for c in CASES])
def test_bad_native_task_is_refused(tmp_path: Path, name: str, spec: dict[str, Any], field: str, reason: str) -> None:
    folder = write_task(tmp_path / "tasks" / name, spec)
    for cmd in ("validate", "run"):
        r = assay(cmd, str(folder), cwd=tmp_path)
        _check_refused(r, tmp_path, "task.yaml", field, reason)


def test_yaml_parse_error_has_line_and_column(tmp_path: Path) -> None:
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "task.yaml").write_text("title: ok\nprompt: [unclosed\nexecution: single-step\n")
    r = assay("validate", str(folder), cwd=tmp_path)
    _check_refused(r, tmp_path, "task.yaml:", "does not parse as YAML")
    import re

    assert re.search(r"task\.yaml:\d+:\d+", r.stderr.replace("\n", ""))


def test_invalid_json_task_is_refused_with_position(tmp_path: Path) -> None:
    bad = tmp_path / "case.json"
    bad.write_text('{"prompt": "x", "rubrics": [\n  {"rubric_number": 1,, }\n]}')
    r = assay("validate", str(bad), cwd=tmp_path)
    _check_refused(r, tmp_path, "case.json:2:", "does not parse as JSON")


def test_duplicate_ids_in_one_campaign(tmp_path: Path) -> None:
    write_task(tmp_path / "a" / "one", _with(BASE, id="same"))
    write_task(tmp_path / "b" / "two", _with(BASE, id="same"))
    r = assay("run", str(tmp_path / "a"), str(tmp_path / "b"), cwd=tmp_path)
    _check_refused(r, tmp_path, "duplicate task id 'same'")


def test_path_without_tasks(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("nothing here")
    r = assay("run", str(empty), cwd=tmp_path)
    _check_refused(r, tmp_path, "no tasks found in")
    r = assay("validate", str(tmp_path / "missing"), cwd=tmp_path)
    _check_refused(r, tmp_path, "no such file or folder")


def test_judge_needed_but_not_given(tmp_path: Path) -> None:
    spec = _with(RUBRIC)
    spec["rubric"] = {"items": [{"id": "a", "text": "is insightful", "weight": 5, "tag": "AR"}]}
    write_task(tmp_path / "tasks" / "needs-judge", spec)
    r = assay("run", str(tmp_path / "tasks"), "--agent", "noop", cwd=tmp_path)
    _check_refused(r, tmp_path, "--judge", "needs-judge")


def test_bad_options_are_refused(tmp_path: Path) -> None:
    folder = write_task(tmp_path / "tasks" / "ok", BASE)
    for args, needle in ((["--agent", "martian/llm"], "unknown agent spec"),
                         (["--level", "L9"], "--level"),
                         (["--epochs", "0"], "--epochs"),
                         (["--judge-mode", "vibes"], "--judge-mode"),
                         (["--agent", "human:alice"], "web app"),
                         (["--agent", "script:/nonexistent.jsonl"], "script file not found"),
                         (["--task", "nope"], "no task with id 'nope'")):
        r = assay("run", str(folder), *args, cwd=tmp_path)
        _check_refused(r, tmp_path, needle)


def test_bad_script_line_is_refused(tmp_path: Path) -> None:
    folder = write_task(tmp_path / "tasks" / "ok", BASE)
    script = tmp_path / "s.jsonl"
    script.write_text('{"tool": "list_files", "args": {}}\n{"tool": "x", "say": "y"}\n')
    r = assay("run", str(folder), "--agent", f"script:{script}", cwd=tmp_path)
    _check_refused(r, tmp_path, "s.jsonl:2", "exactly one of")


def test_bad_assay_toml(tmp_path: Path) -> None:
    folder = write_task(tmp_path / "tasks" / "ok", BASE)
    (tmp_path / "assay.toml").write_text('[models.x]\nprovider = "openai"\nmodel = "m"\ncolour = 1\n')
    r = assay("run", str(folder), cwd=tmp_path)
    _check_refused(r, tmp_path, "assay.toml", "models.x.colour", "unknown field")


def test_model_and_script_agents_refuse_without_bubblewrap(tmp_path: Path) -> None:
    """No bwrap on PATH: script/model agents are refused up front unless --unsafe-no-sandbox,
    which is then recorded on every run (sandbox: none)."""
    import json
    import os

    os.chmod(tmp_path, 0o711)
    folder = write_task(tmp_path / "tasks" / "ok", _with(BASE, execution="multi-step-with-tools", answer_path=None))
    script = tmp_path / "s.jsonl"
    script.write_text(json.dumps({"tool": "write_file", "args": {"path": "answer.txt", "content": "hi"}}) + "\n")
    no_bwrap = {"PATH": str(tmp_path / "empty-bin")}
    r = assay_process("run", str(folder), "--agent", f"script:{script}", cwd=tmp_path, env=no_bwrap)
    _check_refused(r, tmp_path, "bubblewrap is not installed", "--unsafe-no-sandbox")
    r = assay_process("run", str(folder), "--agent", f"script:{script}", "--unsafe-no-sandbox", "-q",
              "--json", "r.json", cwd=tmp_path, env=no_bwrap)
    assert r.returncode == 0, r.stderr
    (run,) = json.loads((tmp_path / "r.json").read_text())["runs"]
    assert run["sandbox"] == "none" and run["passed"] is True
