"""A store that cannot be opened or written: a clear message and exit 2, never a traceback,
nothing half-written, and the campaign resumable once the fault is gone.

The full and read-only disks are real: a small tmpfs mounted for the test (needs root)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import REPO, assay

SUITE = REPO / "suites" / "starter" / "rubric"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small filesystem needs root")


def _assay(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return assay(*args, cwd=cwd)


def _no_traceback(r: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in r.stderr + r.stdout, r.stderr[-3000:]


def test_a_corrupted_store_is_refused_by_every_command(tmp_path: Path) -> None:
    bad = tmp_path / "bad.db"
    bad.write_bytes(os.urandom(8192))
    url = f"sqlite:///{bad}"
    for args in (["run", str(SUITE), "--agent", "noop", "--store", url, "-q"],
                 ["run", str(SUITE), "--agent", "noop", "--store", url, "--dry-run"],
                 ["report", "--store", url], ["show", "abcdef12", "--store", url],
                 ["compare", "noop", "reference", "--store", url]):
        r = _assay(tmp_path, *args)
        assert r.returncode == 2, (args, r.returncode, r.stderr[-2000:])
        _no_traceback(r)
        assert "cannot open the store" in r.stderr and "not a database" in r.stderr, r.stderr


def test_an_unreachable_postgresql_is_exit_2_without_the_password(tmp_path: Path) -> None:
    url = "postgresql+psycopg://someone:s3cret-pw@127.0.0.1:1/assay"
    r = _assay(tmp_path, "report", "--store", url)
    assert r.returncode == 2 and "cannot open the store" in r.stderr, r.stderr[-2000:]
    _no_traceback(r)
    assert "s3cret-pw" not in r.stderr


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "disk"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0755", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(mnt: Path) -> Path:
    filler = mnt / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    return filler


def _rows(db: Path) -> list[tuple[str, str]]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute("SELECT key_digest, status FROM runs").fetchall()
    finally:
        con.close()


@needs_root
def test_a_full_disk_stops_cleanly_and_the_campaign_resumes(tmp_path: Path, small_disk: Path) -> None:
    db = small_disk / "assay.db"
    url = f"sqlite:///{db}"
    first = _assay(tmp_path, "run", str(SUITE), "--agent", "noop", "--store", url, "-q")
    assert first.returncode == 0, first.stderr[-2000:]
    done_before = _rows(db)
    filler = _fill(small_disk)
    full = _assay(tmp_path, "run", str(SUITE), "--agent", "noop", "--agent", "reference", "--store", url, "-q")
    assert full.returncode == 2, (full.returncode, full.stderr[-2000:])
    _no_traceback(full)
    assert "store" in full.stderr and ("full" in full.stderr or "disk" in full.stderr), full.stderr[-2000:]
    filler.unlink()
    after_fault = _rows(db)
    assert set(done_before) <= set(after_fault)  # nothing finished was lost
    again = _assay(tmp_path, "run", str(SUITE), "--agent", "noop", "--agent", "reference", "--store", url, "-q")
    assert again.returncode == 0, again.stderr[-2000:]
    rows = _rows(db)
    digests = [d for d, status in rows if status == "done"]
    assert len(digests) == len(set(digests)) == 2 * len(done_before)  # every key done once, none twice


@needs_root
def test_a_read_only_store_is_exit_2(tmp_path: Path, small_disk: Path) -> None:
    db = small_disk / "assay.db"
    url = f"sqlite:///{db}"
    assert _assay(tmp_path, "run", str(SUITE), "--agent", "noop", "--store", url, "-q").returncode == 0
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    r = _assay(tmp_path, "run", str(SUITE), "--agent", "reference", "--store", url, "-q")
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    _no_traceback(r)
    assert "store" in r.stderr and ("read" in r.stderr.lower()), r.stderr[-2000:]


def test_a_dropped_postgresql_connection_is_replaced(pg_url: str) -> None:
    """The server ends every connection of the store between two saves (a restart, an idle
    kill): the next save reconnects instead of failing the campaign."""
    from sqlalchemy import create_engine, text

    from assay.store import open_store
    from tests.test_store import make_events, make_record

    store = open_store(pg_url)
    try:
        first = make_record()
        store.save_run(first, make_events(2))
        name = pg_url.rsplit("/", 1)[1]
        admin = create_engine(pg_url.rsplit("/", 1)[0] + "/postgres", isolation_level="AUTOCOMMIT")
        with admin.connect() as c:
            killed = c.execute(text("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                    "WHERE datname = :d AND pid <> pg_backend_pid()"), {"d": name}).scalar_one()
        admin.dispose()
        assert killed >= 1  # the store's pooled connection was there, and is gone now
        second = make_record("t2")
        assert store.save_run(second, make_events(1))
        assert {r.run_id for r in store.runs()} == {first.run_id, second.run_id}
    finally:
        store.close()
