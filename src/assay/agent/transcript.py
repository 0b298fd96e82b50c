"""The run transcript: every message, tool call and tool output exactly as the agent saw it."""

from __future__ import annotations

import time
from typing import Any

from assay.record import Event


class Transcript:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self._t0 = time.monotonic()

    def emit(self, kind: str, **data: Any) -> Event:
        ev = Event(seq=len(self.events), t=round(time.monotonic() - self._t0, 4), kind=kind, data=data)
        self.events.append(ev)
        return ev

    def of_kind(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.kind == kind]
