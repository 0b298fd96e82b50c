"""A real PostgreSQL server for tests: `pg_server` (one per session) and `pg_url` (a fresh
database per test), plus `store_url`, SQLite and PostgreSQL as parameters.

tests/conftest.py makes them available to every test module.
Without PostgreSQL's binaries (/usr/lib/postgresql/*/bin/initdb) the PostgreSQL cases skip.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from assay.store import Store, open_store

INITDB = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@pytest.fixture(scope="session")
def pg_server() -> Iterator[dict[str, Any]]:
    """A private PostgreSQL server in a temp dir, killed by pid at the end of the session."""
    if not INITDB:
        pytest.skip("PostgreSQL binaries not installed (/usr/lib/postgresql/*/bin/initdb)")
    with postgres_server() as server:
        yield server


@contextmanager
def postgres_server() -> Iterator[dict[str, Any]]:
    """Start a private PostgreSQL server in a temp dir (127.0.0.1, a free port); stopped by
    pid on exit. Also used by bench/bench_scale.py."""
    bindir = Path(INITDB[-1]).parent
    tmp = Path(tempfile.mkdtemp(prefix="assay-pg-"))
    data = tmp / "data"
    if os.geteuid() == 0:
        shutil.chown(tmp, "postgres", "postgres")
    port = _free_port()
    subprocess.run(
        _as_postgres(
            [
                str(bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
            ]
        ),
        check=True,
        capture_output=True,
    )
    subprocess.run(
        _as_postgres(
            [
                str(bindir / "pg_ctl"),
                "-D",
                str(data),
                "-l",
                str(tmp / "log"),
                "-w",
                "-o",
                f"-c listen_addresses=127.0.0.1 -p {port} -k {tmp} -c fsync=off",
                "start",
            ]
        ),
        check=True,
        capture_output=True,
    )
    pid = int((data / "postmaster.pid").read_text().split()[0])
    try:
        yield {"host": "127.0.0.1", "port": port, "socket_dir": str(tmp)}  # also a Unix socket there
    finally:
        try:
            os.kill(pid, signal.SIGINT)  # "fast" shutdown
            for _ in range(100):
                os.kill(pid, 0)
                time.sleep(0.05)
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server: dict[str, Any], request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh database on the session's server, for a test of the slow tier only: one asked
    for by name (getfixturevalue) escapes tests/conftest.py's marking, so it is refused here."""
    if request.node.get_closest_marker("slow") is None:
        pytest.fail(f"{request.node.nodeid} uses PostgreSQL but is not marked slow: give its parameter "
                    "pytest.param(..., marks=pytest.mark.slow) (tests/conftest.py says what is slow)")
    name = "t_" + uuid.uuid4().hex[:12]
    admin = create_engine(
        f"postgresql+psycopg://postgres@{pg_server['host']}:{pg_server['port']}/postgres",
        isolation_level="AUTOCOMMIT",
    )
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield f"postgresql+psycopg://postgres@{pg_server['host']}:{pg_server['port']}/{name}"
    finally:
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.slow)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URL on each backend: a SQLite file under tmp_path, then a PostgreSQL database
    (the slow tier: tests/conftest.py)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/.assay/assay.db"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """An open store on each backend (`store_url`), closed after the test."""
    s = open_store(store_url)
    try:
        yield s
    finally:
        s.close()
