"""Opening a store: its engine and SQLite's connection settings, its folder, its schema migrated.

One store wraps one SQLAlchemy engine (SQLite by default, PostgreSQL through
``postgresql+psycopg://``). Opening it migrates its schema to the latest Alembic revision
(`migrate`); a store already at the newest revision (`head_revision`, read from the migration
files by text) is left alone without importing alembic. A SQLite file gets WAL,
``synchronous=NORMAL``, foreign keys and a busy timeout, and its writers take the write lock
up front (``BEGIN IMMEDIATE``).
"""

from __future__ import annotations

import functools
import re
import sqlite3
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, create_engine, event, exc
from sqlalchemy.engine import make_url
from sqlalchemy.pool import StaticPool

from assay.errors import InputError
from assay.store.transactions import StoreBase, db_reason

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = ["BUSY_TIMEOUT_MS", "DEFAULT_FOLDER", "MIGRATIONS_DIR", "Opening", "head_revision"]

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
BUSY_TIMEOUT_MS = 30_000
_PG_MIGRATION_LOCK = 0x61737361  # "assa": serialises concurrent migrations on PostgreSQL


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


class Opening(StoreBase):
    """A store's opening: its engine, connection settings and schema (a part of `Store`)."""

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
    def dir(self) -> Path:
        """Folder for files next to the database; run folders live under ``dir / "runs"``.

        For a SQLite file: the folder holding it; otherwise ``./.assay`` under the cwd.
        """
        if self._db_path is not None:
            return self._db_path.parent
        return Path.cwd().resolve() / ".assay"


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
