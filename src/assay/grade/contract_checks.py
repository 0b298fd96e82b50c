"""A contract task's automated checks: task code run in a sandbox on a copy of the workspace.

Automated checks are task code, and they read what the agent left behind, so they never
run in the assay process. Each check run gets a fresh bubblewrap sandbox (no network, its
own pid space, only /usr of the host) working on a COPY of the delivered workspace at
/workspace, with a time limit (default 60 s, env
`ASSAY_CHECK_TIMEOUT_S`). A small stdlib runner and the inputs are bound read-only at
/run/assay/checks; the checks code and a per-run random marker reach the runner on its
standard input only, and it makes itself non-dumpable, so the agent's code the checks start
(as the same uid) can neither read the expected values nor forge the result
(`assay/env/inside/check_runner.py`). The runner prints one JSON line behind the marker. Checks run on what the agent delivered, so anything else (a crash, a timeout, no
JSON, no numeric value) raises GradingFault: the checks score 0 and the fault is in
`grade.faults` (SPEC "who failed decides"); the task is broken when the same happens on its
own reference. A value that is a non-finite number counts 0 in the mean, with a fault: a NaN
must not drop a failing check out of the mean. Only what the harness could not do (start the
sandbox) is a GraderError, a void run.
When bubblewrap cannot run on this machine at all (only possible with
`--unsafe-no-sandbox`), the same runner runs as a plain subprocess (still never in-process).

- DareBench style (`checks_style: darebench`): `grade(transcript, workspace_path)`, where
  `transcript` is the run as an OpenClaw session log (the event shape upstream checks read:
  `session`, `model_change`, `message` user / assistant with `thinking`, `toolCall`, `text`
  items / `toolResult`), also present as /run/assay/checks/transcript.jsonl.
- native style (`checks_file`): `grade(workspace_path, final_message)`.
- both return `{name: number}`; the automated score is the plain mean of the numeric values
  (booleans count 0/1), as upstream's `_average_scores`, then clipped to [0, 1]; an empty
  dict scores 0. Without any checks code (a native
  task graded by its contract alone) the automated score is the share of contract predicates
  that hold, required or not.
- contract predicate `python`: `function` from the task's checks code is called with the
  artifact's path inside the sandbox and must return a truthy value (or `[ok, reason]`);
  `make_python_check` gives the callable `check_contract` takes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import math
import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Any

from assay import jsonlimits
from assay.config import settings
from assay.env.bwrap import bwrap_available
from assay.env.inside import source
from assay.env.limits import Limits
from assay.env.sandbox import Sandbox
from assay.env.volume import WorkspaceVolume
from assay.env.workspace import discard_copy, grading_copy, grading_copy_limits
from assay.errors import GraderError, GradingFault, HarnessError
from assay.grade.contract import PythonCheck
from assay.grade.openclaw import to_openclaw
from assay.procpool import waited
from assay.record import Event
from assay.task.model import Task

__all__ = ["CHECKS_FILE_BYTES", "CheckValue", "CopyRefusals", "check_mean", "make_python_check", "run_checks",
           "run_python_predicate"]

CHECKS_DIR = "/run/assay/checks"
RESULT_TEXT_CHARS = 2000  # a text value of a check's result is kept up to this length

RUNNER = source("check_runner.py")
"""The checks runner (`assay/env/inside/check_runner.py`), run by the sandbox's python."""


def _python() -> str:
    for cand in ("/usr/bin/python3", "/bin/python3"):
        if os.path.exists(cand):
            return cand
    raise GraderError("no /usr/bin/python3 to run checks with in the sandbox")


CHECKS_FILE_BYTES = 256 * 1024**2
"""Files of the agent's workspace over this size are left out of the checks' copy (recorded)."""


