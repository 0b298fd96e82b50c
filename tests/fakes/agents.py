"""In-process stand-ins for the campaign layer's tests: an agent factory satisfying
`assay.campaign.plan.AgentLike`, agents that run a given coroutine, and a run home (a store
on a temporary SQLite file whose run folders live beside it and are removed afterwards).

    with run_home() as (home, store):
        factory = FakeFactory("fake", act=finish("42"))
        plan = build_plan(tasks, [factory], RunOptions(unsafe_no_sandbox=True))
        rec = await execute_run(plan.runs[0], RunContext(store=store, options=options))
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from assay.agent.base import Agent, AgentEnv, AgentOutcome
from assay.llm.messages import Usage
from assay.store import Store
from assay.task.model import Task

Act = Callable[[AgentEnv], Awaitable[AgentOutcome]]


def finish(message: str = "", *, cost_usd: float | None = 0.0, usage: Usage | None = None) -> Act:
    """An act that ends at once with `message` as its final answer."""

    async def act(env: AgentEnv) -> AgentOutcome:
        env.transcript.assistant(message)
        return AgentOutcome(end_reason="finished", final_message=message, cost_usd=cost_usd,
                            usage=usage or Usage(), turns=1)

    return act


class ActAgent(Agent):
    """An agent whose `run` is the given act; it keeps the envs it was given."""

    def __init__(self, spec: str, act: Act) -> None:
        self.spec = spec
        self.act = act
        self.envs: list[AgentEnv] = []

    async def run(self, env: AgentEnv) -> AgentOutcome:
        self.envs.append(env)
        return await self.act(env)


class FakeFactory:
    """An `AgentLike`: `for_task` gives an `ActAgent`; skips where `skip` says so."""

    def __init__(self, spec: str = "fake", act: Act | None = None, *, kind: str = "script",
                 options: dict[str, object] | None = None,
                 skip: Callable[[Task], str | None] | None = None) -> None:
        self._spec = spec
        self._kind = kind
        self.act: Act = act or finish("")
        self._options = dict(options or {})
        self._skip = skip
        self.agents: list[ActAgent] = []
        self.closed = False

    @property
    def spec(self) -> str:
        return self._spec

    @property
    def kind(self) -> str:
        return self._kind

    def options(self) -> dict[str, object]:
        return dict(self._options)

    def skip_reason(self, task: Task) -> str | None:
        return self._skip(task) if self._skip is not None else None

    def for_task(self, task: Task) -> Agent:
        agent = ActAgent(self._spec, self.act)
        self.agents.append(agent)
        return agent

    async def aclose(self) -> None:
        self.closed = True


class ConcurrencyProbe:
    """Acts that count how many runs are inside the agent at once (`peak`).

    Each run waits (up to `wait_s`) until `target` runs are inside at once, then holds for
    `hold_s`, so a scheduler that allows `target` parallel runs reaches exactly that peak
    whatever the timing, and one that allows more is seen going over it."""

    def __init__(self, target: int, *, hold_s: float = 0.05, wait_s: float = 2.0) -> None:
        self.target = target
        self.hold_s = hold_s
        self.wait_s = wait_s
        self.running = 0
        self.peak = 0
        self.calls = 0
        self._gate = asyncio.Event()

    async def act(self, env: AgentEnv) -> AgentOutcome:
        self.calls += 1
        self.running += 1
        self.peak = max(self.peak, self.running)
        if self.running >= self.target:
            self._gate.set()
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._gate.wait(), self.wait_s)
            await asyncio.sleep(self.hold_s)
        finally:
            self.running -= 1
        return AgentOutcome(end_reason="finished", final_message="")


@contextmanager
def run_home() -> Iterator[tuple[Path, Store]]:
    """A folder (mode 0711, so a sandbox uid may reach run folders below it) with a store at
    `assay.db`; run folders land in `runs/` beside it. Everything is removed afterwards."""
    home = Path(tempfile.mkdtemp(prefix="assay-unit-"))
    os.chmod(home, 0o711)
    store = Store(f"sqlite:///{home / 'assay.db'}")
    try:
        yield home, store
    finally:
        store.close()
        shutil.rmtree(home, ignore_errors=True)
