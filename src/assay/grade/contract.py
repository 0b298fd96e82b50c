"""Artifact contracts: each (path, predicate) pair checked on the delivered workspace.

`Sat` is the product of the per-pair results (DAREBench): every required artifact exists
and its predicate holds. Each failure carries the reason, so a user sees why.
"""

from __future__ import annotations

import csv
import io
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path

from pydantic import BaseModel

from assay import jsonlimits
from assay.config import settings
from assay.errors import GradingFault
from assay.fs.paths import PathError
from assay.fs.reads import entry_kind, read_workspace_file
from assay.grade import workers
from assay.grade.numbers import parse_number
from assay.task.json_schemas import validator
from assay.task.model import Predicate
from assay.task.patterns import compile_pattern

MAX_READ = 20 * 1024 * 1024


class PredicateResult(BaseModel):
    path: str
    predicate: str
    ok: bool
    reason: str
    fault: bool = False  # the predicate's program failed on the artifact (a `python` check that crashed)


def _flags(spec: str | None) -> str:
    """A predicate's `flags` (letters of i, m, s, x; others are refused when the task is validated)."""
    return spec or ""


def image_info(data: bytes) -> tuple[str, int, int] | None:
    """(format, width, height) for PNG, JPEG and GIF, read from the header bytes."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        w, h = struct.unpack(">II", data[16:24])
        return "png", w, h
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        w, h = struct.unpack("<HH", data[6:10])
        return "gif", w, h
    if data[:2] == b"\xff\xd8":
        i = 2
        while i + 9 < len(data):
            if data[i] != 0xFF:
                i += 1
                continue
            marker = data[i + 1]
            if marker in (0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF):
                h, w = struct.unpack(">HH", data[i + 5:i + 9])
                return "jpeg", w, h
            seg = struct.unpack(">H", data[i + 2:i + 4])[0]
            i += 2 + seg
        return "jpeg", 0, 0
    return None


def _within(actual: float, want: float, tol: float, relative: bool) -> bool:
    if relative:
        return abs(actual - want) <= tol * max(abs(want), 1e-12)
    return abs(actual - want) <= tol + 1e-12


PythonCheck = Callable[[str | None, str], Awaitable[tuple[bool, str]]]
"""Contract predicate `python`: the checks code's function, run sandboxed (`contract_checks`)."""


Verdict = tuple[bool, str]


def _non_empty(pred: Predicate, data: bytes) -> Verdict:
    return (True, "non-empty") if data.strip() else (False, "empty")


def _image(pred: Predicate, data: bytes) -> Verdict:
    info = image_info(data)
    if info is None:
        return False, "not a PNG, JPEG or GIF image"
    fmt, w, h = info
    want = (pred.format or "").lower().replace("jpg", "jpeg")
    if want and fmt != want:
        return False, f"image is {fmt}, expected {want}"
    for name, val, lo, hi in (("width", w, pred.min_width, pred.max_width),
                              ("height", h, pred.min_height, pred.max_height)):
        if lo is not None and val < lo:
            return False, f"{name} {val} < {lo}"
        if hi is not None and val > hi:
            return False, f"{name} {val} > {hi}"
    return True, f"{fmt} {w}x{h}"


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _regex(pred: Predicate, data: bytes) -> Verdict:
    """RE2 runs the task's pattern, in time linear in the artifact (`assay.task.patterns`)."""
    if compile_pattern(pred.pattern or "", _flags(pred.flags), captures=False).search(_text(data)):
        return True, "pattern found"
    return False, f"pattern {pred.pattern!r} not found"


JSON_DEPTH = 256
"""An artifact nested deeper than this is not accepted as JSON (it would make the parser recurse)."""


def _json(pred: Predicate, data: bytes) -> Verdict:
    try:
        doc = jsonlimits.loads(_text(data), max_depth=JSON_DEPTH, max_chars=MAX_READ)
    except jsonlimits.JSONLimitError as e:
        return False, str(e)
    if pred.json_schema is not None:
        from jsonschema.exceptions import best_match

        error = best_match(validator(pred.json_schema).iter_errors(doc))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(root)"
            return False, f"schema: at {where}: {error.message}"
    return True, "valid JSON"


def _csv(pred: Predicate, data: bytes) -> Verdict:
    try:
        rows = list(csv.reader(io.StringIO(_text(data))))
    except csv.Error as e:
        return False, f"not CSV: {e}"
    rows = [r for r in rows if any(c.strip() for c in r)]
    if not rows:
        return False, "empty CSV"
    header = [c.strip() for c in rows[0]]
    missing = [c for c in (pred.columns or []) if c not in header]
    if missing:
        return False, f"missing columns {missing} (header: {header})"
    n = len(rows) - 1
    if pred.min_rows is not None and n < pred.min_rows:
        return False, f"{n} data rows < {pred.min_rows}"
    if pred.max_rows is not None and n > pred.max_rows:
        return False, f"{n} data rows > {pred.max_rows}"
    return True, f"{n} data rows"