async def _run_sandboxed(checks_code: str, mode: str, workspace: Path | None, files: dict[str, str],
                         timeout_s: float, refused: CopyRefusals | None = None,
                         capped: list[str] | None = None, part: str = "checks") -> Any:
    """Run the runner in a fresh sandbox on a copy of `workspace` (`grading_copy`: on a volume
    with the run's disk quota, capped by `grading_copy_limits`, files over 256 MiB left out);
    return the decoded result. What the copy left out is added to `refused`, the ceilings it
    reached to `capped`."""
    base = Path(tempfile.mkdtemp(prefix="assay-checks-"))
    volume: WorkspaceVolume | None = None
    try:
        os.chmod(base, 0o711)
        cdir = base / "checks"
        cdir.mkdir()
        # The checks code goes to the runner on its standard input, never into a file: code
        # the checks start (the agent's) runs as the same uid and could read any file of it.
        (cdir / "runner.py").write_text(RUNNER, encoding="utf-8")
        for name, text in files.items():
            (cdir / name).write_text(text, encoding="utf-8")
        for p in cdir.iterdir():
            os.chmod(p, 0o644)
        os.chmod(cdir, 0o755)
        ws = base / "workspace"
        isolated = bwrap_available()
        inside_checks = CHECKS_DIR if isolated else str(cdir)
        marker = f"@@assay-result-{secrets.token_hex(8)}@@"
        limits = Limits(cpu_seconds=int(timeout_s) + 5, capture_bytes=2_000_000)
        try:
            sandbox = Sandbox(ws, isolated=isolated, ro_binds=[(cdir, CHECKS_DIR)] if isolated else (),
                              env={"PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8"}, limits=limits)
        except HarnessError as e:
            raise GraderError(f"cannot start the checks sandbox: {e}") from None
        try:
            if workspace is not None:
                # The copy is made for the sandbox's uid, in the copy's own process: no walk of
                # a tree the agent made runs in the harness's interpreter (G17).
                copy_limits = dataclasses.replace(grading_copy_limits(), max_file_bytes=CHECKS_FILE_BYTES)
                copy = functools.partial(grading_copy, workspace, ws, limits=copy_limits, owner=sandbox.uid)
                volume, report = await waited(copy)
                if refused is not None:
                    refused.add(report.refused)
                if capped is not None:
                    capped.extend(report.capped)
            else:
                ws.mkdir()
            sandbox.prepare(owned=True)
            inner_ws = sandbox.inside_root
            given = json.dumps({"code": checks_code, "marker": marker}).encode()
            res = await sandbox.run([_python(), "-I", "-B", f"{inside_checks}/runner.py", mode, inside_checks,
                                     inner_ws], timeout_s=timeout_s, stdin=given)
        finally:
            await sandbox.close()
    finally:
        if volume is not None:
            await asyncio.to_thread(discard_copy, volume)
        shutil.rmtree(base, ignore_errors=True)
    return _result(res.output, res.timed_out, res.exit_code, marker, timeout_s, part)


REFUSED_KEPT = 1000
"""At most this many entries the checks' copy left out are listed in a grade (`copy_refused`);
past them one more entry says how many were not listed."""
MORE = ""
"""The path of the entry that counts the refusals not listed: no entry of a tree has an empty path."""


@dataclasses.dataclass
class CopyRefusals:
    """What the checks' copies of one run left out (path, reason), each once, the first
    `REFUSED_KEPT` listed and the rest counted: an agent can make a copy refuse 100,000 links,
    and neither the grade nor the time to build it may grow with them (a membership test
    against the growing list took 49 s for 90,000 on the event loop)."""

    listed: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    unlisted: int = 0
    seen: set[tuple[str, str]] = dataclasses.field(default_factory=set)

    def add(self, new: list[tuple[str, str]]) -> None:
        for r in new:
            if r in self.seen:
                continue
            self.seen.add(r)
            if len(self.listed) < REFUSED_KEPT:
                self.listed.append(r)
            else:
                self.unlisted += 1

    def entries(self) -> list[tuple[str, str]]:
        """The grade's `copy_refused`: the listed entries, then one counting the rest."""
        more = [(MORE, f"and {self.unlisted} more entries left out of the copy, not listed")] if self.unlisted else []
        return [*self.listed, *more]


RESULT_DEPTH = 64
"""A check's result nested deeper than this is refused (the check's own output, parsed by root)."""


def _result(output: str, timed_out: bool, exit_code: int | None, marker: str, timeout_s: float, part: str) -> Any:
    """The checks runner's result line, decoded; GradingFault for whatever else it left."""
    tail = output[-1500:].strip()
    if timed_out:
        raise GradingFault(part, f"check timed out after {timeout_s:g} s (killed)")
    if exit_code != 0:  # the exception's own line says what went wrong; the traceback is in the log
        lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
        raise GradingFault(part, f"check crashed (exit {exit_code}): {lines[-1][:500] if lines else 'no output'}")
    lines = [ln for ln in output.splitlines() if ln.startswith(marker)]
    if not lines:
        raise GradingFault(part, f"check printed no result: {tail or 'no output'}")
    if len(lines) > 1:  # the runner prints one and ends: the others came from code the checks ran
        raise GradingFault(part, f"the checks' output holds {len(lines)} result lines, and the runner prints one: "
                                 "code the checks ran forged the others")
    try:
        return jsonlimits.loads(lines[0][len(marker):], max_depth=RESULT_DEPTH)
    except jsonlimits.JSONLimitError as e:
        raise GradingFault(part, f"check result refused: {e}") from None


def _checks_source(task: Task, *, need_grade: bool = True) -> tuple[str, str] | None:
    """(code, style) of the task's checks, or None (also when `need_grade` and the native
    checks file only holds `python` predicate functions: then the contract decides)."""
    g = task.grading
    if g is None:
        return None
    if g.checks_code is not None:
        return g.checks_code, g.checks_style
    if g.checks_file is not None:
        try:
            code = Path(g.checks_file).read_text(encoding="utf-8")
        except OSError as e:
            raise GradingFault("checks", f"cannot read checks file {g.checks_file}: {e.strerror}") from None
        if need_grade and not _defines_grade(code):
            return None
        return code, "native"
    return None


