"""The server's view of one play session: its key, its recorded actions, the page's mirror.

The run itself lives in the session's worker (`link`); the server keeps what the page shows
(state, brief, tools, transcript events by index), so a busy worker's page still answers.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import time
from dataclasses import dataclass, field
from typing import Any

from assay.record import RunRecord
from assay.report.build import run_row
from assay.store.play import RecordedAction, StoredPlay
from assay.task.model import Task
from assay.web.worker_link import WorkerLink

__all__ = ["POLL_BYTES", "PlaySession"]

POLL_BYTES = 1 << 20
"""At most about this many bytes of transcript events in one poll (at least one event): a page
that asks from the start of a big session gets it a window at a time (`more`), so no poll
builds a response of the whole transcript on the server's event loop."""

@dataclass
class PlaySession:
    """The server's view of one session; its run lives in the worker (`link`)."""

    id: str
    task: Task
    name: str
    campaign: str
    level: str | None
    epoch: int
    owner: str | None = None
    created: float = field(default_factory=time.time)
    actions: list[RecordedAction] = field(default_factory=list)
    record: RunRecord | None = None
    error: str | None = None
    link: WorkerLink | None = None
    supervisor: asyncio.Task[None] | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    finished: bool = False
    turns: int = 0
    replaying: bool = False
    generation: int = 0  # each worker of this session (a replay after a stuck action is a new one)
    busy: bool = False  # the last poll found the worker busy: the mirror answered
    env: dict[str, Any] | None = None  # brief, messages, images, tools, has_workspace, limits
    elapsed_s: float = 0.0
    done: dict[str, Any] | None = None  # the worker's last word
    restart: bool = False  # the worker is being stopped to replay the session without a stuck action
    _idx: list[int] = field(default_factory=list)
    _events: list[dict[str, Any]] = field(default_factory=list)
    _ends: list[int] = field(default_factory=list)  # each event's end in the transcript's bytes, as JSON
    _next: int = 0

    @property
    def spec(self) -> str:
        return f"human:{self.name}"

    def state(self) -> str:
        if self.record is not None:
            return "done"
        if self.error is not None:
            return "error"
        if self.finished:
            return "grading"
        if self.ready.is_set():
            return "running"
        return "resuming" if self.replaying else "starting"

    def stored(self) -> StoredPlay:
        return StoredPlay(id=self.id, owner=self.owner, name=self.name, task_id=self.task.id, level=self.level,
                          campaign=self.campaign, epoch=self.epoch, state="live", actions=list(self.actions),
                          created_at=self.created, updated_at=time.time())

    def merge(self, view: dict[str, Any]) -> None:
        """Take a worker's view into the mirror (events by their transcript index)."""
        for i, ev in view.get("events", []):
            if i >= self._next:
                self._idx.append(int(i))
                self._events.append(ev)
                self._ends.append((self._ends[-1] if self._ends else 0) + len(json.dumps(ev)))
        self._next = max(self._next, int(view.get("next", self._next)))
        self.turns = int(view.get("turns", self.turns))
        self.elapsed_s = float(view.get("elapsed_s", self.elapsed_s))

    def fresh_worker(self) -> None:
        """A new worker replays the session: its transcript starts over."""
        self.generation += 1
        self.ready = asyncio.Event()
        self.finished = False
        self.replaying = bool(self.actions)
        self.env = None
        self.done = None
        self._idx, self._events, self._ends, self._next = [], [], [], 0

    def view(self, since: int = 0) -> dict[str, Any]:
        """What the page polls: state, brief, tools, the transcript since `since` (a window of
        about `POLL_BYTES`; `more` when the rest follows), the grade."""
        data: dict[str, Any] = {
            "session": self.id, "state": self.state(), "task_id": self.task.id, "title": self.task.title,
            "agent": self.spec, "campaign": self.campaign, "level": self.level, "epoch": self.epoch,
            "turns": self.turns, "error": self.error, "busy": self.busy,
        }
        if self.env is not None:
            start = bisect.bisect_left(self._idx, since)
            before = self._ends[start - 1] if start else 0
            end = max(start + 1, bisect.bisect_right(self._ends, before + POLL_BYTES))
            data["events"] = self._events[start:end]
            more = end < len(self._events)
            data["next"] = self._idx[end] if more else max(self._next, since)
            data["more"] = more  # the page asks again at once, from `next`
            data.update(self.env)
            data["elapsed_s"] = self.elapsed_s if self.ready.is_set() else 0.0
        else:
            data.update(events=[], next=since, more=False, brief=None, tools=[], limits=None, elapsed_s=0.0)
        if self.record is not None:
            data["run"] = run_row(self.record)
        return data
