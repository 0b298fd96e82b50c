"""A person as an agent: `human:NAME`, working a task through the web app.

`HumanAgent.run(env)` is driven by the browser instead of a model: each action the page
sends (a tool call or the final answer) arrives through an asyncio queue, goes through the
run's own `ToolBox` (same tools, same sandbox) and is written to the transcript exactly as
a model's turn would be. The web app (`assay.web.human`) starts the run as an ordinary
`execute_run`, so workspace, sandbox, limits, grading, audit and storage are the harness's own.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from assay.agent.base import Agent, AgentEnv, AgentOutcome, open_conversation
from assay.llm.messages import ToolCall
from assay.task.model import Task

__all__ = ["Action", "HumanAgent", "HumanFactory", "RunEnded"]


class RunEnded(RuntimeError):
    """An action arrived after the run ended (submitted, or a limit was hit)."""


@dataclass
class Action:
    kind: str  # "tool" or "submit"
    tool: str = ""
    args: dict[str, Any] = field(default_factory=dict)
    text: str = ""
    done: asyncio.Future[str] | None = None


class HumanAgent(Agent):
    """Waits for the browser's actions; each one is a turn, run through the real tools.

    `replay` are actions taken before a server restart: they run first, through the same
    tools, before the browser is let in (`ready`); then the run's clock is set back by
    `elapsed_s` (the wall-clock time the session has existed), so the time limit counts from
    when the person started, not from the restart.
    """

    needs_sandbox = True

    def __init__(self, spec: str, replay: list[Action] | None = None, elapsed_s: float = 0.0) -> None:
        self.spec = spec
        self.queue: asyncio.Queue[Action] = asyncio.Queue()
        self.ready = asyncio.Event()
        self.env: AgentEnv | None = None
        self.finished = False
        self.turns = 0
        self.replay = list(replay or [])
        self.elapsed_s = elapsed_s
        self._n = 0

    async def run(self, env: AgentEnv) -> AgentOutcome:
        self.env = env
        out = AgentOutcome(end_reason="finished")
        open_conversation(env)
        try:
            for action in self.replay:
                if out.turns >= env.limits.max_turns:
                    out.end_reason = "max_turns"
                    return out
                if await self._turn(env, out, action):
                    return out
            env.started = time.monotonic() - self.elapsed_s
            self.ready.set()
            while True:
                if out.stop_at_limit(env):
                    break
                left = env.limits.max_minutes * 60 - env.elapsed_minutes() * 60
                try:
                    action = await asyncio.wait_for(self.queue.get(), timeout=left)
                except TimeoutError:
                    out.end_reason = "max_time"
                    break
                if await self._turn(env, out, action):
                    break
        finally:
            self.finished = True
            self.ready.set()
            self._drain()
        return out

    async def _turn(self, env: AgentEnv, out: AgentOutcome, action: Action) -> bool:
        """One action as one turn; True when it ended the run (a submit)."""
        out.turns += 1
        self.turns = out.turns
        if action.kind == "submit":
            out.final_message = action.text
            env.transcript.assistant(action.text)
            resolve_action(action, "submitted")
            return True
        self._n += 1
        call = ToolCall(id=f"h{self._n}", name=action.tool, arguments=action.args)
        env.transcript.assistant("", tool_calls=[call.model_dump(exclude_none=True)])
        env.transcript.tool_call(call.id, name=call.name, arguments=call.arguments)
        try:
            result = await env.tools.execute(call)
        except BaseException:
            resolve_action(action, "error: the harness failed to run this tool")
            raise
        env.transcript.tool_result(call.id, name=call.name, output=result)
        resolve_action(action, result)
        return False

    def _drain(self) -> None:
        """Answer actions that arrived too late (after submit or a limit)."""
        while not self.queue.empty():
            resolve_action(self.queue.get_nowait(), "error: the run has ended")

    async def act(self, action: Action) -> str:
        if self.finished:
            raise RunEnded("the run has ended")
        loop = asyncio.get_running_loop()
        action.done = loop.create_future()
        await self.queue.put(action)
        return await action.done


def resolve_action(action: Action, text: str) -> None:
    if action.done is not None and not action.done.done():
        action.done.set_result(text)


class HumanFactory:
    """Stands where an `AgentFactory` would in a planned run (`AgentLike`); hands out one
    `HumanAgent`."""

    kind = "human"

    def __init__(self, name: str, replay: list[Action] | None = None, elapsed_s: float = 0.0) -> None:
        self.spec = f"human:{name}"
        self.agent = HumanAgent(self.spec, replay, elapsed_s)

    def options(self) -> dict[str, object]:
        return {}

    def skip_reason(self, task: Task) -> str | None:
        return None

    def for_task(self, task: Task) -> Agent:
        return self.agent

    async def aclose(self) -> None:
        return None
