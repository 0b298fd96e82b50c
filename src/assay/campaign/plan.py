"""Expanding a campaign into run keys, and deciding which are already done."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from assay.agent.spec import AgentFactory
from assay.errors import InputError
from assay.record import RunKey
from assay.task.model import LEVELS, Task


@dataclass
class CampaignOptions:
    campaign: str = "default"
    level: str | None = None  # None = default (scenarios L3), "all", or "L0".."L3"
    epochs: int = 1
    concurrency: int = 4
    judges: list[str] = field(default_factory=list)
    judge_mode: str = "batched"
    judge_repeats: int = 1
    max_turns: int = 200
    max_minutes: float = 150.0
    max_usd: float = 8.0
    search: str = "off"
    unsafe_no_sandbox: bool = False
    gateway_model: str | None = None  # model behind scenarios' company LLM gateway (--gateway-model)
    routing: str | None = None  # stakeholder topic routing override (--routing); None: the scenario's own
    router_model: str | None = None  # model for `llm` routing and gates (--router-model)

    def result_options(self) -> dict[str, Any]:
        """Everything that can change a result; hashed into every run key."""
        opts: dict[str, Any] = {
            "judges": sorted(self.judges), "judge_mode": self.judge_mode, "judge_repeats": self.judge_repeats,
            "max_turns": self.max_turns, "max_minutes": self.max_minutes, "max_usd": self.max_usd,
            "search": self.search, "sandbox": not self.unsafe_no_sandbox,
        }
        # Only when set, so campaigns that do not use them keep their run keys.
        for name in ("gateway_model", "routing", "router_model"):
            if getattr(self, name):
                opts[name] = getattr(self, name)
        return opts


@dataclass
class PlannedRun:
    task: Task
    agent: AgentFactory
    level: str | None
    epoch: int
    key: RunKey


@dataclass
class Plan:
    runs: list[PlannedRun]
    skipped: list[tuple[str, str, str]]  # (task id, agent, reason)


def options_hash(options: CampaignOptions, agent: AgentFactory) -> str:
    raw = json.dumps({"campaign": options.result_options(), "agent": agent.options()}, sort_keys=True, default=str)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


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


def build_plan(tasks: list[Task], agents: list[AgentFactory], options: CampaignOptions) -> Plan:
    if options.level is not None and options.level != "all" and options.level not in LEVELS:
        raise InputError(None, "--level", f"unknown level {options.level!r} (L0, L1, L2, L3 or all)")
    if options.epochs < 1:
        raise InputError(None, "--epochs", "must be at least 1")
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


SUPPORTED_REQUIREMENTS = {"python3", "sqlite3"}
