"""Is the task broken, or did the agent fail? Asked when grading a run left faults.

SPEC "void, scored, broken: who failed decides": a part whose grading failed on what the agent
delivered scores 0 with the fault recorded, unless the same grader fails on the task's own
reference deliverable too: then the task is broken, and its runs are left out of every agent's
numbers alike. This module finds out, once per task content and level: it runs the task's
`reference` policy through the same harness and grader, stores nothing of that run, and
compares the parts that faulted. The verdict is kept in the store's cache, so a resumed
campaign (or another worker) does not ask again. A probe the harness could not finish decides
nothing: the run asking is void (re-run), since neither the agent nor the task is shown to be
at fault.

Only a reference can show a task broken. A fault the reference has too is one no agent can
avoid, even by solving the task; a fault on an untouched workspace shows only that doing
nothing faults (a checks program that opens a file the agent never wrote, a judge handed an
empty answer), and any agent can deliver what `noop` delivers. Taking that as the task's
fault would let an agent that fails a task turn its 0 into a task left out of every agent's
numbers by failing the same way (round 5). A task without a reference is therefore never
found broken here: a fault on it is the agent's, scored 0 and recorded; a task whose grader
fails whatever it is handed scores 0 for every agent alike, and `assay curate` puts it up for
review (no agent passes it).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from assay.agent.spec import AgentFactory
from assay.config import Config
from assay.errors import HarnessError
from assay.record import Fault, RunRecord
from assay.version import HARNESS_VERSION

if TYPE_CHECKING:
    from assay.campaign.plan import PlannedRun
    from assay.store import Store

__all__ = ["Probe", "TaskHealth", "fault_base"]

PROBE_AGENT_PREFIX = "probe-of-task:"
REFERENCE = "reference"  # the policy a task's grader is checked on (the only one that can show it broken)


class Probe(BaseModel):
    """What grading the task's own deliverable gave: the parts that faulted, with reasons."""

    agent: str  # the policy that delivered: reference
    faults: list[Fault] = Field(default_factory=list)


def fault_base(part: str) -> str:
    """The grader a fault's part belongs to: `checks:total` and `checks` are one program."""
    return part if part.startswith("predicate:") else part.split(":", 1)[0]


ProbeRunner = Callable[["PlannedRun"], Awaitable[RunRecord]]
"""Runs a planned run through the harness without storing it (`runner.execute_run(probe=True)`)."""


class TaskHealth:
    """One campaign process's verdicts on its tasks' graders (see the module docstring)."""

    def __init__(self, store: Store, run_probe: ProbeRunner) -> None:
        self._store = store
        self._run_probe = run_probe
        self._probes: dict[str, asyncio.Task[Probe]] = {}

    @staticmethod
    def _cache_key(planned: PlannedRun) -> str:
        k = planned.key
        return f"task-health/{HARNESS_VERSION}/{k.task_hash}/{k.level}/{k.options_hash}"

    async def broken_reason(self, planned: PlannedRun, faults: list[Fault]) -> str | None:
        """Why the task is broken for these faults (its reference faults in the same grader),
        or None (the agent's fault; always so for a task without a reference). HarnessError
        when the probe could not be run."""
        if REFERENCE not in planned.task.policies:
            return None
        own = planned.agent.spec == REFERENCE
        probe = Probe(agent=planned.agent.spec, faults=faults) if own else await self._probe(planned)
        theirs = {fault_base(f.part): f for f in probe.faults}
        for f in faults:
            same = theirs.get(fault_base(f.part))
            if same is not None:
                return f"the task's grader fails on its reference too ({same.part}): {same.reason}"[:1000]
        return None

    async def _probe(self, planned: PlannedRun) -> Probe:
        key = self._cache_key(planned)
        task = self._probes.get(key)
        if task is None or (task.done() and task.exception() is not None):
            task = self._probes[key] = asyncio.ensure_future(self._find(planned, key))
        return await asyncio.shield(task)

    async def _find(self, planned: PlannedRun, key: str) -> Probe:
        cached = await asyncio.to_thread(self._store.cache_get, key)
        if cached is not None:
            return Probe.model_validate_json(cached)
        from assay.campaign.plan import PlannedRun as Planned

        policy = REFERENCE
        k = planned.key
        probe_key = k.model_copy(update={"agent": PROBE_AGENT_PREFIX + policy, "epoch": 0})
        record = await self._run_probe(Planned(planned.task, AgentFactory(policy, Config()), planned.level, 0,
                                               probe_key))
        if record.status == "void":
            raise HarnessError(f"could not check the task's grader on its {policy} deliverable: "
                               f"{record.void_reason or record.end_reason}")
        probe = Probe(agent=policy, faults=record.grade.faults)
        await asyncio.to_thread(self._store.cache_put, key, json.dumps(probe.model_dump(mode="json")))
        return probe
