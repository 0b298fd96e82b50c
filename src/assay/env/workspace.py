"""Materialising a task's initial workspace into a fresh per-run folder."""

from __future__ import annotations

from pathlib import Path

from assay import fs
from assay.task.model import Task


def needs_workspace(task: Task) -> bool:
    return bool(task.tools or task.workspace or task.contract or task.answer_path or task.scenario
                or any(p.artifacts or p.script for p in task.policies.values()))


def materialise(task: Task, dest: Path) -> Path:
    """Copy the task's files into `dest` (created) with `assay.fs.copy_tree`: a task file from
    the internet cannot make the harness follow a link or open a special file."""
    dest.mkdir(parents=True, exist_ok=True)
    for wf in task.workspace:
        if wf.source is not None:
            target = dest if wf.path in (".", "") else dest / wf.path
            fs.copy_tree(wf.source, target, merge=True)
        else:
            fs.write_file(dest, wf.path, wf.content or "")
    return dest
