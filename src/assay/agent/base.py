"""What every agent receives and returns, whatever drives it (model, script, policy, person)."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assay.agent.tools import ToolBox
from assay.agent.transcript import Transcript
from assay.config import DEFAULTS
from assay.env.sandbox import Sandbox
from assay.llm.messages import ImagePart, Message, Usage
from assay.record import EndReason
from assay.task.model import Task


@dataclass
class RunLimits:
    max_turns: int = DEFAULTS.max_turns
    max_minutes: float = DEFAULTS.max_minutes
    max_usd: float = DEFAULTS.max_usd


@dataclass
class AgentEnv:
    task: Task
    level: str | None
    prompt: str
    system_prompt: str | None
    images: list[ImagePart]
    workspace: Path | None
    sandbox: Sandbox | None
    tools: ToolBox
    limits: RunLimits
    transcript: Transcript
    messages: list[dict[str, Any]] | None = None  # a conversation to continue (HealthBench rows)
    native_search: bool = False  # the model provider's own search on every call (`--search native`)
    started: float = field(default_factory=time.monotonic)

    def elapsed_minutes(self) -> float:
        return (time.monotonic() - self.started) / 60.0


@dataclass
class AgentOutcome:
    end_reason: EndReason
    final_message: str = ""
    usage: Usage = field(default_factory=Usage)
    cost_usd: float | None = 0.0
    turns: int = 0
    error: str | None = None
    error_status: int | None = None  # the provider's HTTP status when it ended the run (api_error)
    model: str | None = None

    def stop_at_limit(self, env: AgentEnv) -> bool:
        """Whether a run limit (turns, minutes, dollars) is reached before the next turn; if so,
        `end_reason` says which. Every agent checks its limits here, in this order."""
        limits = env.limits
        if self.turns >= limits.max_turns:
            self.end_reason = "max_turns"
        elif env.elapsed_minutes() >= limits.max_minutes:
            self.end_reason = "max_time"
        elif self.cost_usd is not None and self.cost_usd >= limits.max_usd:
            self.end_reason = "max_usd"
        else:
            return False
        return True


class Agent(ABC):
    """An agent spec resolved for one task: `run` does the work inside `env`."""

    spec: str
    model: str | None = None
    prices: dict[str, float] | None = None
    needs_sandbox: bool = True
    accepts_images: bool = False  # images reach this agent (task images, `read_file` on an image)

    def binds(self) -> list[tuple[Path, str]]:
        """Extra read-only folders this agent needs inside the sandbox (host path, mount point)."""
        return []

    @abstractmethod
    async def run(self, env: AgentEnv) -> AgentOutcome: ...


def open_conversation(env: AgentEnv, *, images: bool = True) -> list[Message]:
    """The conversation's opening as the agent sees it, each message also in the transcript:
    the system prompt, then a conversation to continue (HealthBench rows) or the brief (with
    the task's images; for a text-only model, a note saying they cannot be shown)."""
    messages: list[Message] = []
    shown = env.images if images else []
    if env.system_prompt:
        messages.append(Message(role="system", content=env.system_prompt))
        env.transcript.system(env.system_prompt)
    if env.messages and len(env.messages) > 1:
        for m in env.messages:
            role = str(m.get("role", "user"))
            content = str(m.get("content", ""))
            if role == "system" and env.system_prompt:
                continue
            if role == "assistant":
                messages.append(Message(role="assistant", content=content))
                env.transcript.assistant(content)
            elif role == "system":
                messages.append(Message(role="system", content=content))
                env.transcript.system(content)
            else:
                messages.append(Message(role="user", content=content))
                env.transcript.user(content)
        if shown:
            messages[-1].images = shown
        elif env.images:
            messages[-1].content += _unseen(len(env.images))
    else:
        prompt = env.prompt + ("" if shown or not env.images else _unseen(len(env.images)))
        messages.append(Message(role="user", content=prompt, images=shown))
        env.transcript.user(prompt, images=len(shown))
    return messages


def _unseen(n: int) -> str:
    return (f"\n\n[This task comes with {n} image{'s' if n != 1 else ''}; this model takes text only, "
            "so they are not shown.]")
