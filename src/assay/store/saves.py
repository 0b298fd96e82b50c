"""Saving runs: every run attempt with its transcript events and its grade, in one transaction.

`save_run` writes a run, its events and its grade in a single transaction, so a crash (even
``kill -9``) leaves either the whole run or nothing of it; resume relies on that: a key digest
counts as finished only when a complete ``done`` run exists. The same transaction keeps the
current-attempt row of the run's key (`assay.store.current`) and gives back the attempt's lease.

The hot path (``save_runs``, ``claim_many``) uses SQLAlchemy Core statements built once and
run with executemany, not the ORM: it is called thousands of times per campaign alongside
model calls. A transaction costs far more than the rows in it (about 2-3 ms of CPU on SQLite,
WAL journal, ``synchronous=NORMAL``, against well under 1 ms per run's rows), so a campaign
stores the runs that finish together in one transaction (`assay.campaign.saver`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, bindparam, select, tuple_

from assay.errors import InputError
from assay.record import Event, RunRecord, json_text
from assay.store import current
from assay.store.finished import GRADED_KEYS
from assay.store.leases import LEASE_ORDER
from assay.store.models import campaigns_t, events_t, grades_t, leases_t, runs_t
from assay.store.transactions import StoreBase

__all__ = ["FINAL_MESSAGE_REF", "SAVE_BATCH", "SaveOutcome", "Saves", "final_message_of"]

log = logging.getLogger(__name__)

# The statements of the hot path (`save_run`), built once: building an expression per call
# costs more CPU than SQLite takes to run it. The save locks the keys' lease rows in the one
# lock order (`assay.store.leases.LEASE_ORDER`).
_lk = leases_t.c
_SAVE_LOCK_LEASES = select(_lk.campaign, _lk.key_digest, _lk.attempt).where(
    tuple_(_lk.campaign, _lk.key_digest).in_(bindparam("keys", expanding=True))
).order_by(*LEASE_ORDER).with_for_update()
_SAVED_IDS = select(runs_t.c.run_id).where(runs_t.c.run_id.in_(bindparam("ids", expanding=True)))
_SAVE_RELEASE = leases_t.delete().where(
    leases_t.c.campaign == bindparam("c"), leases_t.c.key_digest == bindparam("d"),
    leases_t.c.attempt == bindparam("a"))
_INSERT_RUN, _INSERT_EVENTS, _INSERT_GRADE = runs_t.insert(), events_t.insert(), grades_t.insert()
SAVE_BATCH = 256
"""At most this many runs are written in one transaction (`Store.save_runs`)."""


FINAL_MESSAGE_REF = "content_is_final_message"
"""Set (true), in place of `content`, on the stored assistant event whose content is the run's
final message: the record (`runs.record`) keeps the one copy, `Store.events` puts it back. A
20 MB answer is stored once, not twice; rows without it (stores written before) hold their
own content and read as they are."""


def final_message_of(conn: Connection, run_id: str) -> str:
    """The run's final message, from its record (where an event marked `FINAL_MESSAGE_REF`
    finds its content)."""
    record = conn.execute(select(runs_t.c.record).where(runs_t.c.run_id == run_id)).scalar_one()
    return str(json.loads(record).get("final_message") or "")


def _final_event(events: Sequence[Event], final: str) -> int | None:
    """The index of the last assistant event whose content is `final` (None: none is, or
    `final` is empty)."""
    if not final:
        return None
    for i in range(len(events) - 1, -1, -1):
        e = events[i]
        if e.kind == "assistant" and getattr(e, "content", None) == final:
            return i
    return None


class SaveOutcome:
    """One run of `Store.save_runs`: its rows, and whether it was stored (`stored`; False: its
    key was already finished) or why not (`error`)."""

    __slots__ = ("_dump", "_row", "record", "events", "stored", "error")

    def __init__(self, record: RunRecord, events: Sequence[Event]) -> None:
        self.record, self.events = record, events
        self.stored: bool | None = None
        self.error: Exception | None = None
        self._dump: dict[str, Any] = {}
        self._row: dict[str, Any] = {}

    def run_row(self, now: float) -> dict[str, Any]:
        """The `runs` row; its `current_row` is built from the same row and dump, right after."""
        r, k = self.record, self.record.key
        rec = self._dump = r.model_dump(mode="json")
        row = self._row = {
            "run_id": r.run_id, "campaign": k.campaign, "key_digest": k.digest, "task_id": k.task_id,
            "task_hash": k.task_hash, "agent": k.agent, "level": k.level, "epoch": k.epoch,
            "options_hash": k.options_hash, "attempt": r.attempt, "status": r.status, "end_reason": r.end_reason,
            "score": r.score, "passed": r.passed, "harness_version": r.harness_version, "model": r.model,
            "sandbox": r.sandbox, "created_at": now, "record": json_text(rec)}
        return row

    def current_row(self) -> dict[str, Any]:
        """The `current_runs` row (`current.current_row`) of the `run_row` built before."""
        if not self._row:
            raise RuntimeError("current_row needs the run_row built first")
        return current.current_row(self._row, self._dump)

    def grade_row(self) -> dict[str, Any]:
        r = self.record
        audit = r.grade.audit
        return {"run_id": r.run_id, "grade": json_text(r.grade.flat()),
                "audit": None if audit is None else json_text(audit.model_dump(mode="json"))}

    def event_rows(self) -> list[dict[str, Any]]:
        """The `events` rows; the assistant event that said the final message refers to the
        record's copy instead of holding its own (`FINAL_MESSAGE_REF`)."""
        rid = self.record.run_id
        final = _final_event(self.events, self.record.final_message)
        rows = []
        for i, e in enumerate(self.events):
            data = e.data()
            if i == final:
                del data["content"]
                data[FINAL_MESSAGE_REF] = True
            rows.append({"run_id": rid, "seq": e.seq, "t": e.t, "kind": e.kind, "data": json_text(data)})
        return rows

    def lease(self) -> dict[str, Any]:
        k = self.record.key
        return {"c": k.campaign, "d": k.digest, "a": self.record.attempt}


