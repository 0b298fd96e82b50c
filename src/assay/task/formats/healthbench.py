"""HealthBench rows (openai/simple-evals `healthbench_eval.py`), read as published.

One JSON object per line:

- `prompt`: the conversation, a list of `{"role", "content"}` messages;
- `rubrics`: `[{"criterion", "points", "tags"}]`; `points` may be negative (a penalty when
  the described behaviour occurs) and are not range-checked; tags such as `axis:accuracy`,
  `theme:...`, `level:example` are kept as free tags (no FI/AR/IF/SF capability tag);
- `example_tags` (kept as the task's tags), `prompt_id` (the task id),
  `ideal_completions_data` (optional; its `ideal_completion` becomes the task's
  `reference` policy answer).

Mapping: id = `prompt_id`, else `STEM_LINE` (1-based line number). `messages` is the whole
conversation (the judge is shown all of it); `prompt` is the last user message; a leading
system message also becomes the system prompt. Rubric item ids are 1-based positions (the
judge's ITEM_ID). Language is "zh" for prompts with CJK characters, else "en"; the subset is
"hard" or "consensus" when the file name says so.

Scoring follows HealthBench, not OneMillion-Bench: `rubric.scoring = "unclipped_mean"`.
A row's score is sum(points of met criteria) / sum(positive points), NOT clipped (it can be
negative); only the mean over rows is clipped to [0, 1] when HealthBench's aggregate is
reported.

Errors name the line and the field (`rubrics[2].points`, 0-based indices).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from assay.errors import InputError
from assay.task.formats.jsonio import loads_jsonl_line
from assay.task.formats.yamlio import read_text
from assay.task.hashing import content_hash
from assay.task.model import PolicySpec, Rubric, RubricItem, Task
from assay.task.validation import has_cjk, validate_task

_ITEM_FIELD = re.compile(r"^rubric\.items\[(\d+)\]\.(\w+)$")


def _remap(e: InputError, line: int) -> InputError:
    f = e.field or ""
    m = _ITEM_FIELD.match(f)
    if f == "rubric.items":
        field: str | None = "rubrics"
    elif m:
        sub = {"weight": "points", "id": "criterion"}.get(m.group(2), m.group(2))
        field = f"rubrics[{m.group(1)}].{sub}"
    else:
        field = f or None
    reason = e.reason.replace("weight is", "points are").replace("positive weight", "positive points")
    return InputError(e.file, field, reason, line=line)


def _str_list(raw: Any, path: Path, field: str, line: int) -> list[str]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(t, str) for t in raw):
        raise InputError(path, field, "must be a list of strings", line=line)
    return list(raw)


def _read_row(path: Path, row: Any, line: int) -> Task:  # noqa: C901 (a reader checks each field of its format in the order the format lists them)
    if not isinstance(row, dict):
        raise InputError(path, None, "a HealthBench row must be a JSON object", line=line)
    for need in ("prompt", "rubrics"):
        if need not in row or row[need] is None:
            raise InputError(path, need, f"missing {need}", line=line)

    messages = row["prompt"]
    if not isinstance(messages, list) or not messages:
        raise InputError(path, "prompt", "prompt must be a non-empty list of {role, content} messages", line=line)
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise InputError(path, f"prompt[{i}]", "a message must be an object with role and content", line=line)
        if not isinstance(m.get("role"), str) or not m["role"].strip():
            raise InputError(path, f"prompt[{i}].role", "missing role", line=line)
        if not isinstance(m.get("content"), str):
            raise InputError(path, f"prompt[{i}].content", "content must be text", line=line)
    users = [m["content"] for m in messages if m["role"] == "user"]
    if not users:
        raise InputError(path, "prompt", "the conversation has no user message", line=line)
    system_prompt = messages[0]["content"] if messages[0]["role"] in ("system", "developer") else None

    raw_rubrics = row["rubrics"]
    if not isinstance(raw_rubrics, list):
        raise InputError(path, "rubrics", "rubrics must be a list", line=line)
    items: list[RubricItem] = []
    for j, r in enumerate(raw_rubrics):
        field = f"rubrics[{j}]"
        if not isinstance(r, dict):
            raise InputError(path, field, "a rubric item must be an object", line=line)
        crit = r.get("criterion")
        if not isinstance(crit, str) or not crit.strip():
            raise InputError(path, f"{field}.criterion", "missing criterion", line=line)
        if "points" not in r:
            raise InputError(path, f"{field}.points", "missing points", line=line)
        pts = r["points"]
        if isinstance(pts, bool) or not isinstance(pts, (int, float)) or not math.isfinite(pts):
            raise InputError(path, f"{field}.points", f"points {pts!r} is not a number", line=line)
        items.append(RubricItem(id=str(j + 1), text=crit, weight=float(pts), tag=None,
                                tags=_str_list(r.get("tags"), path, f"{field}.tags", line)))

    prompt_id = row.get("prompt_id")
    if prompt_id is not None and not isinstance(prompt_id, (str, int)):
        raise InputError(path, "prompt_id", "prompt_id must be text", line=line)
    task_id = str(prompt_id) if prompt_id not in (None, "") else f"{path.stem}_{line}"

    policies: dict[str, PolicySpec] = {}
    ideal = row.get("ideal_completions_data")
    if ideal is not None:
        if not isinstance(ideal, dict):
            raise InputError(path, "ideal_completions_data", "must be an object", line=line)
        answer = ideal.get("ideal_completion")
        if answer is not None and not isinstance(answer, str):
            raise InputError(path, "ideal_completions_data.ideal_completion", "must be text", line=line)
        if answer and answer.strip():
            policies["reference"] = PolicySpec(answer=answer)

    example_tags = _str_list(row.get("example_tags"), path, "example_tags", line)
    stem = path.stem
    low = stem.lower()
    subset = "hard" if "hard" in low else "consensus" if "consensus" in low else None
    zh = any(has_cjk(m["content"]) for m in messages if m["role"] == "user")
    task = Task(
        id=task_id,
        domain="healthcare",
        subset=subset,
        language="zh" if zh else "en",
        source="healthbench",
        origin=str(path),
        prompt=users[-1],
        system_prompt=system_prompt,
        messages=[dict(m) for m in messages],
        tools=[],
        execution="single-step",
        rubric=Rubric(items=items, scoring="unclipped_mean"),
        policies=policies,
        tags=example_tags,
        metadata={"file_stem": stem, "prompt_id": prompt_id},
    )
    try:
        validate_task(task, path, weight_range=None, capability_tags=False)
    except InputError as e:
        raise _remap(e, line) from None
    task.content_hash = content_hash(task)
    return task


MAX_ROWS = 100_000
"""Rows of one HealthBench file read at most (the published sets hold 1,000 to 5,000): a file at
the task-file size cap held 2.3 million, which would take about 18 GB as tasks."""


def read_healthbench(path: Path) -> list[Task]:
    """Read a HealthBench JSONL file: one Task per non-blank line."""
    path = Path(path)
    tasks: list[Task] = []
    # split on "\n" only: str.splitlines() would also split inside strings holding U+2028.
    for n, text in enumerate(read_text(path).split("\n"), start=1):
        if not text.strip():
            continue
        if len(tasks) >= MAX_ROWS:
            raise InputError(path, None, f"more than {MAX_ROWS:,} rows (a task each, about 8 KB of memory apiece): "
                                         "split the file", line=n)
        row = loads_jsonl_line(text, path, n)  # within jsonio's limits (depth, digits)
        tasks.append(_read_row(path, row, n))
    return tasks
