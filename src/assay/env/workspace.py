"""Materialising a task's initial workspace into a fresh per-run folder."""

from __future__ import annotations

import shutil
from pathlib import Path

from assay.task.model import Task


def needs_workspace(task: Task) -> bool:
    return bool(task.tools or task.workspace or task.contract or task.answer_path or task.scenario
                or any(p.artifacts or p.script for p in task.policies.values()))


def materialise(task: Task, dest: Path) -> Path:
    """Copy the task's files into `dest` (created); symlinks are copied as links, not followed."""
    dest.mkdir(parents=True, exist_ok=True)
    for wf in task.workspace:
        target = dest if wf.path in (".", "") else dest / wf.path
        if wf.source is not None:
            src = Path(wf.source)
            if src.is_dir():
                shutil.copytree(src, target, symlinks=True, dirs_exist_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, target)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(wf.content or "", encoding="utf-8")
    return dest
