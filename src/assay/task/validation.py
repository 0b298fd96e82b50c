"""Validation rules shared by every task format (SPEC.md "Task validation").

Readers call these after building a Task so that one rule means one message, whatever
format the task came in.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from assay.errors import InputError
from assay.fs.paths import PathError, check_relative, real_path
from assay.metrics import CAPABILITY_TAGS
from assay.task.json_schemas import check_task_schema
from assay.task.model import LEVELS, MAX_VALUE_AMOUNT, Task
from assay.task.patterns import check_flags, check_pattern
from assay.task.re2_translation import PatternError

# Upstream full names (OneMillion-Bench's rubricLabel, in English and Chinese) -> short tags.
TAG_ALIASES: dict[str, str] = {
    "fi": "FI", "factual information": "FI", "factual": "FI", "事实信息": "FI", "事实": "FI",
    "ar": "AR", "analytical reasoning": "AR", "reasoning": "AR", "分析推理": "AR", "推理": "AR",
    "if": "IF", "instructions following": "IF", "instruction following": "IF", "指令遵循": "IF",
    "sf": "SF", "structure and formatting": "SF", "structure & formatting": "SF",
    "structure and format": "SF", "格式": "SF", "结构与格式": "SF", "结构和格式": "SF",
}
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][\w.-]*)\s*\}\}")
"""`{{name}}` in briefs, rules and stakeholder specs, filled from a scenario variant's parameters."""


class PlaceholderError(ValueError):
    """A text or stakeholder spec whose placeholders cannot be filled."""


class UnfilledPlaceholder(PlaceholderError):
    """A `{{name}}` the variant has no parameter for."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"unfilled placeholder {{{{{name}}}}} (no variant parameter {name!r})")


MAX_FILL_CHARS = 64 * 1024 * 1024
"""Most characters placeholders may add, in all, to what one scenario case's variants fill
(briefs, rules, stakeholder specs): a case's texts are kilobytes, but a 2 MiB parameter named
6,000 times in a 50 KB `npcs.json` would be a 12 GB string."""


class FillTooLarge(PlaceholderError):
    """Placeholders that would add more than the fill's budget allows; `field` where, when known."""

    def __init__(self, name: str, times: int, added: int, limit: int) -> None:
        self.field: str | None = None
        super().__init__(f"filling its placeholders would add {added:,} characters ({{{{{name}}}}} {times:,} "
                         f"time(s) among them), more than the {limit:,} a case's variants may add in all")


class FillBudget:
    """What placeholders may still add: one budget for every fill of a case's variants, so
    neither one text nor many variants can expand a parameter without bound. The size is
    counted before a filled string is built."""

    def __init__(self, chars: int = MAX_FILL_CHARS) -> None:
        self.limit = chars
        self.left = chars

    def take(self, added: int, name: str, times: int) -> None:
        if added > self.left:
            raise FillTooLarge(name, times, self.limit - self.left + added, self.limit)
        self.left -= max(0, added)


def _param_text(v: Any, inside_json_string: bool) -> str:
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)[1:-1] if inside_json_string else v
    return json.dumps(v, ensure_ascii=False)


def fill_text(text: str, params: dict[str, Any], *, inside_json_string: bool = False,
              budget: FillBudget | None = None) -> str:
    """Every `{{name}}` of `text` replaced by its parameter: text as it is, other values as JSON.
    `inside_json_string`: the text is raw JSON whose placeholders may stand inside strings, so a
    text value is inserted JSON-escaped (without its quotes). UnfilledPlaceholder names a gap;
    FillTooLarge, a fill that would add more than `budget` (a budget of its own when none is
    given) has left, counted before the string is built."""
    values: dict[str, str] = {}
    times: dict[str, int] = {}
    added = 0
    for m in PLACEHOLDER.finditer(text):
        name = m.group(1)
        if name not in values:
            if name not in params:
                raise UnfilledPlaceholder(name)
            values[name] = _param_text(params[name], inside_json_string)
        times[name] = times.get(name, 0) + 1
        added += len(values[name]) - (m.end() - m.start())
    if not values:
        return text
    most = max(times, key=lambda n: times[n] * len(values[n]))
    (budget if budget is not None else FillBudget()).take(added, most, times[most])
    return PLACEHOLDER.sub(lambda m: values[m.group(1)], text)


_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002a6df]")


def has_cjk(text: str) -> bool:
    """Chinese (CJK) characters in the text: readers set a task's `language` to zh by it."""
    return _CJK.search(text) is not None


def normalise_tag(file: Path | str, field: str, tag: str) -> str:
    key = tag.strip().lower()
    if key in TAG_ALIASES:
        return TAG_ALIASES[key]
    if tag.strip().upper() in CAPABILITY_TAGS:
        return tag.strip().upper()
    raise InputError(file, field, f"unknown capability tag {tag!r} (expected FI, AR, IF, SF or their full names)")


