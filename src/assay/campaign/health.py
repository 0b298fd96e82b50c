"""Is the task broken? Asked of every graded run of a task whose own programs grade it.

SPEC "void, scored, broken: who failed decides": a part whose grading failed on what the agent
delivered scores 0 with the fault recorded, unless the task's grader fails on the task's own
reference deliverable (or, with none, on an untouched workspace): then the task is broken, and
its runs are left out of every agent's numbers alike.

The verdict is the task's, never an agent's: the task is graded once on its probe deliverable
(the `reference` policy's, else `noop`'s: an untouched workspace) through the same harness and
grader, whatever the agents' runs did, and any fault there makes every run of the task broken,
the ones that faulted and the ones that did not. Asking only when a run faulted would let an
agent choose: one that cannot solve a task whose checks fail on an untouched workspace would
fault on purpose and have the task, and the solvers' credit for it, left out (round 5). Only
tasks graded by programs of their own (checks, contract predicates, scenario graders) are
probed, and tasks judged against a reference they ship (`probed`); the task's patterns run
in linear time and do not fault on a deliverable.

The verdict is kept in the store's cache, the first one written winning, so a resumed campaign
and every worker share it; a run of the probe policy itself gives it from its own grade. A
probe the harness could not finish decides nothing: the run asking is void (re-run), since
neither the agent nor the task is shown to be at fault.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from assay.agent.spec import AgentFactory
from assay.config import Config
from assay.errors import HarnessError
from assay.grade.inputs import UNTOUCHED
from assay.record import Fault, RunRecord
from assay.version import HARNESS_VERSION

if TYPE_CHECKING:
    from assay.campaign.plan import PlannedRun
    from assay.store import Store
    from assay.task.model import Task

__all__ = ["Probe", "TaskHealth", "fault_base"]

PROBE_AGENT_PREFIX = "probe-of-task:"
CACHE_PREFIX = "task-health:"
REFERENCE = "reference"  # the policy a task's grader is checked on when the task ships one
NOT_THE_TASKS = ("audit", "run")  # parts of assay's own (the evidence audit, a run stored as failed)


class Probe(BaseModel):
    """What grading the task's own deliverable gave: the parts that faulted, with reasons."""

    agent: str  # the policy that delivered: reference or noop
    faults: list[Fault] = Field(default_factory=list)


def fault_base(part: str) -> str:
    """The grader a fault's part belongs to: `checks:total` and `checks` are one program."""
    return part if part.startswith("predicate:") else part.split(":", 1)[0]


def probe_policy(task: Task) -> str:
    """The policy whose deliverable shows whether the task's grader works."""
    return REFERENCE if REFERENCE in task.policies else UNTOUCHED


def probed(task: Task) -> bool:
    """Whether the task is probed: programs of its own grade it (checks, contract predicates,
    scenario graders), or a judge does and the task ships a reference to judge. A judge is not
    asked about an untouched workspace (an empty deliverable is not what it grades, and each
    task would cost a call); its faults on the probe deliverable count only with a reference."""
    programs = (task.scenario is not None or bool(task.contract)
                or (task.grading is not None and (task.grading.checks_file is not None
                                                  or task.grading.checks_code is not None)))
    judged = task.grading is not None and task.grading.type in ("judge", "hybrid")
    return programs or (judged and REFERENCE in task.policies)


ProbeRunner = Callable[["PlannedRun"], Awaitable[RunRecord]]
"""Runs a planned run through the harness without storing it (`runner.execute_run(probe=True)`)."""


class TaskHealth:
    """One campaign process's verdicts on its tasks' graders (see the module docstring)."""

    def __init__(self, store: Store, run_probe: ProbeRunner, options_digest: str) -> None:
        """`options_digest`: the digest of the campaign's options that can change a result
        (`RunOptions.result_options`), never an agent's own: one verdict for every agent."""
        self._store = store
        self._run_probe = run_probe
        self._options = options_digest
        self._probes: dict[str, asyncio.Task[Probe]] = {}

    def _cache_key(self, planned: PlannedRun) -> str:
        """The verdict's key in the store's cache (at most 64 characters, the column's width):
        the task's content and level and the campaign's result options, the same for every
        agent (a run key's options hash holds the agent's own options: a script's digest, a
        model's spec; a key with them would give each agent a verdict of its own)."""
        k = planned.key
        whole = f"{HARNESS_VERSION}/{k.task_hash}/{k.level}/{self._options}"
        return CACHE_PREFIX + hashlib.sha256(whole.encode()).hexdigest()[:64 - len(CACHE_PREFIX)]

    async def broken_reason(self, planned: PlannedRun, faults: list[Fault]) -> str | None:
        """Why the task of this graded run is broken (its grader faults on the probe
        deliverable), or None: the run's own `faults`, if any, are the agent's. A run of the
        probe policy gives the verdict from its own `faults` when none is kept yet.
        HarnessError when the probe could not be run."""
        task = planned.task
        if not probed(task):
            return None
        policy = probe_policy(task)
        key = self._cache_key(planned)
        if planned.agent.spec == policy and planned.agent.kind in ("noop", "policy") and key not in self._probes:
            own = Probe(agent=policy, faults=faults)
            self._probes[key] = asyncio.ensure_future(self._keep(key, own))
        probe = await self._probe(planned, key)
        ignored = NOT_THE_TASKS if probe.agent == REFERENCE else (*NOT_THE_TASKS, "judge")
        found = [f for f in probe.faults if fault_base(f.part) not in ignored]
        if not found:
            return None
        on = "its reference deliverable" if probe.agent == REFERENCE else "an untouched workspace"
        first = found[0]
        return f"the task's grader fails on {on} ({first.part}): {first.reason}"[:1000]

    async def _probe(self, planned: PlannedRun, key: str) -> Probe:
        task = self._probes.get(key)
        if task is None or (task.done() and task.exception() is not None):
            task = self._probes[key] = asyncio.ensure_future(self._find(planned, key))
        return await asyncio.shield(task)

    async def _keep(self, key: str, probe: Probe) -> Probe:
        """Keep `probe` as the verdict unless one is kept already; the verdict kept."""
        kept = await asyncio.to_thread(self._store.cache_add, key, probe.model_dump_json())
        return Probe.model_validate_json(kept)

    async def _find(self, planned: PlannedRun, key: str) -> Probe:
        cached = await asyncio.to_thread(self._store.cache_get, key)
        if cached is not None:
            return Probe.model_validate_json(cached)
        from assay.campaign.plan import PlannedRun as Planned

        policy = probe_policy(planned.task)
        k = planned.key
        probe_key = k.model_copy(update={"agent": PROBE_AGENT_PREFIX + policy, "epoch": 0})
        record = await self._run_probe(Planned(planned.task, AgentFactory(policy, Config()), planned.level, 0,
                                               probe_key))
        if record.status == "void":
            raise HarnessError(f"could not check the task's grader on its {policy} deliverable: "
                               f"{record.void_reason or record.end_reason}")
        return await self._keep(key, Probe(agent=policy, faults=record.grade.faults))
