"""The run store: every run attempt, its transcript events, its grade, and the judge cache.

One :class:`Store` wraps one SQLAlchemy engine (SQLite by default, PostgreSQL through
``postgresql+psycopg://``). Opening a store migrates its schema to the latest Alembic
revision. :meth:`Store.save_run` writes a run, its events and its grade in a single
transaction, so a crash (even ``kill -9``) leaves either the whole run or nothing of it;
resume relies on that: a key digest counts as finished only when a complete ``done`` run
exists.

Several workers (processes, machines) share one campaign through leases: a worker runs a key
only after :meth:`Store.claim` gave it the key's lease (one transaction that refuses a
finished key or a live lease of another worker, takes over an expired one, and decides the
attempt number); :meth:`Store.heartbeat` keeps a worker's leases alive and
:meth:`Store.release` gives them back. On PostgreSQL all of them lock lease rows in one order
(`_LEASE_ORDER`), so workers never deadlock, and a transaction the database rolls back to
break a conflict all the same is run again (`Store.write`). A worker waiting on keys another
holds is woken by :meth:`Store.watch` when runs are stored or leases given back
(`assay.store.watch`), and reads where they stand with :meth:`Store.lease_states`.

The hot path (``save_runs``, ``claim_many``) uses SQLAlchemy Core statements built once and
run with executemany, not the ORM: it is called thousands of times per campaign alongside
model calls. A transaction costs far more than the rows in it (about 2-3 ms of CPU on SQLite,
WAL journal, ``synchronous=NORMAL``, against well under 1 ms per run's rows), so a campaign
stores the runs that finish together in one transaction (`assay.campaign.saver`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import random
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    and_,
    bindparam,
    create_engine,
    event,
    exc,
    func,
    literal,
    select,
    tuple_,
    update,
)
from sqlalchemy.engine import make_url
from sqlalchemy.pool import StaticPool

from assay.config import store_url
from assay.errors import InputError
from assay.record import VOID_REASONS, Event, RunRecord, event_from_wire, json_text
from assay.store import current
from assay.store.models import (
    REPORT_COLUMNS,
    campaigns_t,
    events_t,
    grades_t,
    judge_cache_t,
    leases_t,
    runs_t,
)
from assay.store.watch import PostgresWatch, SqliteWatch, Watch

if TYPE_CHECKING:
    from alembic.config import Config

log = logging.getLogger(__name__)
T = TypeVar("T")

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
BUSY_TIMEOUT_MS = 30_000
MIN_PREFIX = 6
_PG_MIGRATION_LOCK = 0x61737361  # "assa": serialises concurrent migrations on PostgreSQL


# The statements of the hot path (`save_run`), built once: building an expression per call
# costs more CPU than SQLite takes to run it.
#
# One lock order for every statement that locks lease rows on PostgreSQL (claims, saves,
# heartbeats, releases): (campaign, key_digest) in the database's own order, locked by one
# `SELECT ... ORDER BY ... FOR UPDATE` before the rows are changed (PostgreSQL sorts, then
# locks the rows in that order). New lease rows are inserted after every lock, in sorted
# order. Two transactions that lock in one order never wait on each other in a cycle, so
# workers never deadlock; a deadlock or serialization failure all the same (another program
# on the database) is retried (`Store.write`).
_lk = leases_t.c
_LEASE_ORDER = (_lk.campaign, _lk.key_digest)
_SAVE_LOCK_LEASES = select(_lk.key_digest).where(
    tuple_(_lk.campaign, _lk.key_digest).in_(bindparam("keys", expanding=True))
).order_by(*_LEASE_ORDER).with_for_update()
_HOLDER_LOCK = select(_lk.key_digest).where(_lk.holder == bindparam("h")).order_by(*_LEASE_ORDER).with_for_update()
NOTIFY_CHANNEL = "assay_leases"
"""PostgreSQL channel a transaction that stores runs or releases leases notifies (the
payload: the campaign), at its commit: it wakes the workers waiting on those keys (`Store.watch`)."""
CONFLICT_STATES = frozenset({"40P01", "40001"})
"""SQLSTATEs of a transaction the database rolled back to break a conflict: deadlock detected,
serialization failure. Nothing of it was committed; `Store.write` runs it again."""
CONFLICT_RETRIES = 8
"""How many times `Store.write` runs a transaction again after a conflict (backoff: 10 ms
doubling, at most 0.5 s, with jitter), before it stops with the reason."""


def _graded() -> ColumnElement[bool]:
    """A stored attempt that finished its key by being graded: done (or its task broken), not
    a key void too often and stored as failed (SPEC `void_attempts`: its end reason says void)."""
    return and_(runs_t.c.status.in_(("done", "broken")), runs_t.c.end_reason.not_in(sorted(VOID_REASONS)))


def _finished(retry_void: bool = False) -> ColumnElement[bool]:
    """An attempt that finishes its key: graded, or (unless `retry_void`) void too often."""
    return _graded() if retry_void else runs_t.c.status.in_(("done", "broken"))


_SAVE_DONE = select(runs_t.c.key_digest).distinct().where(
    runs_t.c.campaign == bindparam("c"), runs_t.c.key_digest.in_(bindparam("ds", expanding=True)), _graded())
# The claim's statements (`Store.claim_many`), built once for the same reason.
_CLAIM_LEASES = select(_lk.key_digest, _lk.holder, _lk.heartbeat_at, _lk.ttl_s, _lk.attempt).where(
    _lk.campaign == bindparam("c"), _lk.key_digest.in_(bindparam("ds", expanding=True))
).order_by(*_LEASE_ORDER).with_for_update()
_CLAIM_DROP = leases_t.delete().where(_lk.campaign == bindparam("c"),
                                      _lk.key_digest.in_(bindparam("ds", expanding=True)))
_CLAIM_ATTEMPTS = select(runs_t.c.key_digest, func.max(runs_t.c.attempt)).where(
    runs_t.c.campaign == bindparam("c"), runs_t.c.key_digest.in_(bindparam("ds", expanding=True))
).group_by(runs_t.c.key_digest)
_CLAIM_TAKE_OVER = update(leases_t).where(_lk.campaign == bindparam("c"), _lk.key_digest == bindparam("d")).values(
    attempt=bindparam("a"), holder=bindparam("h"), heartbeat_at=bindparam("now"), ttl_s=bindparam("ttl"),
    claimed_at=bindparam("now"))


@functools.cache
def _dialect_insert(backend: str) -> Any:
    """The backend's `insert` with ON CONFLICT (None: a backend without), its dialect module
    imported on first use: importing PostgreSQL's costs a SQLite store's commands ~40 ms."""
    if backend == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert
    if backend == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert
    return None


@functools.cache
def _claim_insert(backend: str) -> Any:
    """The claim's insert of new leases that skips keys another worker just took (None: a
    backend without ON CONFLICT), built once per backend."""
    ins = _dialect_insert(backend)
    return None if ins is None else ins(leases_t).on_conflict_do_nothing(
        index_elements=["campaign", "key_digest"]).returning(_lk.key_digest)


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


class LeaseStates:
    """`Store.lease_states`: the finished keys among those asked about, and the leases of
    the others: key digest -> (holder, seconds until the lease lapses)."""

    __slots__ = ("finished", "leases")

    def __init__(self) -> None:
        self.finished: set[str] = set()
        self.leases: dict[str, tuple[str, float]] = {}


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


def _sort_key(r: RunRecord) -> tuple[Any, ...]:
    """Every attempt's order: task, agent, level (none first), epoch, campaign, attempt."""
    k = r.key
    return (k.task_id, k.agent, k.level is not None, k.level or "", k.epoch, k.campaign, r.attempt)


