"""Grading one answer given outside assay's runner (an Inspect sample's output) with assay's
own grader: the same `grade_run` a run goes through, on a fresh workspace holding the
task's files and the answer at the task's `answer_path`."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

from assay.config import load_config
from assay.env.workspace import materialise, needs_workspace
from assay.fs.writes import write_file
from assay.grade.grader import GradeInput, GradeOutcome, grade_run, needs_judge
from assay.grade.judge import Judge
from assay.record import AssistantEvent, safe_text
from assay.task.model import Task

__all__ = ["exportable_reason", "grade_answer"]


def exportable_reason(task: Task) -> str | None:
    """Why a task cannot be an Inspect sample whose output assay grades, or None when it can.

    A task is exportable when the agent's whole work is one answer: no tools, no scenario.
    Those that need a workspace the agent works in need assay's sandbox (bubblewrap, its
    own uid, the file tools and stakeholders); Inspect's `local` sandbox runs commands on
    the host unisolated and its `docker` sandbox is not assay's workspace, so they are not
    exported.
    """
    if task.scenario is not None:
        return ("scenario: the agent changes a customer system in assay's sandbox, talks to scripted "
                "stakeholders and is graded on held-out data; Inspect's sandboxes cannot host that")
    if task.tools:
        return (f"needs a workspace with tools ({', '.join(task.tools)}) that assay runs in its bubblewrap "
                "sandbox; Inspect's local sandbox is not isolated")
    return None


async def grade_answer(task: Task, level: str | None, answer: str, *, judge: list[str] | None = None,
                       judge_mode: str = "batched") -> GradeOutcome:
    """`answer` graded as assay grades a run of `task` that ended with that final message.

    Raises GraderError when the task needs a judge and none is given (or the judge fails),
    as a void run would; InputError for a bad judge spec.
    """
    answer = safe_text(answer)
    judge_service = None
    if judge and needs_judge(task):
        judge_service = Judge.from_specs(judge, load_config(), mode=judge_mode)
    tmp: Path | None = None
    try:
        workspace = None
        if needs_workspace(task):
            tmp = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="assay-inspect-"))
            workspace = await asyncio.to_thread(materialise, task, tmp / "workspace")
            if task.answer_path:
                await asyncio.to_thread(write_file, workspace, task.answer_path, answer)
        return await grade_run(GradeInput(
            task=task, level=level, workspace=workspace, final_message=answer,
            events=[AssistantEvent(seq=0, t=0.0, content=answer)], end_reason="finished", judge=judge_service))
    finally:
        if judge_service is not None:
            await judge_service.aclose()
        if tmp is not None:
            await asyncio.to_thread(shutil.rmtree, tmp, True)