def check_relative_path(file: Path | str, field: str, path: str) -> None:
    """Refuse a workspace path that is absolute or climbs out with '..' (`assay.fs.paths.check_relative`)."""
    try:
        check_relative(path)
    except PathError as e:
        raise InputError(file, field, str(e)) from None


def real_task_path(file: Path | str, field: str, path: Path) -> Path:
    """`path` with its links resolved (`fs.paths.real_path`: a chain of links a downloaded task
    holds cannot exhaust the interpreter's recursion); past the OS's limit an InputError."""
    try:
        return Path(real_path(path))
    except PathError as e:
        raise InputError(file, field, str(e)) from None


def task_path(base: Path, file: Path | str, field: str, rel: Any, *, kind: str = "any",
              where: str = "beside task.yaml") -> Path:
    """The one check of a path a task file names: relative, no '..', existing, of the right
    kind (`file`, `dir` or `any`), inside `base` once resolved, and no symlink on the way
    (a task file from the internet must not make the harness copy a host file). Resolved."""
    if not isinstance(rel, str):
        raise InputError(file, field, "must be a path (a string) relative to the task folder")
    check_relative_path(file, field, rel)
    base = real_task_path(file, field, base)
    p = base / rel
    if not real_task_path(file, field, p).is_relative_to(base):
        raise InputError(file, field, f"path {rel!r} escapes the task folder")
    cur = base
    for part in Path(rel).parts:
        cur = cur / part
        if cur.is_symlink():
            raise InputError(file, field, f"{rel!r} is (or goes through) a symlink: task files must be real "
                                          "files inside the task's folder")
    if not p.exists():
        raise InputError(file, field, f"{rel!r} does not exist {where}")
    if kind == "file" and not p.is_file():
        raise InputError(file, field, f"{rel!r} is not a file")
    if kind == "dir" and not p.is_dir():
        raise InputError(file, field, f"{rel!r} is not a folder")
    return p


def workspace_folder(folder: Path, file: Path | str) -> Path | None:
    """The task's `workspace/` folder beside task.yaml (resolved), or None; a `workspace` that
    is a symlink is refused (it could copy any folder of the host into the workspace)."""
    ws = Path(folder) / "workspace"
    if ws.is_symlink():
        raise InputError(file, "workspace/", "the workspace folder is a symlink: a task's files must be real "
                                             "files inside its folder (a link could lead outside the suite)")
    return ws.resolve() if ws.is_dir() else None


def pydantic_to_input_error(file: Path | str, err: ValidationError, prefix: str = "") -> InputError:
    first = err.errors()[0]
    loc = ".".join(str(x) for x in first.get("loc", ()) if x != "__root__")
    field = f"{prefix}.{loc}".strip(".") if prefix else loc
    msg = first.get("msg", "invalid")
    if first.get("type") == "extra_forbidden":
        msg = "unknown field"
    msg = msg.removeprefix("Value error, ")
    return InputError(file, field or None, msg)


def non_finite(value: Any, where: str = "") -> str | None:
    """The dotted field path of the first NaN or infinite number anywhere in `value` (a task
    model, or the dicts and lists it holds), or None."""
    stack: list[tuple[str, Any]] = [(where, value)]
    while stack:
        path, v = stack.pop()
        if isinstance(v, float):
            if not math.isfinite(v):
                return path or "value"
        elif isinstance(v, BaseModel):
            items = [*((k, getattr(v, k)) for k in type(v).model_fields), *(v.model_extra or {}).items()]
            stack.extend((f"{path}.{k}" if path else k, x) for k, x in reversed(items))
        elif isinstance(v, dict):
            stack.extend((f"{path}.{k}" if path else str(k), x) for k, x in reversed(list(v.items())))
        elif isinstance(v, (list, tuple)):
            stack.extend((f"{path}[{i}]", x) for i, x in reversed(list(enumerate(v))))
    return None


def _listed(value: str | list[str] | None, field: str) -> list[tuple[str, str]]:
    if value is None:
        return []
    if isinstance(value, str):
        return [(field, value)]
    return [(f"{field}[{i}]", p) for i, p in enumerate(value)]