def _defines_grade(code: str) -> bool:
    import ast

    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        raise GradingFault("checks", f"checks file does not parse: {e.msg} (line {e.lineno})") from None
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "grade" for n in tree.body)


CheckValue = float | str | None


def _scores(result: Any, faults: list[tuple[str, str]] | None = None) -> dict[str, CheckValue]:
    """A check's result dict as graded: numbers (booleans 0/1) as given; text values (an
    upstream `"error": "Expected ... got ..."`) kept as text, left out of the mean, as upstream
    does; a non-finite number (NaN, infinity, an integer too large for a float: what the agent's
    output parsed to) counts 0, and
    (name, reason) goes to `faults`. No numeric value at all is a GradingFault."""
    if not isinstance(result, dict):
        raise GradingFault("checks", f"check returned {type(result).__name__}, not a dict of scores")
    out: dict[str, CheckValue] = {}
    for k, v in result.items():
        if isinstance(v, bool):
            v = float(v)
        if isinstance(v, int | float):
            try:
                x = float(v)
            except OverflowError:  # an integer past a float's range is no more a number than infinity
                x, v = math.inf, f"an integer of {int(v).bit_length()} bits"
            if not math.isfinite(x):
                out[str(k)] = 0.0
                if faults is not None:
                    faults.append((f"checks:{k}", f"value {v!r} is not a finite number: scored 0"))
                continue
            out[str(k)] = x
        else:
            out[str(k)] = None if v is None else str(v)[:RESULT_TEXT_CHARS]
    if result and not any(isinstance(v, float) for v in out.values()):
        shown = ", ".join(f"{k!r}: {v!r}"[:200] for k, v in list(result.items())[:5])
        raise GradingFault("checks", f"check result has no numeric value (not a number: {shown})")
    return out


def check_mean(values: dict[str, CheckValue]) -> float:
    """The automated score of a check result: the mean of its numeric values (0 when empty),
    clipped to [0, 1] after the mean, as upstream averages the values as they are."""
    nums = [v for v in values.values() if isinstance(v, float)]
    return min(1.0, max(0.0, sum(nums) / len(nums))) if nums else 0.0


async def run_checks(task: Task, workspace: Path | None, events: list[Event], final_message: str,
                     *, timeout_s: float | None = None, model: str | None = None,
                     refused: CopyRefusals | None = None,
                     capped: list[str] | None = None,
                     faults: list[tuple[str, str]] | None = None) -> dict[str, CheckValue] | None:
    """The task's automated checks, sandboxed: name -> score in [0, 1]; None if it has none.
    Files the checks' copy of the workspace left out are added to `refused`, the ceilings
    it reached to `capped`, values scored 0 for not being finite to `faults`. GradingFault
    when the checks fail on the agent's work."""
    src = _checks_source(task)
    if src is None:
        return None
    code, style = src
    timeout_s = settings().check_timeout_s if timeout_s is None else timeout_s
    if style == "darebench":
        transcript = to_openclaw(events, task_id=task.id, model=model, final_message=final_message)
        files = {"transcript.jsonl": "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in transcript)}
        result = await _run_sandboxed(code, "darebench", workspace, files, timeout_s, refused, capped)
    else:
        result = await _run_sandboxed(code, "native", workspace, {"final_message.txt": final_message}, timeout_s,
                                      refused, capped)
    return _scores(result, faults)


async def run_python_predicate(task: Task, workspace: Path, function: str | None, path: str,
                               *, timeout_s: float | None = None) -> tuple[bool, str]:
    """Contract predicate `python`: the checks code's `function(artifact_path)`, sandboxed."""
    if not function:
        return False, "python predicate needs a function name"
    src = _checks_source(task, need_grade=False)
    if src is None:
        return False, "python predicate needs the task's checks file"
    result = await _run_sandboxed(src[0], "predicate", workspace,
                                  {"predicate.json": json.dumps({"function": function, "path": path})},
                                  settings().check_timeout_s if timeout_s is None else timeout_s,
                                  part=f"predicate:{path}")
    if isinstance(result, list) and len(result) == 2:
        return bool(result[0]), str(result[1])
    return bool(result), f"{function}() returned {result!r}"


def make_python_check(task: Task, workspace: Path, *, timeout_s: float | None = None) -> PythonCheck:
    """The `python_check(function, path)` `check_contract` awaits for `python` predicates. A
    crash or timeout raises GradingFault (the predicate fails, the fault is recorded)."""

    async def check(function: str | None, path: str) -> tuple[bool, str]:
        return await run_python_predicate(task, workspace, function, path, timeout_s=timeout_s)

    return check
