"""A store that cannot be opened or written: a clear message and exit 2, never a traceback,
nothing half-written, and the campaign resumable once the fault is gone.

The full and read-only disks are real: a small tmpfs mounted for the test (needs root)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
    with open(filler, "wb", buffering=0) as f:  # unbuffered: nothing left to flush (and fail) at close
        try:
            while True:
                f.write(b"\0" * 65536)
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


def _terminate_on_insert(store: Any, pg_url: str, times: int | None) -> list[int]:
    """The server ends the store's own connection as it is about to insert a run (a restart
    or an admin kill mid-transaction), `times` times (None: every time); the pids killed."""
    from sqlalchemy import create_engine, event, text

    admin = create_engine(pg_url.rsplit("/", 1)[0] + "/postgres", isolation_level="AUTOCOMMIT")
    killed: list[int] = []

    @event.listens_for(store.engine, "before_cursor_execute")
    def _kill(conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if not statement.startswith("INSERT INTO runs") or (times is not None and len(killed) >= times):
            return
        pid = conn.connection.dbapi_connection.info.backend_pid
        with admin.connect() as c:
            assert c.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar_one()
        killed.append(pid)

    return killed


def test_a_connection_lost_mid_write_is_retried_once_on_a_fresh_one(pg_url: str) -> None:
    from assay.store import open_store
    from tests.test_store import make_events, make_record

    store = open_store(pg_url)
    try:
        first = make_record()
        store.save_run(first, make_events(2))
        killed = _terminate_on_insert(store, pg_url, times=1)
        second = make_record("t2")
        assert store.save_run(second, make_events(3))  # the first try lost its connection, the retry stored it
        assert len(killed) == 1
        assert {r.run_id for r in store.all_attempts()} == {first.run_id, second.run_id}  # stored once
        assert len(store.events(second.run_id)) == 3
    finally:
        store.close()


@pytest.mark.parametrize("status", ["done", "void"])
def test_a_commit_whose_answer_is_lost_is_not_stored_twice(pg_url: str, status: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The server commits a save and the connection is lost before the answer arrives: the
    retry finds the run already stored and neither stores it again (a duplicate run id) nor
    calls it another worker's (a finished key)."""
    from sqlalchemy import create_engine, text

    from assay.store import open_store
    from tests.test_store import make_events, make_record

    store = open_store(pg_url)
    admin = create_engine(pg_url.rsplit("/", 1)[0] + "/postgres", isolation_level="AUTOCOMMIT")
    lost: list[int] = []
    try:
        store.save_run(make_record(), make_events(1))

        real_commit = store.engine.dialect.do_commit

        def commit_then_lose(raw: Any) -> None:
            real_commit(raw)  # the server has it ...
            if lost:
                return
            driver = raw.dbapi_connection  # psycopg's connection under the pool's proxy
            pid = driver.info.backend_pid
            with admin.connect() as c:  # ... and the connection goes before the answer is read
                assert c.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar_one()
            lost.append(pid)
            driver.execute("SELECT 1")  # the driver's own error for the lost connection

        monkeypatch.setattr(store.engine.dialect, "do_commit", commit_then_lose)
        rec = make_record("t2", status=status, end_reason="finished" if status == "done" else "api_error",
                          score=0.5 if status == "done" else None)
        assert store.save_run(rec, make_events(3)) is True
        assert lost
        assert [r.run_id for r in store.all_attempts() if r.key.task_id == "t2"] == [rec.run_id]
        assert len(store.events(rec.run_id)) == 3
    finally:
        store.close()
        admin.dispose()


def test_a_connection_lost_again_on_the_retry_stops_with_the_reason(pg_url: str) -> None:
    from assay.errors import InputError
    from assay.store import open_store
    from tests.test_store import make_events, make_record

    store = open_store(pg_url)
    try:
        first = make_record()
        store.save_run(first, make_events(2))
        killed = _terminate_on_insert(store, pg_url, times=None)
        with pytest.raises(InputError) as err:
            store.save_run(make_record("t2"), make_events(1))
        assert len(killed) == 2  # tried, then once more on a fresh connection
        assert "cannot write to the store" in err.value.message and "resume" in err.value.message
        assert "terminat" in err.value.message  # the server's own reason
    finally:
        store.close()
    again = open_store(pg_url)
    try:
        assert [r.run_id for r in again.all_attempts()] == [first.run_id]  # kept; nothing half-written
    finally:
        again.close()


