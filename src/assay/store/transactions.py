"""Writing to a store: one transaction, all or nothing, retried where nothing was committed.

`StoreBase` is what every part of a `Store` shares: its engine and backend, the write
transaction (`transaction`: a store that stops taking writes is InputError, exit 2, finished
runs kept), its retry (`write`: once after a lost connection, up to CONFLICT_RETRIES times
after a deadlock or serialization failure the database rolled back), the backend's insert
with ON CONFLICT, and the notification a commit sends to workers waiting on its campaigns.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, exc, func, select

from assay.errors import InputError

__all__ = ["CONFLICT_RETRIES", "CONFLICT_STATES", "NOTIFY_CHANNEL", "StoreBase", "conflict_state", "db_reason",
           "dialect_insert"]

log = logging.getLogger(__name__)
T = TypeVar("T")

NOTIFY_CHANNEL = "assay_leases"
"""PostgreSQL channel a transaction that stores runs or releases leases notifies (the
payload: the campaign), at its commit: it wakes the workers waiting on those keys (`Store.watch`)."""
CONFLICT_STATES = frozenset({"40P01", "40001"})
"""SQLSTATEs of a transaction the database rolled back to break a conflict: deadlock detected,
serialization failure. Nothing of it was committed; `Store.write` runs it again."""
CONFLICT_RETRIES = 8
"""How many times `Store.write` runs a transaction again after a conflict (backoff: 10 ms
doubling, at most 0.5 s, with jitter), before it stops with the reason."""


@functools.cache
def dialect_insert(backend: str) -> Any:
    """The backend's `insert` with ON CONFLICT (None: a backend without), its dialect module
    imported on first use: importing PostgreSQL's costs a SQLite store's commands ~40 ms."""
    if backend == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert
    if backend == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert
    return None


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


class StoreBase:
    """The state and the write transactions every part of a `Store` shares (set up by
    `assay.store.opening.Opening`)."""

    url: str
    engine: Engine
    _backend: str
    _db_path: Path | None
    _memory: bool
    _write_lock: threading.Lock
    _known_campaigns: set[str]
    _closed: bool

    @property
    def redacted_url(self) -> str:
        """The store's URL without its password (for messages)."""
        return self.engine.url.render_as_string(hide_password=True)

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
        ins = dialect_insert(self._backend)
        return None if ins is None else ins(table)

    def _notify(self, conn: Connection, campaigns: Iterable[str]) -> None:
        """Wake the workers waiting on these campaigns' keys when this transaction commits
        (PostgreSQL's NOTIFY on `NOTIFY_CHANNEL`; `Store.watch`). SQLite's waiters see the
        commit itself (`PRAGMA data_version`)."""
        if self._backend == "postgresql":
            for name in sorted(set(campaigns)):
                conn.execute(select(func.pg_notify(NOTIFY_CHANNEL, name)))
