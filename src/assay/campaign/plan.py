"""Expanding a campaign into run keys, and deciding which are already done."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from assay.agent.base import Agent
from assay.agent.search import search_skip_reason
from assay.campaign.options import RunOptions
from assay.record import RunKey
from assay.task.hashing import json_digest
from assay.task.model import Task


class AgentLike(Protocol):
    """What the planner and the runner need of an agent spec (`assay.agent.spec.AgentFactory`,
    or the web app's human agent)."""

    @property
    def spec(self) -> str: ...

    @property
    def kind(self) -> str: ...

    def options(self) -> dict[str, object]: ...

    def skip_reason(self, task: Task) -> str | None: ...

    def for_task(self, task: Task) -> Agent: ...

    async def aclose(self) -> None: ...


class PlannedRun:
    """One run of a plan. It keeps its key's parts and digest rather than the `RunKey` model
    (about 1 KB each): a plan is built whole before a campaign starts, so at 100,000 runs the
    models alone would be ~100 MB; these are ~0.2 KB a run. `key` builds the model on demand."""

    __slots__ = ("task", "agent", "level", "epoch", "digest", "_key")

    def __init__(self, task: Task, agent: AgentLike, level: str | None, epoch: int, key: RunKey) -> None:
        self.task, self.agent, self.level, self.epoch = task, agent, level, epoch
        self.digest: str = key.digest
        self._key = (key.campaign, key.task_id, key.task_hash, key.agent, key.level, key.epoch, key.options_hash)

    @property
    def key(self) -> RunKey:
        c, t, h, a, lv, e, o = self._key
        return RunKey.model_construct(campaign=c, task_id=t, task_hash=h, agent=a, level=lv, epoch=e, options_hash=o)

    def __repr__(self) -> str:
        return f"PlannedRun({self.key!r})"


@dataclass
class Plan:
    runs: list[PlannedRun]
    skipped: list[tuple[str, str, str]]  # (task id, agent, reason)


def options_hash(options: RunOptions, agent: AgentLike) -> str:
    return json_digest({"campaign": options.result_options(), "agent": agent.options()})


def levels_for(task: Task, level: str | None) -> tuple[list[str | None], str | None]:
    """The levels a task runs at under `--level`, or a reason to skip it."""
    if not task.levels:
        return [None], None
    if level is None:
        return (["L3"], None) if "L3" in task.levels else ([task.levels[-1]], None)
    if level == "all":
        return list(task.levels), None
    if level not in task.levels:
        return [], f"no {level} brief"
    return [level], None


def build_plan(tasks: list[Task], agents: Sequence[AgentLike], options: RunOptions) -> Plan:
    options.check()
    runs: list[PlannedRun] = []
    skipped: list[tuple[str, str, str]] = []
    for agent in agents:
        ohash = options_hash(options, agent)
        for task in tasks:
            reason = agent.skip_reason(task)
            if reason is None:
                req = [r for r in task.requirements if r not in SUPPORTED_REQUIREMENTS]
                if req:
                    reason = f"needs {', '.join(req)}, which this machine cannot provide"
            if reason is None:
                reason = search_skip_reason(task, options.search, agent.kind)
            levels, why = levels_for(task, options.level)
            if reason is None and why is not None:
                reason = why
            if reason is not None:
                skipped.append((task.id, agent.spec, reason))
                continue
            for level in levels:
                for epoch in range(1, options.epochs + 1):
                    key = RunKey(campaign=options.campaign, task_id=task.id, task_hash=task.content_hash,
                                 agent=agent.spec, level=level, epoch=epoch, options_hash=ohash)
                    runs.append(PlannedRun(task=task, agent=agent, level=level, epoch=epoch, key=key))
    return Plan(runs=runs, skipped=skipped)


SUPPORTED_REQUIREMENTS = {"python3", "sqlite3", "web_search"}
"""What a task may require; `web_search` is then met by a search backend (`search_skip_reason`)."""
