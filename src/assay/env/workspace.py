"""Materialising a task's initial workspace into a fresh per-run folder, with its quota."""

from __future__ import annotations

from pathlib import Path

from assay import fs
from assay.config import settings
from assay.env.volume import WorkspaceVolume
from assay.task.model import Task

__all__ = ["grading_copy_limits", "materialise", "needs_workspace", "new_workspace"]


def needs_workspace(task: Task) -> bool:
    return bool(task.tools or task.workspace or task.contract or task.answer_path or task.scenario
                or any(p.artifacts or p.script for p in task.policies.values()))


def new_workspace(dest: Path) -> WorkspaceVolume:
    """The empty workspace folder `dest` (created) with the run's disk quota
    (`ASSAY_WORKSPACE_QUOTA_BYTES`): its own filesystem where that can be had."""
    return WorkspaceVolume.create(dest, settings().workspace_quota_bytes)


def grading_copy_limits() -> fs.CopyLimits:
    """The caps of a copy or walk of a workspace an agent wrote, for grading (`ASSAY_COPY_MAX_FILES`,
    `ASSAY_COPY_MAX_DEPTH`): what passes them is left out and recorded (`CopyReport.capped`)."""
    s = settings()
    return fs.CopyLimits(max_files=s.copy_max_files, max_depth=s.copy_max_depth, on_limit="skip")


def materialise(task: Task, dest: Path) -> Path:
    """Copy the task's files into `dest` (created if missing) with `assay.fs.copy_tree`: a task
    file from the internet cannot make the harness follow a link or open a special file."""
    dest.mkdir(parents=True, exist_ok=True)
    for wf in task.workspace:
        if wf.source is not None:
            target = dest if wf.path in (".", "") else dest / wf.path
            fs.copy_tree(wf.source, target, merge=True)
        else:
            fs.write_file(dest, wf.path, wf.content or "")
    return dest
