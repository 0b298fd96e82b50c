"""The run transcript: every message, tool call and tool output exactly as the agent saw it.

Events are emitted through one typed method per kind (the models are in `assay.record`),
so a reader never has to guess which fields an event carries.
"""

from __future__ import annotations

import time
from typing import Any, TypeVar

from assay.record import (
    AssistantEvent,
    ErrorEvent,
    Event,
    EventBase,
    HarnessEvent,
    StakeholderEvent,
    SystemEvent,
    ToolCallEvent,
    ToolResultEvent,
    UserEvent,
    safe_json,
)

E = TypeVar("E", bound=EventBase)


class Transcript:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self._t0 = time.monotonic()

    def _add(self, cls: type[E], **fields: Any) -> E:
        ev = cls(seq=len(self.events), t=round(time.monotonic() - self._t0, 4), **safe_json(fields))
        self.events.append(ev)  # type: ignore[arg-type]  # every E is a member of the Event union
        return ev

    def system(self, content: str) -> SystemEvent:
        return self._add(SystemEvent, content=content)

    def user(self, content: str, *, images: int | None = None, nudge: int | None = None) -> UserEvent:
        return self._add(UserEvent, content=content, images=images, nudge=nudge)

    def assistant(self, content: str, *, tool_calls: list[dict[str, Any]] | None = None,
                  usage: dict[str, Any] | None = None, stop_reason: str | None = None,
                  citations: list[dict[str, Any]] | None = None) -> AssistantEvent:
        return self._add(AssistantEvent, content=content, tool_calls=tool_calls or [], usage=usage,
                         stop_reason=stop_reason, citations=citations or [])

    def tool_call(self, id: str, name: str, arguments: dict[str, Any], *,
                  arguments_error: str | None = None) -> ToolCallEvent:
        return self._add(ToolCallEvent, id=id, name=name, arguments=arguments, arguments_error=arguments_error)

    def tool_result(self, id: str, name: str, output: str, *, images: int | None = None) -> ToolResultEvent:
        return self._add(ToolResultEvent, id=id, name=name, output=output, images=images)

    def stakeholder(self, line: dict[str, Any]) -> StakeholderEvent:
        """One signed ledger line (its mac left out)."""
        return self._add(StakeholderEvent, **{k: v for k, v in line.items() if k not in ("mac", "seq", "t", "kind")})

    def harness(self, note: str, **extra: Any) -> HarnessEvent:
        return self._add(HarnessEvent, note=note, **extra)

    def error(self, source: str, reason: str, *, status: int | None = None) -> ErrorEvent:
        return self._add(ErrorEvent, source=source, reason=reason, status=status)

    def of_kind(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.kind == kind]
