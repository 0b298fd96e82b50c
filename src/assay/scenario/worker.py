"""The grading worker: a case's own code, run in a process of its own, outside the sandbox.

`python -m assay.scenario.worker build --case DIR --build FILE --workspace WS` runs the
case's `build(workspace)` (the world the agent starts in). `python -m assay.scenario.worker
grade --case DIR --workspace WS --ctx CTX.json --out OUT.json --python WRAPPER [--two-arg]
[--pilot-day N] [--grader FILE] [--pilot FILE]` runs its `grade(ws[, ctx])`, or with
`--pilot-day` its `pilot.run(ws, N)`, on a copy of the workspace. The case's code is trusted
task code holding the held-out truth; its variant parameters are in this process's
environment; the parent enforces the time limit (`assay.scenario.grading`). While `grade()`
runs, `sys.executable` names the wrapper (`assay/env/inside/grader_wrapper.py`), so whatever
the grader starts with `[sys.executable, ...]` (the delivered system) runs sandboxed.

OUT.json receives `{"ok": true, "result": {...}}` or `{"ok": false, "error": "...", "retry":
bool}`; `retry` is true only when the grader asked for it (`"retry": true` in its dict). An
exception is never a retry, whatever its message says: the message may quote the delivered
system's output, and a void run is not the agent's to choose (the harness sees the company
LLM gateway's own faults itself).

Only the standard library is imported: the worker must start fast and must not drag the
harness into the grader's process.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

__all__ = ["main", "run_build", "run_grader", "run_pilot"]


def _load(case: Path, path: Path, name: str) -> Any:
    """Import a case file as module `name`, with the case folder and the file's own on sys.path."""
    sys.dont_write_bytecode = True
    for d in (case, path.parent):
        if str(d) not in sys.path:
            sys.path.insert(0, str(d))
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def run_build(case: Path, build: Path, workspace: Path) -> None:
    """The case's `build(workspace)`."""
    _load(case, build, "build_world").build(str(workspace))


def _load_grader(case: Path, path: Path | None = None) -> Any:
    mod = _load(case, path or case / "grader.py", "grader")
    if not callable(getattr(mod, "grade", None)):
        raise RuntimeError(f"{(path or case / 'grader.py').name} defines no grade() function")
    return mod


def _positional_params(fn: Any) -> int:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return 1
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in sig.parameters.values()):
        return 2
    return sum(1 for p in sig.parameters.values() if p.kind in kinds)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, set | frozenset):
        return sorted(_jsonable(v) for v in obj)
    if isinstance(obj, str | int | float | bool) or obj is None:
        return obj
    if isinstance(obj, Path):
        return str(obj)
    return str(obj)


def run_grader(case: Path, workspace: Path, ctx: dict[str, Any], python: Path, two_arg: bool,
               grader: Path | None = None) -> dict[str, Any]:
    mod = _load_grader(case, grader)
    call_ctx = dict(ctx)
    call_ctx["facts"] = set(ctx.get("facts", []))
    original = sys.executable
    sys.executable = str(python)
    try:
        if two_arg or _positional_params(mod.grade) >= 2:
            result = mod.grade(str(workspace), call_ctx)
        else:
            result = mod.grade(str(workspace))
    finally:
        sys.executable = original
    if not isinstance(result, dict):
        raise RuntimeError(f"grade() returned {type(result).__name__}, not a dict")
    return result


def run_pilot(case: Path, workspace: Path, day: int, python: Path, pilot: Path | None = None) -> dict[str, Any]:
    """The case's `pilot.run(workspace, day)`, delivered code contained as in grading."""
    mod = _load(case, pilot or case / "pilot.py", "pilot")
    original = sys.executable
    sys.executable = str(python)
    try:
        result = mod.run(str(workspace), day)
    finally:
        sys.executable = original
    return result if isinstance(result, dict) else {"feedback": str(result)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m assay.scenario.worker")
    sub = parser.add_subparsers(dest="command")
    bp = sub.add_parser("build", help="the case's build(workspace): the world the agent starts in")
    bp.add_argument("--case", required=True, type=Path)
    bp.add_argument("--build", required=True, type=Path)
    bp.add_argument("--workspace", required=True, type=Path)
    ap = sub.add_parser("grade", help="the case's grade() (or pilot.run()) on a copy of the workspace")
    ap.add_argument("--case", required=True, type=Path)
    ap.add_argument("--workspace", required=True, type=Path)
    ap.add_argument("--ctx", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--python", required=True, type=Path)
    ap.add_argument("--two-arg", action="store_true")
    ap.add_argument("--pilot-day", type=int, default=None)
    ap.add_argument("--grader", type=Path, default=None, help="the grader file (default: CASE/grader.py)")
    ap.add_argument("--pilot", type=Path, default=None, help="the pilot file (default: CASE/pilot.py)")
    a = parser.parse_args(argv)
    if a.command == "build":
        run_build(a.case, a.build, a.workspace)
        return 0
    if a.command != "grade":
        parser.error("a command is required: build or grade")
    ctx = json.loads(a.ctx.read_text(encoding="utf-8"))
    try:
        if a.pilot_day is not None:
            result = run_pilot(a.case, a.workspace, a.pilot_day, a.python, a.pilot)
        else:
            result = run_grader(a.case, a.workspace, ctx, a.python, a.two_arg, a.grader)
        out: dict[str, Any] = {"ok": True, "result": _jsonable(result)}
        if result.get("retry"):
            out = {"ok": False, "retry": True, "error": f"grader asked for a retry: {result.get('summary', '')}",
                   "result": _jsonable(result)}
    except BaseException as e:  # everything is reported to the parent, which voids the run
        msg = f"{type(e).__name__}: {e}"
        out = {"ok": False, "error": msg[:2000], "traceback": traceback.format_exc(limit=12)[-8000:],
               "retry": False}
    tmp = a.out.with_name(a.out.name + ".tmp")
    tmp.write_text(json.dumps(out, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
