"""The Inspect AI side of an exported task file: its dataset and its scorer, assay's grader.

Imported only by a task file `assay export inspect` wrote (run by Inspect, which is then
installed); nothing else in assay imports this module. The scorer reloads each sample's
assay task from the path it was exported from, refuses one whose content changed since
(its hash), and grades the sample's output with `assay.interop.grading.grade_answer`.
"""

from __future__ import annotations

import base64
import mimetypes
from functools import cache
from pathlib import Path

from inspect_ai import Task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import (
    ChatMessage,
    ChatMessageSystem,
    ChatMessageUser,
    Content,
    ContentImage,
    ContentText,
)
from inspect_ai.scorer import Score, Scorer, Target, mean, scorer, stderr
from inspect_ai.solver import TaskState, generate

from assay.errors import GraderError, InputError
from assay.fs.paths import PathError
from assay.fs.reads import read_regular
from assay.interop.export import ExportedSample, ExportFile, load_tasks
from assay.interop.grading import grade_answer
from assay.task.model import Task as AssayTask

__all__ = ["assay_grader", "assay_inspect_task", "read_samples"]


def read_samples(path: Path) -> ExportFile:
    try:
        return ExportFile.model_validate_json(read_regular(path))
    except (OSError, PathError) as e:
        raise InputError(path, None, f"cannot read the exported samples: {e}") from None
    except ValueError as e:
        raise InputError(path, None, f"not an assay export samples file: {e}") from None


def _image(path: str) -> ContentImage:
    mime = mimetypes.guess_type(path)[0] or "image/png"
    return ContentImage(image=f"data:{mime};base64,{base64.b64encode(read_regular(path)).decode()}")


def _sample(s: ExportedSample) -> Sample:
    messages: list[ChatMessage] = []
    if s.system:
        messages.append(ChatMessageSystem(content=s.system))
    content: list[Content] = [ContentText(text=s.prompt), *(_image(p) for p in s.images)]
    messages.append(ChatMessageUser(content=content if s.images else s.prompt))
    return Sample(id=s.id, input=messages, target=s.target or "", metadata=s.metadata.model_dump(mode="json"))


@cache
def _suite(root: str) -> dict[str, AssayTask]:
    return {t.id: t for _, t in load_tasks([Path(root)])}


def _task_of(meta: dict[str, object]) -> AssayTask:
    root, task_id, digest = str(meta["assay_suite"]), str(meta["assay_task_id"]), str(meta["assay_task_hash"])
    task = _suite(root).get(task_id)
    if task is None:
        raise GraderError(f"task {task_id} is no longer under {root}; export again")
    if task.content_hash != digest:
        raise GraderError(f"task {task_id} under {root} changed since it was exported "
                          f"(hash {task.content_hash}, exported {digest}); export again")
    return task


@scorer(metrics=[mean(), stderr()])
def assay_grader(judge: str | None = None, judge_mode: str = "batched") -> Scorer:
    """assay's grader as an Inspect scorer: value = assay's score; metadata: passed, kinds, grade."""

    async def score(state: TaskState, target: Target) -> Score:
        task = _task_of(state.metadata)
        answer = state.output.completion if state.output is not None else ""
        level = state.metadata.get("level")
        outcome = await grade_answer(task, level if isinstance(level, str) else None, answer,
                                     judge=[judge] if judge else None, judge_mode=judge_mode)
        if outcome.score is None:
            raise GraderError(f"task {task.id}: assay's grader gave no score")
        return Score(value=outcome.score, answer=answer,
                     explanation=f"assay {task.primary_kind} score {outcome.score:.4f}, "
                                 f"{'passed' if outcome.passed else 'not passed'}",
                     metadata={"passed": outcome.passed, "kinds": task.kinds, "grade": outcome.grade.flat(),
                               "judge_usage": outcome.judge_usage.model_dump(mode="json")})

    return score


def assay_inspect_task(samples_file: Path, *, judge: str | None = None, judge_mode: str = "batched") -> Task:
    """The Inspect task of an export: one sample per assay task, `generate()`, assay's grader."""
    exported = read_samples(samples_file)
    return Task(dataset=MemoryDataset([_sample(s) for s in exported.samples], name="assay"),
                solver=generate(), scorer=assay_grader(judge=judge, judge_mode=judge_mode))