DEFAULT_FOLDER = ".assay"
"""The folder of the default store (`config.store_url`), made when missing."""


def _store_folder(path: Path, create: bool) -> None:
    folder = path.parent
    if folder.is_dir():
        return
    if not (create or folder.name == DEFAULT_FOLDER):
        raise InputError(None, "--store", f"the folder {folder} does not exist (a mistyped path?): make it first, "
                                         "or pass --create (assay run, serve, import, users add)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(None, "--store", f"cannot make the store's folder {folder}: {e.strerror or e}") from None


class Store:
    """A run store at a SQLAlchemy URL; see the module docstring."""

    def __init__(self, url: str, *, create: bool = False) -> None:
        """`create`: make a SQLite file's missing folder. Without it only the default folder
        (`.assay`) is made, so a mistyped `--store` path is an error, not a new empty store."""
        parsed = make_url(url)
        if parsed.drivername == "postgresql":  # plain URL: use psycopg 3, not psycopg2
            parsed = parsed.set(drivername="postgresql+psycopg")
        self.url: str = url
        self._backend = parsed.get_backend_name()
        self._db_path: Path | None = None
        self._memory = False
        kwargs: dict[str, Any] = {}
        if self._backend == "sqlite":
            db = parsed.database or ""
            if db in ("", ":memory:") or db.startswith("file:"):
                self._memory = db in ("", ":memory:")
                kwargs["poolclass"] = StaticPool
                kwargs["connect_args"] = {"check_same_thread": False}
            else:
                path = Path(db).expanduser()
                if not path.is_absolute():
                    path = Path.cwd() / path
                _store_folder(path, create)
                self._db_path = path.resolve()
                parsed = parsed.set(database=str(self._db_path))
                kwargs["connect_args"] = {"check_same_thread": False, "timeout": BUSY_TIMEOUT_MS / 1000}
        if self._backend == "postgresql":
            kwargs["pool_pre_ping"] = True  # a connection the server dropped (restart, idle kill) is replaced
        self.engine: Engine = create_engine(parsed, **kwargs)
        if self._backend == "sqlite":
            self._install_sqlite_hooks()
        self._write_lock = threading.Lock()
        self._known_campaigns: set[str] = set()
        self._closed = False
        try:
            self.migrate()
        except (exc.SQLAlchemyError, OSError) as e:
            self.engine.dispose()
            raise InputError(None, "--store", f"cannot open the store {self.redacted_url}: {db_reason(e)}") from None

    # --- setup ---------------------------------------------------------------------------

    def _install_sqlite_hooks(self) -> None:
        memory = self._memory

        @event.listens_for(self.engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            # Take BEGIN out of the sqlite3 module's hands (its legacy mode does not put DDL
            # or SELECT in transactions); SQLAlchemy's "begin" hook below emits it instead.
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            if not memory:
                _enable_wal(cur)
            cur.execute("PRAGMA synchronous = NORMAL")
            cur.execute("PRAGMA foreign_keys = ON")
            cur.close()

        @event.listens_for(self.engine, "begin")
        def _on_begin(conn: Connection) -> None:
            # Writers take the write lock up front, so busy_timeout applies and two writers
            # never deadlock upgrading a read lock.
            if conn.get_execution_options().get("assay_write"):
                conn.exec_driver_sql("BEGIN IMMEDIATE")
            else:
                conn.exec_driver_sql("BEGIN")

    def _alembic_config(self) -> Config:
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
        # ConfigParser interpolates `%`: a URL's escapes (a Unix-socket `?host=%2Ftmp...`) are doubled.
        cfg.set_main_option("sqlalchemy.url", self.engine.url.render_as_string(hide_password=False).replace("%", "%%"))
        return cfg

    def _stored_revision(self) -> str | None:
        """The store's one ``alembic_version`` row, or None (no table, no row, several rows).
        Read without alembic: opening a current store (every ``assay`` command) must not pay
        for importing it."""
        with self.engine.connect() as conn:
            try:
                rows = conn.exec_driver_sql("SELECT version_num FROM alembic_version").fetchall()
            except exc.DBAPIError:  # no such table: a new store (or not ours); alembic decides
                rows = []
            conn.rollback()
        return str(rows[0][0]) if len(rows) == 1 else None

    def migrate(self) -> None:
        """Upgrade the schema to the newest revision (a no-op when already there). A store at
        :func:`head_revision` is left alone without importing alembic; anything else goes
        through alembic's own check and upgrade."""
        head = head_revision()
        if head is not None and self._stored_revision() == head:
            return
        from alembic import command
        from alembic.runtime.migration import MigrationContext
        from alembic.script import ScriptDirectory

        cfg = self._alembic_config()
        head = ScriptDirectory.from_config(cfg).get_current_head()
        with self.engine.connect() as conn:
            if MigrationContext.configure(conn).get_current_revision() == head:
                conn.rollback()
                return
            conn.rollback()
        with self.engine.connect().execution_options(assay_write=True) as conn, conn.begin():
            if self._backend == "postgresql":
                conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_MIGRATION_LOCK})")
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

    @property
    def redacted_url(self) -> str:
        """The store's URL without its password (for messages)."""
        return self.engine.url.render_as_string(hide_password=True)

    @property
    def dir(self) -> Path:
        """Folder for files next to the database; run folders live under ``dir / "runs"``.

        For a SQLite file: the folder holding it; otherwise ``./.assay`` under the cwd.
        """
        if self._db_path is not None:
            return self._db_path.parent
        return Path.cwd().resolve() / ".assay"

    def _writer(self) -> Connection:
        return self.engine.connect().execution_options(assay_write=True)

    @contextlib.contextmanager
    def transaction(self, *, retryable: bool = False) -> Iterator[Connection]:
        """One write transaction (all or nothing). A store that stops taking writes (a full
        disk, a read-only file, a dropped connection) is InputError with the database's reason:
        the command stops with exit 2, every run stored before is kept, and it can resume.
        With `retryable`, a lost connection and a conflict the database rolled back
        (`CONFLICT_STATES`) are raised as they are (`write` runs the work again)."""
        try:
            with self._write_lock, self._writer() as conn, conn.begin():
                yield conn
        except exc.OperationalError as e:
            if retryable and (e.connection_invalidated or conflict_state(e) is not None):
                raise
            raise self._write_error(e) from None

    def _write_error(self, e: exc.DBAPIError) -> InputError:
        return InputError(None, "--store", f"cannot write to the store {self.redacted_url}: {db_reason(e)}; "
                          "every finished run is kept: run the same command again to resume")

    def write(self, work: Callable[[Connection], T]) -> T:
        """`work` in one write transaction (`transaction`). When the database connection is lost
        during it (the server restarted or ended the connection mid-transaction: nothing of it
        was committed, unless only the commit's answer was lost: `work` checks), it is done
        once more on a fresh connection; a second loss is the InputError of `transaction` (exit
        2, finished runs kept). When the database rolled it back to break a deadlock or a
        serialization conflict (nothing of it committed), it is done again after a short
        backoff, up to `CONFLICT_RETRIES` times, then stops the same way."""
        lost = conflicts = 0
        while True:
            try:
                with self.transaction(retryable=True) as conn:
                    return work(conn)
            except exc.OperationalError as e:  # only a lost connection or a conflict gets here
                state = conflict_state(e)
                if state is None:
                    lost += 1
                    if lost > 1:
                        raise self._write_error(e) from None
                    log.warning("store connection lost (%s); the write is retried once on a fresh connection",
                                db_reason(e))
                    continue
                conflicts += 1
                if conflicts > CONFLICT_RETRIES:
                    raise self._write_error(e) from None
                pause = min(0.5, 0.01 * 2 ** (conflicts - 1)) * random.uniform(0.5, 1.5)
                log.warning("store transaction rolled back by the database (%s, SQLSTATE %s); retried in %.0f ms "
                            "(%d of %d)", db_reason(e), state, pause * 1000, conflicts, CONFLICT_RETRIES)
                time.sleep(pause)

    def _insert(self, table: Any) -> Any:
        ins = _dialect_insert(self._backend)
        return None if ins is None else ins(table)

    # --- writes --------------------------------------------------------------------------

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
            if self._backend == "postgresql" and todo:  # every lease row this save changes, in the one lock order
                keys = sorted({(s.record.key.campaign, s.record.key.digest) for s in todo})
                conn.execute(_SAVE_LOCK_LEASES, {"keys": keys})
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
            if todo:
                conn.execute(_SAVE_RELEASE, sorted((s.lease() for s in todo), key=lambda r: (r["c"], r["d"])))
                self._notify(conn, {s.record.key.campaign for s in todo})
            for s in take:
                s.stored = True

        self.write(work)
        self._known_campaigns.update(s.record.key.campaign for s in batch if s.stored)

    def _notify(self, conn: Connection, campaigns: Iterable[str]) -> None:
        """Wake the workers waiting on these campaigns' keys when this transaction commits
        (PostgreSQL's NOTIFY on `NOTIFY_CHANNEL`; `Store.watch`). SQLite's waiters see the
        commit itself (`PRAGMA data_version`)."""
        if self._backend == "postgresql":
            for name in sorted(set(campaigns)):
                conn.execute(select(func.pg_notify(NOTIFY_CHANNEL, name)))

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
            out.update((c, d) for (d,) in conn.execute(_SAVE_DONE, {"c": c, "ds": ds}))
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

    def cache_put(self, key: str, value: str) -> None:
        """Insert or replace a judge-cache entry."""
        now = time.time()
        ins = self._insert(judge_cache_t)

        def work(conn: Connection) -> None:
            if ins is not None:
                stmt = ins.values(key=key, value=value, created_at=now)
                conn.execute(
                    stmt.on_conflict_do_update(
                        index_elements=["key"],
                        set_={"value": stmt.excluded.value, "created_at": stmt.excluded.created_at},
                    )
                )
            else:
                conn.execute(judge_cache_t.delete().where(judge_cache_t.c.key == key))
                conn.execute(judge_cache_t.insert().values(key=key, value=value, created_at=now))

        self.write(work)

    # --- leases --------------------------------------------------------------------------

    def _clock(self, conn: Connection) -> float:
        """The store's clock: the database server's on PostgreSQL, so workers on several
        machines compare heartbeats on one clock; this machine's for a SQLite file."""
        if self._backend == "postgresql":
            return float(conn.execute(select(_pg_now())).scalar_one())
        return time.time()

    def claim(self, campaign: str, digest: str, holder: str, ttl_s: float,
              dead_holders: Collection[str] = ()) -> int | None:
        """Claim run key `digest` of `campaign` for `holder`: `claim_many` of one key."""
        return self.claim_many(campaign, [digest], holder, ttl_s, dead_holders).get(digest)

    def claim_many(self, campaign: str, digests: Sequence[str], holder: str, ttl_s: float,
                   dead_holders: Collection[str] = ()) -> dict[str, int]:
        """Claim run keys `digests` of `campaign` for `holder`, in one transaction; the keys won,
        each with the attempt number to run. A key is not won when it is finished (a ``done``
        run is stored) or another holder's lease on it is live. An expired lease (no heartbeat
        for its TTL) is taken over, and so is one of `dead_holders` (workers known to be gone,
        e.g. a process of this machine that died).

        On SQLite the writer's ``BEGIN IMMEDIATE`` serialises it against every other writer; on
        PostgreSQL the existing lease rows are locked (``SELECT ... FOR UPDATE``) and new ones
        inserted with ``ON CONFLICT DO NOTHING``, so of two workers racing for a key exactly one
        wins. The attempt number is one past both the highest stored attempt and the lease's
        last one, so two attempts of a key never share a number. A campaign's worker claims a
        few keys at a time (one transaction for them all: the store's cost per run stays small)."""
        if not digests:
            return {}
        keys = list(dict.fromkeys(digests))
        return self.write(lambda conn: self._claim(conn, campaign, keys, holder, ttl_s, dead_holders))

    def _claim(self, conn: Connection, campaign: str, keys: list[str], holder: str, ttl_s: float,
               dead_holders: Collection[str]) -> dict[str, int]:
        now = self._clock(conn)
        at = {"c": campaign, "ds": keys}
        leases = {r.key_digest: r for r in conn.execute(_CLAIM_LEASES, at)}
        free = [d for d in keys if (lease := leases.get(d)) is None or lease.holder == holder
                or lease.holder in dead_holders or lease.heartbeat_at + lease.ttl_s <= now]
        if not free:
            return {}
        done = {d for (d,) in conn.execute(_SAVE_DONE, {"c": campaign, "ds": free})}
        leftover = [d for d in done if d in leases]  # finished keys' leases (holder died after saving)
        if leftover:
            conn.execute(_CLAIM_DROP, {"c": campaign, "ds": leftover})
        free = [d for d in free if d not in done]
        if not free:
            return {}
        stored = dict(conn.execute(_CLAIM_ATTEMPTS, {"c": campaign, "ds": free}).all())
        won: dict[str, int] = {}
        for d in free:
            lease = leases.get(d)
            won[d] = max(int(stored.get(d) or 0), lease.attempt if lease is not None else 0) + 1
        row = {"holder": holder, "heartbeat_at": now, "ttl_s": ttl_s, "claimed_at": now}
        taken = [{"c": campaign, "d": d, "a": won[d], "h": holder, "now": now, "ttl": ttl_s}
                 for d in sorted(free) if d in leases]
        if taken:
            conn.execute(_CLAIM_TAKE_OVER, taken)
        # after every lock, in sorted order: two claims inserting the same new keys queue, never cross
        new = [{"campaign": campaign, "key_digest": d, "attempt": won[d], **row}
               for d in sorted(free) if d not in leases]
        if new:
            ins = _claim_insert(self._backend)
            if ins is None:
                conn.execute(leases_t.insert(), new)
            else:
                inserted = {r[0] for r in conn.execute(ins, new)}
                # not inserted: another worker inserted that lease after our read (PostgreSQL); theirs stands
                for d in [d for d in won if d not in inserted and d not in leases]:
                    del won[d]
        return won

    def heartbeat(self, holder: str) -> int:
        """Renew every lease of `holder` in one statement; how many it still holds. On
        PostgreSQL its rows are locked first in the one lock order (`_LEASE_ORDER`): another
        worker's claim locks some of them too, to see whether they expired."""
        now: ColumnElement[Any] = _pg_now() if self._backend == "postgresql" else literal(time.time())
        stmt = update(leases_t).where(leases_t.c.holder == holder).values(heartbeat_at=now)

        def work(conn: Connection) -> int:
            if self._backend == "postgresql":
                conn.execute(_HOLDER_LOCK, {"h": holder})
            return int(conn.execute(stmt).rowcount)

        return self.write(work)

    def release(self, holder: str, campaign: str | None = None, digests: Sequence[str] | None = None) -> None:
        """Give back `holder`'s leases: those on `digests` of `campaign`, or all of them. The
        workers waiting on them are woken (`watch`)."""
        where = [leases_t.c.holder == holder]
        if campaign is not None:
            where.append(leases_t.c.campaign == campaign)
        if digests is not None:
            if not digests:
                return
            where.append(leases_t.c.key_digest.in_(sorted(set(digests))))
        lock = select(_lk.campaign).where(*where).order_by(*_LEASE_ORDER).with_for_update()
        stmt = leases_t.delete().where(*where)

        def work(conn: Connection) -> None:
            if self._backend != "postgresql":
                conn.execute(stmt)
                return
            names = {name for (name,) in conn.execute(lock)}  # the one lock order, before the delete
            if names:
                conn.execute(stmt)
                self._notify(conn, names)

        self.write(work)

    def leases(self, campaign: str) -> dict[str, tuple[str, int]]:
        """The campaign's leases: key digest -> (holder, attempt)."""
        lk = leases_t.c
        with self.engine.connect() as conn:
            rows = conn.execute(select(lk.key_digest, lk.holder, lk.attempt).where(lk.campaign == campaign))
            return {d: (h, int(a)) for d, h, a in rows}

    def lease_states(self, campaign: str, digests: Collection[str], *,
                     retry_void: bool = False) -> LeaseStates:
        """Where run keys `digests` of `campaign` stand, read in one snapshot: the finished
        ones (as `finished_digests`) and the leases of the others, each with its holder and
        the seconds until it lapses (the store's clock: negative when it has). What a worker
        waiting on other workers' keys reads each time it wakes (`watch`)."""
        ds = sorted(set(digests))
        out = LeaseStates()
        lk = leases_t.c
        with self.engine.connect() as conn:
            now = self._clock(conn)
            for i in range(0, len(ds), 500):
                part = ds[i:i + 500]
                out.finished.update(d for (d,) in conn.execute(
                    select(runs_t.c.key_digest).distinct()
                    .where(runs_t.c.campaign == campaign, runs_t.c.key_digest.in_(part), _finished(retry_void))))
                for d, holder, beat, ttl in conn.execute(
                        select(lk.key_digest, lk.holder, lk.heartbeat_at, lk.ttl_s)
                        .where(lk.campaign == campaign, lk.key_digest.in_(part))):
                    if d not in out.finished:
                        out.leases[d] = (holder, float(beat) + float(ttl) - now)
        return out

    def watch(self, campaign: str) -> Watch:
        """A `Watch` that wakes a worker waiting on `campaign`'s keys when another worker
        stores runs or releases leases (`assay.store.watch`); close it when done. Make it
        before reading the state it waits on (`lease_states`). A store that cannot be reached
        is InputError (exit 2), as for a write."""
        try:
            if self._backend == "postgresql":
                return PostgresWatch(self.engine, NOTIFY_CHANNEL, campaign)
            if self._backend == "sqlite" and not self._memory:
                return SqliteWatch(self.engine)
        except exc.OperationalError as e:
            raise InputError(None, "--store", f"cannot reach the store {self.redacted_url}: {db_reason(e)}; "
                             "every finished run is kept: run the same command again to resume") from None
        return Watch()

    # --- reads ---------------------------------------------------------------------------

    def cache_get(self, key: str) -> str | None:
        with self.engine.connect() as conn:
            return conn.execute(
                select(judge_cache_t.c.value).where(judge_cache_t.c.key == key)
            ).scalar_one_or_none()

    def campaigns(self) -> list[str]:
        """Campaign names in creation order."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(campaigns_t.c.name).order_by(campaigns_t.c.created_at, campaigns_t.c.id)
            )
            return [r[0] for r in rows]

    def finished_digests(self, campaign: str, *, retry_void: bool = False) -> set[str]:
        """Key digests of the campaign that are finished: a ``done`` or ``broken`` run, or a
        key void too often and stored as failed (not with `retry_void`: those run again)."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(runs_t.c.key_digest)
                .where(runs_t.c.campaign == campaign, _finished(retry_void))
                .distinct()
            )
            return {r[0] for r in rows}

    def done_run(self, campaign: str, digest: str) -> RunRecord | None:
        """The finished (``done`` or ``broken``) attempt of one run key, if it has one (the latest when several)."""
        with self.engine.connect() as conn:
            row = conn.execute(
                select(runs_t.c.record)
                .where(runs_t.c.campaign == campaign, runs_t.c.key_digest == digest, _finished())
                .order_by(runs_t.c.attempt.desc(), runs_t.c.created_at.desc())
                .limit(1)
            ).first()
        return RunRecord.model_validate_json(row[0]) if row is not None else None

    def attempts(self, campaign: str) -> dict[str, int]:
        """Highest stored attempt number per key digest of the campaign."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(runs_t.c.key_digest, func.max(runs_t.c.attempt))
                .where(runs_t.c.campaign == campaign)
                .group_by(runs_t.c.key_digest)
            )
            return {d: int(a) for d, a in rows}

    def campaign_cost(self, campaign: str) -> float:
        """USD spent on the campaign's stored attempts, agents and judges (unknown prices count 0)."""
        total = 0.0
        for rec in self.all_attempts(campaign):
            total += (rec.usage.cost_usd or 0.0) + (rec.judge_usage.cost_usd or 0.0)
        return total

    def all_attempts(self, campaign: str | None = None) -> list[RunRecord]:
        """Every stored attempt, ordered by task_id, agent, level, epoch, then attempt."""
        stmt = select(runs_t.c.record)
        if campaign is not None:
            stmt = stmt.where(runs_t.c.campaign == campaign)
        with self.engine.connect() as conn:
            records = [RunRecord.model_validate_json(r[0]) for r in conn.execute(stmt)]
        records.sort(key=_sort_key)
        return records

    def runs(self, campaign: str | None = None) -> list[RunRecord]:
        """The latest attempt per key digest, ordered by task_id, agent, level, epoch (then
        campaign and key digest: `_report_order`).

        "Latest" is the highest attempt number (then the most recently saved), so a void
        attempt that was re-run is replaced by its re-run.
        """
        stmt = select(
            runs_t.c.key_digest, runs_t.c.attempt, runs_t.c.created_at, runs_t.c.run_id, runs_t.c.record
        )
        if campaign is not None:
            stmt = stmt.where(runs_t.c.campaign == campaign)
        latest: dict[str, tuple[tuple[int, float, str], str]] = {}
        with self.engine.connect() as conn:
            for digest, attempt, created, run_id, raw in conn.execute(stmt):
                rank = (attempt, created, run_id)
                cur = latest.get(digest)
                if cur is None or rank > cur[0]:
                    latest[digest] = (rank, raw)
        records = [(RunRecord.model_validate_json(raw), digest) for digest, (_rank, raw) in latest.items()]
        records.sort(key=lambda rd: (*_sort_key(rd[0])[:-1], rd[1]))  # `_report_order`
        return [r for r, _digest in records]

    # The columns a report reads of each run (`models.REPORT_COLUMNS`).
    REPORT_COLUMNS = REPORT_COLUMNS

    def _resolve(self, conn: Connection, run_id: str) -> str | None:
        exact = conn.execute(select(runs_t.c.run_id).where(runs_t.c.run_id == run_id)).first()
        if exact is not None:
            return run_id
        if len(run_id) < MIN_PREFIX:
            return None
        found = [
            r[0]
            for r in conn.execute(
                select(runs_t.c.run_id).where(runs_t.c.run_id.startswith(run_id, autoescape=True)).limit(11)
            )
        ]
        if len(found) > 1:
            shown = ", ".join(found[:10]) + (", ..." if len(found) > 10 else "")
            raise InputError(None, "RUN_ID", f"run id prefix {run_id!r} is ambiguous: {shown}")
        return found[0] if found else None

    def get_run(self, run_id: str) -> RunRecord | None:
        """A run by id, or by a unique prefix of at least 6 characters.

        ``None`` when nothing matches; ``ValueError`` when the prefix matches several runs.
        """
        with self.engine.connect() as conn:
            rid = self._resolve(conn, run_id)
            if rid is None:
                return None
            raw = conn.execute(select(runs_t.c.record).where(runs_t.c.run_id == rid)).scalar_one()
        return RunRecord.model_validate_json(raw)

    def events(self, run_id: str) -> list[Event]:
        """The run's events in ``seq`` order (a unique id prefix is accepted too)."""
        with self.engine.connect() as conn:
            rid = self._resolve(conn, run_id)
            if rid is None:
                return []
            rows = [(s, t, k, json.loads(d)) for s, t, k, d in conn.execute(
                select(events_t.c.seq, events_t.c.t, events_t.c.kind, events_t.c.data)
                .where(events_t.c.run_id == rid)
                .order_by(events_t.c.seq)
            )]
            final: str | None = None
            if any(FINAL_MESSAGE_REF in d for _s, _t, _k, d in rows):
                final = final_message_of(conn, rid)
        for _s, _t, _k, d in rows:
            if d.pop(FINAL_MESSAGE_REF, None) is not None:
                d["content"] = final
        return [event_from_wire(s, t, k, d) for s, t, k, d in rows]

    # --- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.redacted_url!r})"


