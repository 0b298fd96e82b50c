"""Leases in the store (SQLite file and a real PostgreSQL): claim, heartbeat, release, take-over,
and claim races between threads and processes with exactly one winner per key."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from pathlib import Path

from assay.campaign.scheduler import dead_local_holders, lease_holder
from assay.store import Store, open_store
from tests.test_store import make_events, make_record

SRC = Path(__file__).resolve().parents[1] / "src"


def test_claim_refuses_a_live_lease_and_a_finished_key(store: Store) -> None:
    assert store.claim("c", "k1", "A", 30) == 1
    assert store.claim("c", "k1", "B", 30) is None  # A's lease is live
    assert store.leases("c") == {"k1": ("A", 1)}
    void = make_record("t1", campaign="c", status="void", end_reason="api_error", score=None)
    store.save_run(void, make_events(2))
    digest = void.key.digest
    assert store.claim("c", digest, "A", 30) == 2  # one past the stored attempt
    store.save_run(make_record("t1", campaign="c", attempt=2), make_events(1))
    store.release("A", "c", [digest])
    assert store.claim("c", digest, "B", 30) is None  # a done run is stored: never run again
    assert digest not in store.leases("c")
    assert store.claim("c", "k1", "A", 30) == 2  # its own lease again: the next attempt number
    assert store.claim("other", "k1", "B", 30) == 1  # leases are per campaign


def test_an_expired_lease_is_taken_over_with_the_next_attempt(store: Store) -> None:
    void = make_record("t1", campaign="c", attempt=1, status="void", end_reason="api_error", score=None)
    store.save_run(void, [])
    d = void.key.digest
    assert store.claim("c", d, "A", 0.2) == 2
    assert store.claim("c", d, "B", 30) is None
    time.sleep(0.4)
    assert store.claim("c", d, "B", 30) == 3  # A never stored attempt 2; B does not reuse it
    assert store.leases("c") == {d: ("B", 3)}
    assert store.claim("c", d, "A", 30) is None


def test_heartbeat_keeps_leases_alive_and_release_frees_them(store: Store) -> None:
    for k in ("k1", "k2", "k3"):
        assert store.claim("c", k, "A", 0.6) == 1
    for _ in range(4):
        time.sleep(0.25)
        assert store.heartbeat("A") == 3  # one statement renews all of A's leases
    assert store.claim("c", "k1", "B", 30) is None
    store.release("A", "c", ["k1"])
    assert store.claim("c", "k1", "B", 30) == 1
    store.release("A")
    assert store.heartbeat("A") == 0
    assert store.claim("c", "k2", "B", 30) == 1 and store.claim("c", "k3", "B", 30) == 1


def test_dead_holders_are_taken_over_at_once(store: Store) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    host = lease_holder().rsplit(":", 2)[0]
    dead = f"{host}:{int(gone.stdout)}:feedface"
    alive = lease_holder()  # this process
    other_machine = f"elsewhere.example:{int(gone.stdout)}:feedface"
    assert dead_local_holders([dead, alive, other_machine, "garbage"]) == {dead}
    assert store.claim("c", "k", dead, 30) == 1
    assert store.claim("c", "k", "B", 30) is None
    assert store.claim("c", "k", "B", 30, dead_holders={dead}) == 2


def test_threads_racing_for_keys_have_one_winner_each(store_url: str) -> None:
    stores = [open_store(store_url) for _ in range(6)]
    wins: list[tuple[str, int]] = []
    lock = threading.Lock()
    go = threading.Barrier(len(stores))

    def racer(i: int) -> None:
        go.wait()
        for k in range(15):
            got = stores[i].claim("c", f"key{k}", f"holder{i}", 30)
            if got is not None:
                with lock:
                    wins.append((f"key{k}", got))

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in stores:
        s.close()
    assert sorted(k for k, _ in wins) == sorted(f"key{k}" for k in range(15))
    assert all(a == 1 for _, a in wins)


def test_processes_racing_for_keys_have_one_winner_each(store_url: str, tmp_path: Path) -> None:
    open_store(store_url).close()  # migrated before the race
    start = time.time() + 2.0
    code = textwrap.dedent(f"""
        import json, sys, time
        from assay.store import open_store
        s = open_store({store_url!r})
        while time.time() < {start}:
            time.sleep(0.005)
        won = [k for k in range(20) if s.claim("c", f"key{{k}}", sys.argv[1], 30) is not None]
        s.close()
        print(json.dumps(won))
    """)
    env = {"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}
    procs = [subprocess.Popen([sys.executable, "-c", code, f"p{i}"], stdout=subprocess.PIPE, text=True, env=env)
             for i in range(4)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    counts = Counter(k for out in outs for k in json.loads(out))
    assert sorted(counts) == list(range(20)) and set(counts.values()) == {1}


def test_a_second_finished_run_of_a_key_is_not_stored(store: Store) -> None:
    """A worker that lost its lease and finished anyway adds no second finished attempt."""
    first = make_record("t1", campaign="c", attempt=1)
    late = make_record("t1", campaign="c", attempt=2)
    void = make_record("t1", campaign="c", attempt=3, status="void", end_reason="api_error", score=None)
    assert store.save_run(first, make_events(2)) is True
    assert store.save_run(late, make_events(2)) is False
    assert store.save_run(void, []) is True  # void attempts are kept, they change nothing
    assert [r.run_id for r in store.all_attempts("c") if r.status == "done"] == [first.run_id]
    assert store.get_run(late.run_id) is None and store.events(late.run_id) == []


def test_a_store_of_the_previous_schema_is_migrated_with_its_runs(store_url: str) -> None:
    """A store at revision 0001 (before leases) with a run in it: opening it adds the leases
    table and keeps the run, which counts as finished."""
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import create_engine, inspect, text

    from assay.store.opening import MIGRATIONS_DIR, head_revision

    if store_url.startswith("sqlite:///"):
        Path(store_url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    eng = create_engine(store_url)
    with eng.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0001")
        conn.execute(text("insert into campaigns (name, created_at) values ('c', 0)"))
        conn.execute(text(
            "insert into runs (run_id, campaign, key_digest, task_id, task_hash, agent, epoch, options_hash, "
            "attempt, status, end_reason, harness_version, sandbox, created_at, record) values "
            "('r1', 'c', 'k1', 't1', 'h', 'a', 0, 'o', 1, 'done', 'finished', 'v', 'none', 0, '{}')"))
    with eng.connect() as conn:
        assert "leases" not in inspect(conn).get_table_names()
    eng.dispose()
    with open_store(store_url) as s:
        assert s.finished_digests("c") == {"k1"}
        assert s.claim("c", "k1", "A", 30) is None
        assert s.claim("c", "k2", "A", 30) == 1
        with s.engine.connect() as conn:
            assert conn.execute(text("select version_num from alembic_version")).scalar_one() == head_revision()
