"""What a grader is handed: the run's evidence and the services it may use, with declared
interfaces (a judge, a delivered scenario system) rather than concrete classes, so graders
depend on what they call and nothing else."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from assay.record import CaseGrade, Event, UsageCost
from assay.task.model import RubricItem, ScenarioSpec, Task

UNTOUCHED = "noop"
"""The policy that delivers an untouched workspace: the probe of a task without a reference."""

__all__ = ["DeliveredSystem", "GradeInput", "JudgeService"]


class JudgeService(Protocol):
    """An LLM judge (`assay.grade.judge.Judge`): rubric items, and raw JSON-mode calls for the
    contract judge and the audit's meta-judge, each cached and metered."""

    @property
    def name(self) -> str: ...

    async def judge_items(self, task: Task, answer: str, items: list[RubricItem]
                          ) -> tuple[dict[str, Any], UsageCost, dict[str, Any]]: ...

    async def ask_raw(self, system: str, prompt: str, *, attempt: int = 0) -> tuple[str, UsageCost]: ...


class DeliveredSystem(Protocol):
    """A scenario run's delivered system (`assay.scenario.grading.DeliveredCopy`)."""

    spec: ScenarioSpec
    level: str | None

    async def grade_case(self) -> CaseGrade: ...


@dataclass
class GradeInput:
    """One finished run, as its graders see it."""

    task: Task
    level: str | None
    workspace: Path | None
    final_message: str
    events: list[Event]
    end_reason: str
    judge: JudgeService | None = None  # when the task needs one
    delivered: DeliveredSystem | None = None  # scenario tasks
    commands: list[str] = field(default_factory=list)  # every command the agent ran
    injection_screen: bool = True  # the audit asks the judge which passages address the grader
    probe: str | None = None
    """The policy of a probe of the task's grader (`assay.campaign.health`), else None. A probe is
    graded for its faults only: no evidence audit, and no judge asked on `noop`'s untouched
    workspace (its judged parts count as not met)."""