def _number(pred: Predicate, data: bytes) -> Verdict:
    text = _text(data)
    if pred.pattern:
        m = compile_pattern(pred.pattern, _flags(pred.flags)).search(text)  # RE2: linear time
        raw = (m.group(1) if m and m.groups() else m.group(0)) if m else None
        num = parse_number(raw) if raw is not None else None
    else:
        num = parse_number(text)
    if num is None:
        return False, "no number found"
    if pred.value is None:
        return True, f"number {num:g}"
    if _within(num, pred.value, pred.tolerance, pred.relative):
        return True, f"{num:g} within {pred.tolerance:g} of {pred.value:g}"
    return False, f"{num:g} is not within {pred.tolerance:g} of {pred.value:g}"


ON_CONTENT: dict[str, Callable[[Predicate, bytes], Verdict]] = {
    "non_empty": _non_empty, "image": _image, "regex": _regex, "json": _json, "csv": _csv, "number": _number,
}
"""The predicates decided on an artifact's bytes (`exists` needs none, `python` runs sandboxed)."""


def check_predicate(workspace: Path, pred: Predicate) -> PredicateResult:
    """Evaluate one predicate (not `python`); never raises on bad artifacts (that is a failed
    predicate; one the artifact's bytes make raise is also a fault). The artifact is opened without following a link on its path and without
    opening a FIFO or device: those are refused, like a file over MAX_READ bytes."""

    def res(ok: bool, reason: str) -> PredicateResult:
        return PredicateResult(path=pred.path, predicate=pred.predicate, ok=ok, reason=reason)

    try:
        kind = entry_kind(workspace, pred.path)
    except PathError as e:
        return res(False, f"path refused: {e}")
    if kind is None:
        return res(False, "missing")
    if kind in ("link", "special"):
        return res(False, f"refused: {pred.path} is a {'symlink' if kind == 'link' else 'special file'}, "
                          "not a regular file")
    if pred.predicate == "exists":
        return res(True, "exists")
    if kind == "dir":
        return res(False, "is a folder, not a file")
    decide = ON_CONTENT.get(pred.predicate)
    if decide is None:
        return res(False, f"unknown predicate {pred.predicate!r}")
    try:
        data = read_workspace_file(workspace, pred.path, MAX_READ)
    except PathError as e:
        return res(False, f"refused: {e}")
    try:
        return res(*decide(pred, data))
    except RecursionError:  # a task's recursive schema on a deep artifact (the worker's own limit)
        return PredicateResult(path=pred.path, predicate=pred.predicate, ok=False, fault=True,
                               reason=f"the {pred.predicate} predicate passed its recursion limit on this artifact")
    except Exception as e:  # noqa: BLE001 (whatever the artifact's bytes make a predicate raise is the artifact's)
        # e.g. jsonschema's `multipleOf` on a number past a float's range (OverflowError): a
        # failed predicate with the fault recorded, never a void run (SPEC "who failed decides")
        return PredicateResult(path=pred.path, predicate=pred.predicate, ok=False, fault=True,
                               reason=f"the {pred.predicate} predicate failed on this artifact: "
                                      f"{type(e).__name__}: {str(e)[:300]}")


async def _python(workspace: Path, pred: Predicate, python_check: PythonCheck | None) -> PredicateResult:
    if python_check is None:
        return PredicateResult(path=pred.path, predicate=pred.predicate, ok=False,
                               reason="python predicate needs the task's checks file")
    pre = await decide(workspace, pred.model_copy(update={"predicate": "exists"}))
    if not pre.ok:
        return pre.model_copy(update={"predicate": "python"})
    try:
        ok, reason = await python_check(pred.function, pred.path)
    except GradingFault as e:  # the check failed on the agent's artifact: the predicate fails
        return PredicateResult(path=pred.path, predicate=pred.predicate, ok=False, reason=e.reason, fault=True)
    return PredicateResult(path=pred.path, predicate=pred.predicate, ok=ok, reason=reason)


async def decide(workspace: Path, pred: Predicate, timeout_s: float | None = None) -> PredicateResult:
    """`check_predicate` in a worker process (`assay.grade.workers`): what an artifact makes a
    predicate do (a task's JSON Schema `pattern` backtracking on it, say) never runs in the
    harness; a predicate past its time (`ASSAY_PREDICATE_TIMEOUT_S`) or memory fails, the fault
    recorded."""
    limit = settings().predicate_timeout_s if timeout_s is None else timeout_s
    try:
        return await workers.call(check_predicate, workspace, pred, timeout_s=limit)
    except (workers.WorkerTimeout, workers.WorkerFailed) as e:
        return PredicateResult(path=pred.path, predicate=pred.predicate, ok=False, fault=True,
                               reason=f"the {pred.predicate} predicate on this artifact {e}")


async def check_contract(workspace: Path, contract: list[Predicate], python_check: PythonCheck | None = None
                         ) -> tuple[bool, list[PredicateResult]]:
    """Every predicate of the contract, each in a worker process (`decide`)."""
    results = [await _python(workspace, p, python_check) if p.predicate == "python"
               else await decide(workspace, p) for p in contract]
    sat = all(r.ok for r, p in zip(results, contract, strict=True) if p.required)
    return sat, results
