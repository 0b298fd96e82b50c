"""Materialising a task's initial workspace into a fresh per-run folder, with its quota;
the copies of an agent's workspace that grading works on, with the same quota."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from pebble.common import ProcessExpired

from assay.config import settings
from assay.env.volume import WorkspaceVolume
from assay.fs.copying import CopyError, CopyLimits, CopyReport, copy_tree
from assay.fs.writes import write_file
from assay.procpool import WorkerPool
from assay.task.model import Task

__all__ = ["copy_apart", "discard_copy", "grading_copy", "grading_copy_limits", "materialise", "needs_workspace",
           "new_workspace"]


def needs_workspace(task: Task) -> bool:
    return bool(task.tools or task.workspace or task.contract or task.answer_path or task.scenario
                or any(p.artifacts or p.script for p in task.policies.values()))


def new_workspace(dest: Path) -> WorkspaceVolume:
    """The empty workspace folder `dest` (created) with the run's disk quota
    (`ASSAY_WORKSPACE_QUOTA_BYTES`): its own filesystem where that can be had."""
    return WorkspaceVolume.create(dest, settings().workspace_quota_bytes)


def grading_copy_limits() -> CopyLimits:
    """The caps of a copy or walk of a workspace an agent wrote, for grading (`ASSAY_COPY_MAX_FILES`,
    `ASSAY_COPY_MAX_DEPTH`): what passes them is left out and recorded (`CopyReport.capped`)."""
    s = settings()
    return CopyLimits(max_files=s.copy_max_files, max_depth=s.copy_max_depth, on_limit="skip")


def grading_copy(workspace: Path, dest: Path, *, limits: CopyLimits | None = None,
                 owner: int | None = None) -> tuple[WorkspaceVolume, CopyReport]:
    """Copy an agent's workspace to `dest` for grading, on a volume of its own with the run's
    disk quota: code a grader runs on the copy (delivered systems, checks) cannot fill the
    host disk, and the copy itself takes at most the quota (what does not fit is left out and
    recorded). `dest` belongs to `owner` (mode 0700) when given. Undo with `discard_copy`."""
    vol = new_workspace(dest)
    lim = limits or grading_copy_limits()
    if vol.kind != "none":
        lim = dataclasses.replace(lim, max_bytes=min(lim.max_bytes, vol.quota_bytes))
    try:
        report = copy_apart(workspace, dest, lim, owner)
        if owner is not None:
            os.chown(dest, owner, owner)
        os.chmod(dest, 0o700)
    except BaseException:
        discard_copy(vol)
        raise
    return vol, report


COPIER = WorkerPool("grading copies", 2, spill=6)
COPY_START_GRACE_S = 60.0  # past the copy's own time cap, for a worker to take it


def copy_apart(src: Path, dest: Path, limits: CopyLimits, owner: int | None) -> CopyReport:
    """`copy_tree(src, dest, merge=True)` in a process of its own (`COPIER`, two at most), the
    calling thread waiting: a tree of 100,000 folders an agent made is a long run of small system
    calls, and in a thread of the harness it kept the interpreter lock from the event loop
    between them (docs/SECURITY.md G17). The copy's own errors are raised as they are; a copy
    process that died is a CopyError."""
    future = COPIER.schedule(copy_tree, (src, dest), {"limits": limits, "owner": owner, "merge": True})
    try:  # the copy stops itself at limits.max_seconds; a copy no worker took never ends
        report: CopyReport = future.result(timeout=limits.max_seconds + COPY_START_GRACE_S)
    except ProcessExpired as e:
        raise CopyError(f"{src}: the process copying it for grading died ({e})") from None
    except (FutureTimeout, BrokenProcessPool, RuntimeError) as e:
        future.cancel()
        raise CopyError(f"{src}: the copy for grading did not finish ({type(e).__name__}: its worker died "
                        "or never took it)") from None
    return report


def discard_copy(vol: WorkspaceVolume) -> None:
    """Unmount and delete a `grading_copy` (idempotent; a busy mount is detached lazily)."""
    with contextlib.suppress(OSError):
        vol.release(keep_data=False)
    shutil.rmtree(vol.path, ignore_errors=True)


def materialise(task: Task, dest: Path) -> Path:
    """Copy the task's files into `dest` (created if missing) with `assay.fs.copying.copy_tree`: a task
    file from the internet cannot make the harness follow a link or open a special file."""
    dest.mkdir(parents=True, exist_ok=True)
    for wf in task.workspace:
        if wf.source is not None:
            target = dest if wf.path in (".", "") else dest / wf.path
            copy_tree(wf.source, target, merge=True)
        else:
            write_file(dest, wf.path, wf.content or "")
    return dest
