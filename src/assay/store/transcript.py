"""A run's transcript read a window at a time, and one event whole.

A transcript may be tens of megabytes (an agent writes a few large files, each call's
arguments up to 8 MiB). The run page shows a bounded window of it: `event_window` reads the
events from a sequence number on, at most so many, and of each only its first bytes, until a
budget of bytes is spent; a long event never leaves the database whole (SQLite: an
incremental blob read of the row's `data`, whose size it knows without reading it;
PostgreSQL: `substr`, with `octet_length` from the TOAST header). An event read in part is
the value its first bytes begin (`assay.jsonlimits.loads_head`), its cut text marked.
`stored_event` reads one event whole (what the page links to for an event it clips).
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from sqlalchemy import Connection, func, literal_column, select

from assay.jsonlimits import JSONLimitError, loads, loads_head
from assay.record import Event, HarnessEvent, event_from_wire
from assay.store.models import events_t
from assay.store.saves import FINAL_MESSAGE_REF, final_message_of

if TYPE_CHECKING:
    from assay.store.db import Store

__all__ = ["EventWindow", "ShownEvent", "event_window", "stored_event"]


@dataclass(frozen=True)
class ShownEvent:
    """One event of a window: `event` as far as it was read, `size` the bytes of the whole
    event as stored (its JSON data, UTF-8; with the final message it refers to), `read` how
    many of them were read, `clipped` whether that is not all."""

    event: Event
    size: int
    read: int
    clipped: bool


@dataclass(frozen=True)
class EventWindow:
    """Events of a run from a sequence number on: `total` events in the run, `before` of them
    ahead of this window, `next_seq` where the next window starts (None: this one reaches the
    end of the transcript)."""

    events: list[ShownEvent]
    total: int
    before: int
    next_seq: int | None


def event_window(store: Store, run_id: str, start: int = 0, *, max_events: int, max_bytes: int,
                 head_bytes: int, mark: str = "") -> EventWindow:
    """The events of run `run_id` (its whole id) with `seq >= start`, in order: at most
    `max_events`, and no more than fit in `max_bytes` bytes read (the first event is always
    shown). Of each event at most its first `head_bytes` bytes are read; a string cut there
    ends with `mark`."""
    of_run = events_t.c.run_id == run_id
    with store.engine.connect() as conn:
        total = conn.execute(select(func.count()).select_from(events_t).where(of_run)).scalar_one()
        before = conn.execute(select(func.count()).select_from(events_t)
                              .where(of_run, events_t.c.seq < start)).scalar_one()
        shown: list[ShownEvent] = []
        spent, next_seq = 0, None
        final: str | None = None
        for seq, t, kind, size, head in _heads(conn, run_id, start, max_events + 1, head_bytes):
            if len(shown) == max_events or (shown and spent + len(head) > max_bytes):
                next_seq = seq
                break
            read = len(head)
            clipped = size > len(head)
            text = codecs.getincrementaldecoder("utf-8")("replace").decode(head, final=not clipped)
            data = _data(text, clipped=clipped, mark=mark)
            if data.pop(FINAL_MESSAGE_REF, None) is not None:  # the run's final message, kept in its record
                final = final_message_of(conn, run_id) if final is None else final
                whole = final.encode()
                size, read = size + len(whole), read + min(len(whole), head_bytes)
                data["content"] = final
                if len(whole) > head_bytes:
                    clipped = True
                    data["content"] = whole[:head_bytes].decode(errors="ignore") + mark
            spent += read
            shown.append(ShownEvent(_event(seq, t, kind, data, text), size, read, clipped))
    return EventWindow(shown, total, before, next_seq)


def _heads(conn: Connection, run_id: str, start: int, limit: int,
           head_bytes: int) -> Iterator[tuple[int, float, str, int, bytes]]:
    """(seq, t, kind, bytes of its data, its data's first `head_bytes` bytes) of at most
    `limit` events of the run from `start` on, each read when the caller asks for it."""
    of_run = (events_t.c.run_id == run_id) & (events_t.c.seq >= start)
    order = events_t.c.seq
    if conn.dialect.name == "sqlite":  # the size from the record header, the head from the first pages
        rows = conn.execute(select(events_t.c.seq, events_t.c.t, events_t.c.kind, literal_column("events.rowid"))
                            .where(of_run).order_by(order).limit(limit)).all()
        raw: Any = conn.connection.driver_connection
        for seq, t, kind, rowid in rows:
            with raw.blobopen("events", "data", rowid, readonly=True) as blob:
                yield seq, t, kind, len(blob), blob.read(head_bytes)
        return
    rows = conn.execute(select(events_t.c.seq, events_t.c.t, events_t.c.kind, func.octet_length(events_t.c.data),
                               func.substr(events_t.c.data, 1, head_bytes))  # characters: at least head_bytes bytes
                        .where(of_run).order_by(order).limit(limit)).all()
    for seq, t, kind, size, head in rows:
        yield seq, t, kind, size, head.encode()[:head_bytes]


def stored_event(store: Store, run_id: str, seq: int) -> Event | None:
    """Event `seq` of run `run_id` (its whole id), whole; None when there is none."""
    with store.engine.connect() as conn:
        row = conn.execute(select(events_t.c.t, events_t.c.kind, events_t.c.data)
                           .where(events_t.c.run_id == run_id, events_t.c.seq == seq)).first()
        if row is None:
            return None
        t, kind, text = row
        data = json.loads(text)
        if data.pop(FINAL_MESSAGE_REF, None) is not None:
            data["content"] = final_message_of(conn, run_id)
    return event_from_wire(seq, t, kind, data)


def _data(head: str, *, clipped: bool, mark: str) -> dict[str, Any]:
    """An event's data from the text read of it: parsed whole, or as far as they go
    (also when it nests deeper than `assay.jsonlimits` reads whole)."""
    value: Any = None
    if not clipped:
        try:
            value = loads(head)
        except JSONLimitError:  # nested too deep to parse whole: read as far as it goes, below
            value = None
    if value is None:
        value = loads_head(head, mark)
    return value if isinstance(value, dict) else {}


def _event(seq: int, t: float, kind: str, data: dict[str, Any], head: str) -> Event:
    """The event of a (possibly clipped) data; one whose clipped fields no longer make its kind
    is shown as a note holding its first characters."""
    try:
        return event_from_wire(seq, t, kind, data)
    except ValidationError:
        return HarnessEvent(seq=seq, t=t, note=f"[{kind}] {head}")