_REFUSE_HEARTBEATS = {
    # A heartbeat changes heartbeat_at alone; a claim or a takeover sets claimed_at too.
    "sqlite": ["CREATE TRIGGER refuse_heartbeats BEFORE UPDATE OF heartbeat_at ON leases "
               "WHEN NEW.claimed_at = OLD.claimed_at BEGIN SELECT RAISE(ABORT, 'heartbeats refused'); END"],
    "postgresql": ["CREATE FUNCTION refuse_heartbeats() RETURNS trigger LANGUAGE plpgsql AS "
                   "$$ BEGIN RAISE EXCEPTION 'heartbeats refused'; END $$",
                   "CREATE TRIGGER refuse_heartbeats BEFORE UPDATE ON leases FOR EACH ROW "
                   "WHEN (NEW.claimed_at = OLD.claimed_at) EXECUTE FUNCTION refuse_heartbeats()"],
}


async def test_failing_heartbeats_stop_the_worker_cleanly_and_the_campaign_resumes(
        store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store refuses every heartbeat (a trigger raises in the database): after 3 in a row
    the worker starts no new run, the runs going finish, and the campaign ends with the reason
    (InputError: exit 2); once the fault is gone the same campaign finishes every key once."""
    import asyncio
    import io

    from rich.console import Console
    from sqlalchemy import text

    from assay.agent.base import AgentEnv, AgentOutcome
    from assay.campaign.options import RunOptions
    from assay.campaign.plan import build_plan
    from assay.campaign.runner import RunContext
    from assay.campaign.scheduler import run_campaign
    from assay.errors import InputError
    from assay.store import open_store
    from assay.task.discover import discover
    from tests.fakes.agents import FakeFactory
    from tests.helpers import answer_task

    monkeypatch.setenv("ASSAY_LEASE_TTL_S", "0.3")  # a heartbeat every 0.1 s
    monkeypatch.chdir(tmp_path)
    for i in range(10):
        answer_task(tmp_path / "suite" / f"t{i}")
    tasks = discover([tmp_path / "suite"])

    async def slow(env: AgentEnv) -> AgentOutcome:
        await asyncio.sleep(0.5)  # 10 runs two at a time: 2.5 s, the worker stops after ~0.3 s
        return AgentOutcome(end_reason="finished", final_message="")

    store = open_store(store_url)
    try:
        ctx = RunContext(store=store, options=RunOptions(unsafe_no_sandbox=True, concurrency=2))
        plan = build_plan(tasks, [FakeFactory("slow", slow)], ctx.options)
        with store.engine.begin() as c:
            for ddl in _REFUSE_HEARTBEATS[store.engine.dialect.name]:
                c.execute(text(ddl))
        with pytest.raises(InputError) as err:
            await run_campaign(plan, ctx, console=Console(file=io.StringIO()), show_progress=False)
        msg = err.value.message
        assert "heartbeats 3 times in a row" in msg and "heartbeats refused" in msg, msg
        assert "run the same command again" in msg
        stopped = store.runs(ctx.options.campaign)
        assert 0 < len(stopped) < 10 and {r.status for r in stopped} == {"done"}
        assert store.leases(ctx.options.campaign) == {}  # released: nothing waits for a TTL
        with store.engine.begin() as c:
            c.execute(text("DROP TRIGGER refuse_heartbeats" + (" ON leases" if "postgresql" in store_url else "")))
        result = await run_campaign(plan, ctx, console=Console(file=io.StringIO()), show_progress=False)
        assert (result.ran, result.already_done) == (10 - len(stopped), len(stopped))
        digests = [r.key.digest for r in store.all_attempts(ctx.options.campaign)]
        assert len(digests) == len(set(digests)) == 10  # every key run once, none twice
    finally:
        store.close()