def check_task_patterns(task: Task, file: Path | str) -> None:
    """Every pattern of a task's contract and rubric checks compiles for RE2, which runs them in
    linear time (`assay.task.patterns`): a lookaround, a backreference or a bad flag is an
    InputError naming the field, refused before anything runs; so is a contract's JSON Schema
    that is malformed or holds such a pattern (`assay.task.json_schemas`). Stakeholder patterns are checked
    by the people schema, truth framing patterns by the scenario readers."""
    for i, pred in enumerate(task.contract):
        try:
            check_flags(pred.flags)
        except PatternError as e:
            raise InputError(file, f"contract[{i}].flags", str(e)) from None
        if pred.predicate in ("regex", "number") and pred.pattern is not None:
            check_pattern(file, f"contract[{i}].pattern", pred.pattern, pred.flags)
        if pred.predicate == "json" and pred.json_schema is not None:
            check_task_schema(file, f"contract[{i}].schema", pred.json_schema)
    for i, item in enumerate(task.rubric.items if task.rubric else []):
        if item.check is None:
            continue
        flags = "mi" if item.check.ignore_case else "m"  # as `assay.grade.checks` runs them
        where = f"rubric.items[{i}].check"
        for field, pattern in [*_listed(item.check.regex, f"{where}.regex"),
                               *_listed(item.check.not_regex, f"{where}.not_regex"),
                               *_listed(item.check.number_pattern, f"{where}.number_pattern")]:
            check_pattern(file, field, pattern, flags)


# complexity: SPEC's validation rules, one after another, each with its own message
def check_identity(file: Path | str | None, field: str, value: str) -> None:
    """InputError unless `value` can name runs: not empty, and no NUL (no PostgreSQL text holds
    one, no file name either). Other control characters are kept and shown escaped in every view."""
    if not value.strip():
        raise InputError(file, field, "empty")
    if "\x00" in value:
        raise InputError(file, field, f"holds a NUL character (at {value.index(chr(0))}); a name runs are stored "
                                      "by may not")


def validate_task(task: Task, file: Path | str, *, weight_range: tuple[float, float] | None = (-20, 10),  # noqa: C901
                  capability_tags: bool = True) -> None:
    """Apply the format-independent rules to a normalised task."""
    check_identity(file, "id", task.id)
    bad = non_finite(task)
    if bad is not None:
        raise InputError(file, bad, "not a finite number (NaN and infinities are refused)")
    if task.value is not None and task.value.amount is not None and task.value.amount > MAX_VALUE_AMOUNT:
        raise InputError(file, "value.amount", f"{task.value.amount:g} {task.value.currency} is more than the "
                                               f"{MAX_VALUE_AMOUNT:g} a task's value may be (a report sums values)")
    if not (task.prompt and task.prompt.strip()) and not task.briefs and not task.messages:
        raise InputError(file, "prompt", "missing brief/prompt")
    for level, text in task.briefs.items():
        if level not in LEVELS:
            raise InputError(file, f"briefs.{level}", f"unknown level {level!r} (expected L0..L3)")
        if not text.strip():
            raise InputError(file, f"briefs.{level}", "empty brief")
    if task.briefs:
        for need in ("L0", "L3"):
            if need not in task.briefs:
                raise InputError(file, f"briefs.{need}", f"missing required level brief {need}")
    for where, text in [("prompt", task.prompt or ""), *[(f"briefs.{k}", v) for k, v in task.briefs.items()]]:
        m = PLACEHOLDER.search(text)
        if m:
            raise InputError(file, where, f"unfilled placeholder {{{{{m.group(1)}}}}}")
    for i, wf in enumerate(task.workspace):
        if wf.path not in (".", ""):
            check_relative_path(file, f"workspace[{i}].path", wf.path)
    for i, pred in enumerate(task.contract):
        check_relative_path(file, f"contract[{i}].path", pred.path)
    check_task_patterns(task, file)
    if task.answer_path is not None:
        check_relative_path(file, "answer_path", task.answer_path)
    if task.rubric is not None:
        items = task.rubric.items
        seen: set[str] = set()
        for i, item in enumerate(items):
            field = f"rubric.items[{i}].weight"
            if not isinstance(item.weight, (int, float)) or item.weight != item.weight:
                raise InputError(file, field, "weight is not a number")
            if item.weight == 0:
                raise InputError(file, field, "weight is zero")
            if weight_range is not None and not (weight_range[0] <= item.weight <= weight_range[1]):
                raise InputError(file, field,
                                 f"weight {item.weight:g} outside [{weight_range[0]:g}, {weight_range[1]:g}]")
            if capability_tags:
                if item.tag is None:
                    raise InputError(file, f"rubric.items[{i}].tag", "missing capability tag (FI, AR, IF, SF)")
                item.tag = normalise_tag(file, f"rubric.items[{i}].tag", item.tag)
            if item.id in seen:
                raise InputError(file, f"rubric.items[{i}].id", f"duplicate item id {item.id!r}")
            seen.add(item.id)
        if not any(it.weight > 0 for it in items):
            raise InputError(file, "rubric.items", "rubric has no positive weight")
    if task.grading is not None:
        g = task.grading
        if g.weight_automated < 0 or g.weight_judge < 0:
            raise InputError(file, "grading.weights", "weights must not be negative")
    if task.threshold is not None and not (0 <= task.threshold <= 1):
        raise InputError(file, "threshold", "threshold must be within [0, 1]")