def db_reason(e: BaseException) -> str:
    """The database's own one-line reason for an error (not SQLAlchemy's wrapper text)."""
    orig = getattr(e, "orig", None) or e
    text = str(orig).strip().splitlines()
    return text[0] if text else type(orig).__name__


def conflict_state(e: BaseException) -> str | None:
    """The SQLSTATE of a transaction the database rolled back to break a conflict (deadlock,
    serialization failure: `CONFLICT_STATES`), or None for any other error."""
    state = getattr(getattr(e, "orig", None), "sqlstate", None)
    return state if state in CONFLICT_STATES else None


def _pg_now() -> ColumnElement[Any]:
    """PostgreSQL's wall clock as epoch seconds (``clock_timestamp()``: now, not the
    transaction's start)."""
    return func.extract("epoch", func.clock_timestamp())


_REVISION_RE = re.compile(r"^revision(?:: *str)? *= *['\"]([^'\"]+)['\"]", re.M)
_DOWN_RE = re.compile(r"^down_revision(?:: *[^=]+)? *= *(?:['\"]([^'\"]+)['\"]|None)", re.M)


@functools.cache
def head_revision() -> str | None:
    """The newest migration's revision id, read from the files of ``migrations/versions`` by
    text (no alembic import): the one revision no other file names as its ``down_revision``.
    None when that is not exactly one (branches, an unreadable file): then alembic decides.
    tests/test_store.py checks it equals alembic's own head."""
    revisions: set[str] = set()
    downs: set[str] = set()
    for f in sorted((MIGRATIONS_DIR / "versions").glob("*.py")):
        text = f.read_text(encoding="utf-8")
        rev, down = _REVISION_RE.search(text), _DOWN_RE.search(text)
        if rev is None or down is None:
            return None
        revisions.add(rev.group(1))
        if down.group(1):
            downs.add(down.group(1))
    heads = revisions - downs
    return heads.pop() if len(heads) == 1 else None


def open_store(url: str | None = None, *, create: bool = True) -> Store:
    """Open (creating and migrating if needed) the store at ``url`` or the default one; a
    SQLite file's missing folder is made unless `create` is false."""
    return Store(url or store_url(), create=create)


def _enable_wal(cur: Any, attempts: int = 50) -> None:
    """Switch to WAL. Changing the journal mode needs a moment with no other connection in a
    transaction, and SQLite answers "locked" at once rather than waiting (busy_timeout does
    not apply), so several processes opening one new store at once retry here."""
    import time

    for i in range(attempts):
        try:
            (mode,) = cur.execute("PRAGMA journal_mode").fetchone()
            if str(mode).lower() == "wal":
                return
            cur.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or i == attempts - 1:
                raise
            time.sleep(0.02 * (i + 1))
