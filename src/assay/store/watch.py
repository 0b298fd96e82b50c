"""Waking a worker that waits on run keys other workers hold (`Store.watch`).

A campaign's worker whose own runs are done waits on the keys another worker leased: until
that worker stores them (then they are done), releases them (Ctrl-C, its end) or stops
heart-beating (its lease lapses: then they are taken over). A watch wakes it for the first
two; it computes the third itself (`Store.lease_states` gives each lease's time to expiry on
the store's clock) and waits no longer than that.

- PostgreSQL: ``LISTEN`` on `NOTIFY_CHANNEL` on a connection of its own; every transaction
  that stores runs or releases leases notifies it with its campaign, delivered at its commit.
- A SQLite file: ``PRAGMA data_version`` on a connection of its own changes when any other
  connection commits, read every `SQLITE_POLL_S` (one pragma, no table read).
- A SQLite store in memory (one process: its other workers are threads of it): a wait is at
  most `SQLITE_POLL_S`, then the state is read again.

Listening starts when the watch is made, before the waiting worker reads the state, so a
commit between that read and the wait still wakes it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

from sqlalchemy import Connection, Engine, exc

log = logging.getLogger(__name__)

SQLITE_POLL_S = 0.1
"""How often a SQLite watch looks at the database's commit counter (`PRAGMA data_version`)."""


class Watch:
    """Wakes a waiting worker when the store may hold news of the keys it waits on. `wait`
    and `close` may be called from different threads (the waiter runs in a worker thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closed = False

    def wait(self, timeout_s: float) -> bool:
        """Block at most `timeout_s`; True when a change may have happened (read the state
        again), False when the time ran out without one."""
        with self._lock:
            if self._closed:
                return True
            return self._wait(max(0.0, timeout_s))

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._close()

    def _wait(self, timeout_s: float) -> bool:
        time.sleep(min(timeout_s, SQLITE_POLL_S))
        return True

    def _close(self) -> None:
        return None

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class PostgresWatch(Watch):
    """LISTEN on `channel` for notifications whose payload is `campaign`."""

    def __init__(self, engine: Engine, channel: str, campaign: str) -> None:
        super().__init__()
        self._engine, self._channel, self._campaign = engine, channel, campaign
        self._conn: Connection | None = None
        self._listen()

    def _listen(self) -> None:
        conn = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        try:
            conn.exec_driver_sql(f"LISTEN {self._channel}")
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    def _driver(self) -> Any:
        """psycopg's own connection under SQLAlchemy's (`notifies` is psycopg's API)."""
        if self._conn is None:
            self._listen()
        assert self._conn is not None
        return self._conn.connection.driver_connection

    def _wait(self, timeout_s: float) -> bool:
        import psycopg

        deadline = time.monotonic() + timeout_s
        try:
            driver = self._driver()
            while (left := deadline - time.monotonic()) > 0:
                # Each generator closed at once: a suspended one holds the connection's lock.
                with contextlib.closing(driver.notifies(timeout=left, stop_after=1)) as notes:
                    ours = any(note.payload == self._campaign for note in notes)
                if ours:
                    with contextlib.closing(driver.notifies(timeout=0)) as queued:  # one wake for all queued
                        for _ in queued:
                            pass
                    return True
            return False
        except (psycopg.OperationalError, exc.OperationalError) as e:
            # The listening connection is gone (a server restart): a fresh one next time; the
            # waiter reads the state now, so nothing said meanwhile is missed.
            log.warning("the store's notification connection was lost (%s); listening again", e)
            self._drop()
            return True

    def _drop(self) -> None:
        """Close the listening connection for good (the pool gets a fresh one in its place)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.invalidate()
            conn.close()

    def _close(self) -> None:
        self._drop()  # not back to the pool: a connection still listening would queue notifications unread


class SqliteWatch(Watch):
    """Polls ``PRAGMA data_version`` of a connection of its own, which changes when another
    connection commits to the file."""

    def __init__(self, engine: Engine) -> None:
        super().__init__()
        self._conn = engine.connect()
        self._version = self._read()

    def _read(self) -> int:
        version = int(self._conn.exec_driver_sql("PRAGMA data_version").scalar_one())
        self._conn.rollback()  # no read transaction stays open (it would hold back WAL checkpoints)
        return version

    def _wait(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while True:
            version = self._read()
            if version != self._version:
                self._version = version
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, SQLITE_POLL_S))

    def _close(self) -> None:
        self._conn.close()