class Saves(StoreBase):
    """A store's saves (a part of `Store`)."""

    def save_run(self, record: RunRecord, events: Sequence[Event]) -> bool:
        """Store a run attempt, its events and its grade in one transaction: `save_runs` of one
        run, raising what that run's save raised."""
        (out,) = self.save_runs([(record, events)])
        if out.error is not None:
            raise out.error
        return bool(out.stored)

    def save_runs(self, runs: Sequence[tuple[RunRecord, Sequence[Event]]]) -> list[SaveOutcome]:
        """Store run attempts with their events and grades, all in one transaction (one
        statement per table for all of them: a campaign's store cost per run falls when runs
        that finished together are saved together, `assay.campaign.saver`); each run's outcome
        in order.

        Each run is stored whole or not at all. A ``done`` run of a key that already has one is
        not stored (`stored` False): a worker that lost its lease (it stalled past the TTL) and
        finished anyway never adds a second finished attempt. The keys' lease rows are locked
        first on PostgreSQL, so two such saves queue. The lease of each attempt (same key, same
        attempt number, whoever holds it) is released in the same transaction: a stored attempt
        needs no lease, and a newer attempt's lease (a takeover) is left alone.

        When the store takes no writes (a full disk, a read-only file, a lost connection), every
        run's outcome is that InputError; when the transaction fails for another reason (a row
        one record makes invalid), each run is saved in a transaction of its own, so one bad
        record does not fail the others."""
        batch = [SaveOutcome(record, events) for record, events in runs]
        for start in range(0, len(batch), SAVE_BATCH):
            self._save_batch(batch[start:start + SAVE_BATCH])
        return batch

    def _save_batch(self, batch: list[SaveOutcome]) -> None:
        try:
            self._write_saves(batch)
        except InputError as e:
            for s in batch:
                s.error = e
        except Exception as e:
            if len(batch) == 1:
                batch[0].error = e
            else:
                for s in batch:
                    self._save_batch([s])

    def _write_saves(self, batch: list[SaveOutcome]) -> None:
        now = time.time()
        tries = 0

        def work(conn: Connection) -> None:
            nonlocal tries
            tries += 1
            todo = batch
            if tries > 1:
                # The first try's connection was lost: its commit may still have happened (the
                # acknowledgement was what got lost), so what it stored is not stored twice.
                ids = [s.record.run_id for s in batch]
                there = {r for (r,) in conn.execute(_SAVED_IDS, {"ids": ids})}
                for s in batch:
                    if s.record.run_id in there:
                        s.stored = True
                todo = [s for s in batch if s.record.run_id not in there]
            releases = sorted((s.lease() for s in todo), key=lambda r: (r["c"], r["d"]))
            if self._backend == "postgresql" and todo:  # every lease row this save changes, in the one lock order
                keys = sorted({(s.record.key.campaign, s.record.key.digest) for s in todo})
                locked = {(c, d, a) for c, d, a in conn.execute(_SAVE_LOCK_LEASES, {"keys": keys})}
                # only rows locked here are released: a lease row that appeared since (a later
                # claim of the key) is another worker's, and deleting it would wait on that worker
                releases = [r for r in releases if (r["c"], r["d"], r["a"]) in locked]
            finished = self._finished_keys(conn, [s for s in todo if s.record.status != "void"])
            take: list[SaveOutcome] = []
            for s in todo:
                key = (s.record.key.campaign, s.record.key.digest)
                if s.record.status != "void":
                    if key in finished:
                        log.warning("run %s not stored: run key %s of campaign %s is already finished (another "
                                    "worker took it over)", s.record.run_id, key[1], key[0])
                        s.stored = False
                        continue
                    finished.add(key)
                take.append(s)
            for name in sorted({s.record.key.campaign for s in take} - self._known_campaigns):
                self._ensure_campaign(conn, name, now)
            if take:
                conn.execute(_INSERT_RUN, [s.run_row(now) for s in take])
                events = [row for s in take for row in s.event_rows()]
                if events:
                    conn.execute(_INSERT_EVENTS, events)
                conn.execute(_INSERT_GRADE, [s.grade_row() for s in take])
                current.upsert(conn, [s.current_row() for s in take])
            if releases:
                conn.execute(_SAVE_RELEASE, releases)
            if todo:
                self._notify(conn, {s.record.key.campaign for s in todo})
            for s in take:
                s.stored = True

        self.write(work)
        self._known_campaigns.update(s.record.key.campaign for s in batch if s.stored)

    def _finished_keys(self, conn: Connection, saves: list[SaveOutcome]) -> set[tuple[str, str]]:
        """The (campaign, key digest) pairs of `saves` that have a stored ``done`` run. On
        PostgreSQL the save locked their lease rows before (`_SAVE_LOCK_LEASES`), so two
        workers' saves of one key queue; a SQLite writer holds the whole database from
        ``BEGIN IMMEDIATE``."""
        keys = sorted({(s.record.key.campaign, s.record.key.digest) for s in saves})
        if not keys:
            return set()
        by_campaign: dict[str, list[str]] = {}
        for c, d in keys:
            by_campaign.setdefault(c, []).append(d)
        out: set[tuple[str, str]] = set()
        for c, ds in by_campaign.items():
            out.update((c, d) for (d,) in conn.execute(GRADED_KEYS, {"c": c, "ds": ds}))
        return out

    def _ensure_campaign(self, conn: Connection, name: str, now: float) -> None:
        ins = self._insert(campaigns_t)
        if ins is not None:
            conn.execute(
                ins.values(name=name, created_at=now).on_conflict_do_nothing(index_elements=["name"])
            )
            return
        exists = conn.execute(select(campaigns_t.c.id).where(campaigns_t.c.name == name)).first()
        if exists is None:
            conn.execute(campaigns_t.insert().values(name=name, created_at=now))
