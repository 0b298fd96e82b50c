"""Tests of assay.store on SQLite and (when its binaries exist) a throwaway PostgreSQL server."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from assay.config import store_url as default_store_url
from assay.errors import InputError
from assay.record import Event, Grade, RunKey, RunRecord, event_from_wire
from assay.store import Store, open_store
from assay.store.models import metadata
from assay.store.opening import head_revision

SRC = Path(__file__).resolve().parents[1] / "src"


# --- helpers -----------------------------------------------------------------------------


def make_record(
    task: str = "t1",
    *,
    campaign: str = "camp",
    agent: str = "agent-a",
    level: str | None = None,
    epoch: int = 0,
    attempt: int = 1,
    status: str = "done",
    end_reason: str = "finished",
    run_id: str | None = None,
    score: float | None = 0.75,
) -> RunRecord:
    return RunRecord(
        run_id=run_id or uuid.uuid4().hex,
        key=RunKey(
            campaign=campaign,
            task_id=task,
            task_hash="sha-" + task,
            agent=agent,
            level=level,
            epoch=epoch,
            options_hash="opt",
        ),
        attempt=attempt,
        kinds=["deliverable"],
        harness_version="assay-harness/test",
        model="m-1",
        prices={"input": 1.0, "output": 2.0},
        status=status,
        end_reason=end_reason,
        void_reason="boom" if status == "void" else None,
        score=score,
        passed=None if score is None else score >= 0.7,
        value={"USD": 120.0},
        grade={"criteria": [{"id": "c1", "awarded": 3}], "audit": {"flags": [], "removed": 0}},
        final_message="done — ünïcode ✓",
        turns=3,
        options={"temperature": 0},
        task_meta={"sector": "law"},
    )


def make_events(n: int = 5) -> list[Event]:
    kinds = ["system", "user", "assistant", "tool_call", "tool_result"]
    return [
        event_from_wire(seq=i,
            t=i * 0.25,
            kind=kinds[i % len(kinds)],
            data={"i": i, "text": f"msg {i} ✓", "nested": [1, {"a": None}]},
        )
        for i in range(n)
    ]


# --- backends (tests/pg.py starts the PostgreSQL server) ---------------------------------


# --- API ---------------------------------------------------------------------------------


def test_round_trip(store: Store) -> None:
    rec = make_record(level="L2")
    evs = make_events(7)
    store.save_run(rec, evs)
    got = store.get_run(rec.run_id)
    assert got == rec
    assert store.events(rec.run_id) == evs
    assert store.runs() == [rec]
    assert store.runs("camp") == [rec]
    assert store.runs("other") == []
    assert store.all_attempts("camp") == [rec]
    assert store.campaigns() == ["camp"]
    assert store.get_run("nope-" + rec.run_id) is None
    assert store.events("nope-" + rec.run_id) == []


def test_run_without_events_and_empty_grade(store: Store) -> None:
    rec = make_record().model_copy(update={"grade": Grade()})
    store.save_run(rec, [])
    assert store.get_run(rec.run_id) == rec
    assert store.events(rec.run_id) == []


def test_latest_attempt_semantics(store: Store) -> None:
    void = make_record("t1", attempt=1, status="void", end_reason="api_error", score=None)
    store.save_run(void, make_events(2))
    assert store.finished_digests("camp") == set()
    assert store.attempts("camp") == {void.key.digest: 1}

    redo = make_record("t1", attempt=2)
    store.save_run(redo, make_events(3))
    other = make_record("t0", attempt=1)
    store.save_run(other, make_events(1))

    assert [r.run_id for r in store.runs("camp")] == [other.run_id, redo.run_id]  # ordered by task_id
    assert store.finished_digests("camp") == {redo.key.digest, other.key.digest}
    assert store.attempts("camp") == {redo.key.digest: 2, other.key.digest: 1}
    assert [(r.key.task_id, r.attempt) for r in store.all_attempts("camp")] == [
        ("t0", 1),
        ("t1", 1),
        ("t1", 2),
    ]
    # the void attempt is still there with its own events
    assert len(store.events(void.run_id)) == 2


def test_runs_ordering_and_campaign_filter(store: Store) -> None:
    recs = [
        make_record("b", agent="x", level="L1", epoch=1),
        make_record("a", agent="y", level=None, epoch=0),
        make_record("a", agent="x", level="L2", epoch=0),
        make_record("a", agent="x", level="L1", epoch=1),
        make_record("a", agent="x", level="L1", epoch=0),
        make_record("a", agent="x", level=None, epoch=0),
        make_record("a", campaign="c2"),
    ]
    for r in recs:
        store.save_run(r, make_events(1))
    got = [(r.key.task_id, r.key.agent, r.key.level, r.key.epoch) for r in store.runs("camp")]
    assert got == [
        ("a", "x", None, 0),
        ("a", "x", "L1", 0),
        ("a", "x", "L1", 1),
        ("a", "x", "L2", 0),
        ("a", "y", None, 0),
        ("b", "x", "L1", 1),
    ]
    assert len(store.runs()) == 7
    assert store.campaigns() == ["camp", "c2"]
    assert [r.key.campaign for r in store.runs("c2")] == ["c2"]
    assert store.finished_digests("c2") == {recs[-1].key.digest}


def test_atomic_on_unserialisable_event(store: Store) -> None:
    rec = make_record()
    bad = make_events(3) + [event_from_wire(seq=3, t=1.0, kind="harness", data={"obj": object()})]
    with pytest.raises(TypeError):
        store.save_run(rec, bad)
    assert store.get_run(rec.run_id) is None
    assert store.events(rec.run_id) == []
    assert store.runs() == []
    assert store.campaigns() == []


def test_atomic_on_failure_inside_transaction(store: Store) -> None:
    """The run row is inserted, then the events fail (duplicate seq): nothing must remain."""
    rec = make_record()
    dup = make_events(3) + [event_from_wire(seq=1, t=9.0, kind="error", data={})]
    with pytest.raises(Exception, match="(?i)unique|duplicate"):
        store.save_run(rec, dup)
    assert store.get_run(rec.run_id) is None
    assert store.events(rec.run_id) == []
    assert store.finished_digests("camp") == set()
    assert store.campaigns() == []
    # the store stays usable, including for the same campaign
    ok = make_record()
    store.save_run(ok, make_events(2))
    assert store.runs() == [ok]
    assert store.campaigns() == ["camp"]


def test_atomic_when_a_later_insert_fails(store: Store) -> None:
    """The run row is inserted, then its events fail in the database (two events with one
    seq: the primary key refuses them): nothing of the run is kept."""
    from sqlalchemy.exc import IntegrityError

    rec = make_record()
    events = make_events(3)
    with pytest.raises(IntegrityError):
        store.save_run(rec, [*events, events[0]])
    assert store.get_run(rec.run_id) is None
    assert store.events(rec.run_id) == []
    assert store.save_run(rec, events)  # the same run stores once the fault is gone


def test_duplicate_run_id_rejected(store: Store) -> None:
    rec = make_record()
    store.save_run(rec, make_events(2))
    with pytest.raises(Exception, match="(?i)unique|duplicate"):  # same id, another key
        store.save_run(make_record("t2", run_id=rec.run_id), make_events(3))
    assert len(store.events(rec.run_id)) == 2
    assert store.save_run(rec, make_events(3)) is False  # the same finished key again: not stored
    assert len(store.events(rec.run_id)) == 2


def test_prefix_lookup(store: Store) -> None:
    a = make_record(run_id="abcdef123456")
    b = make_record("t2", run_id="abcdef999999")
    c = make_record("t3", run_id="a_c%ef000000")
    for r in (a, b, c):
        store.save_run(r, make_events(2))
    assert store.get_run("abcdef1") == a
    assert store.get_run("abcdef9") == b
    assert store.get_run("abcdef123456") == a
    assert store.get_run("abcde") is None  # too short for a prefix
    assert store.get_run("zzzzzzz") is None
    with pytest.raises(InputError, match="ambiguous"):
        store.get_run("abcdef")
    assert store.get_run("a_c%ef") == c  # LIKE wildcards are escaped
    assert store.get_run("aXcYef") is None
    assert len(store.events("abcdef12")) == 2


def test_cache(store: Store) -> None:
    k = "0" * 64
    assert store.cache_get(k) is None
    store.cache_put(k, '{"verdict": "yes"}')
    assert store.cache_get(k) == '{"verdict": "yes"}'
    store.cache_put(k, "second")
    assert store.cache_get(k) == "second"
    store.cache_put("f" * 64, "x" * 100_000)
    assert store.cache_get("f" * 64) == "x" * 100_000


def test_migrations_idempotent(store_url: str) -> None:
    s1 = open_store(store_url)
    rec = make_record()
    s1.save_run(rec, make_events(2))
    s1.close()
    s2 = open_store(store_url)
    s2.migrate()  # explicit second upgrade is a no-op too
    assert s2.get_run(rec.run_id) == rec
    with s2.engine.connect() as c:
        assert c.execute(text("select version_num from alembic_version")).scalars().all() == [head_revision()]
        names = set(inspect(c).get_table_names())
    assert {"campaigns", "runs", "events", "grades", "judge_cache", "leases", "users", "expert_labels", "play_sessions", "web_signins",
            "current_runs", "alembic_version"} <= names and "run_summaries" not in names
    s2.close()


def test_concurrent_first_open(store_url: str) -> None:
    """Several stores opening a fresh database at once: one migrates, the others wait."""
    from concurrent.futures import ThreadPoolExecutor

    def opener(_: int) -> list[str]:
        with open_store(store_url) as s:
            return s.campaigns()

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(opener, range(4))) == [[]] * 4


def test_head_revision_read_from_the_files_is_alembics_head() -> None:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from assay.store.opening import MIGRATIONS_DIR, head_revision

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    assert head_revision() == ScriptDirectory.from_config(cfg).get_current_head()


def test_opening_a_current_store_does_not_import_alembic(store_url: str) -> None:
    """A store at the head revision opens without alembic; an older one is still upgraded."""
    import assay

    open_store(store_url).close()  # created and migrated here
    src = str(Path(assay.__file__).resolve().parents[1])
    probe = textwrap.dedent("""
        import sys
        from assay.store import open_store
        with open_store(sys.argv[1]) as s:
            s.campaigns()
        print(sorted(m for m in sys.modules if m == "alembic" or m.startswith("alembic.")))
    """)
    env = {**os.environ, "PYTHONPATH": src}
    out = subprocess.run([sys.executable, "-c", probe, store_url], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    with open_store(store_url) as s, s.engine.begin() as c:  # an older schema: alembic upgrades it
        c.execute(text("update alembic_version set version_num = '0003'"))
        c.execute(text("drop table web_signins"))
        c.execute(text("drop table play_sessions"))
        c.execute(text("drop table current_runs"))
    out = subprocess.run([sys.executable, "-c", probe, store_url], env=env, capture_output=True, text=True, check=True)
    assert "alembic" in out.stdout
    with open_store(store_url) as s, s.engine.connect() as c:
        assert c.execute(text("select version_num from alembic_version")).scalars().all() == [head_revision()]
        assert "play_sessions" in set(inspect(c).get_table_names())


def test_migration_matches_models(store: Store) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    with store.engine.connect() as c:
        diff = compare_metadata(MigrationContext.configure(c), metadata)
    assert diff == []


# --- SQLite specifics --------------------------------------------------------------------


def test_sqlite_pragmas_and_dir(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/deep/er/assay.db"
    with open_store(url) as s:
        assert s.url == url
        assert s.dir == tmp_path / "deep" / "er"
        assert (tmp_path / "deep" / "er" / "assay.db").exists()
        with s.engine.connect() as c:
            assert c.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert c.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
            assert c.exec_driver_sql("PRAGMA busy_timeout").scalar() > 0
            assert c.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1


def test_default_store_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ASSAY_STORE", raising=False)
    assert default_store_url(cwd=tmp_path) == f"sqlite:///{tmp_path.resolve()}/.assay/assay.db"
    monkeypatch.chdir(tmp_path)
    assert default_store_url() == f"sqlite:///{tmp_path.resolve()}/.assay/assay.db"
    with open_store() as s:
        assert s.dir == tmp_path.resolve() / ".assay"
    monkeypatch.setenv("ASSAY_STORE", "postgresql+psycopg://u@h/db")
    assert default_store_url(cwd=tmp_path) == "postgresql+psycopg://u@h/db"
    monkeypatch.setenv("ASSAY_STORE", str(tmp_path / "x.db"))
    assert default_store_url() == f"sqlite:///{tmp_path.resolve()}/x.db"


def test_postgres_dir_is_cwd_assay(pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with open_store(pg_url) as s:
        assert s.dir == tmp_path.resolve() / ".assay"


def test_threads_share_a_store(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with open_store(f"sqlite:///{tmp_path}/a.db") as s:
        recs = [make_record(f"t{i}") for i in range(200)]
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda r: s.save_run(r, make_events(3)), recs))
        assert len(s.runs()) == 200


def test_save_runs_writes_many_runs_in_one_transaction(store: Store) -> None:
    """`save_runs`: one commit for the lot, every run stored once with its own events."""
    from sqlalchemy import event

    commits: list[int] = []
    event.listen(store.engine, "commit", lambda _conn: commits.append(1))
    recs = [make_record(f"t{i}") for i in range(60)]
    outcomes = store.save_runs([(r, make_events(1 + i % 3)) for i, r in enumerate(recs)])
    assert [(o.stored, o.error) for o in outcomes] == [(True, None)] * 60
    assert len(commits) == 1
    runs = {r.run_id: r for r in store.runs()}
    assert set(runs) == {r.run_id for r in recs}
    for i in (0, 1, 2, 59):
        assert runs[recs[i].run_id] == recs[i]
        assert len(store.events(recs[i].run_id)) == 1 + i % 3


def test_a_bad_run_in_a_batch_does_not_fail_the_others(store: Store) -> None:
    """One run of a `save_runs` batch is refused by the database (its run id is taken): that
    run gets the error, the others are stored; a second finished run of one key in the same
    batch is refused like one arriving later."""
    from sqlalchemy.exc import IntegrityError

    first = make_record("t0")
    store.save_run(first, make_events(1))
    good, clash, again = make_record("t1"), make_record("t2", run_id=first.run_id), make_record("t1")
    later = make_record("t3", status="void", end_reason="api_error", score=None)
    out = store.save_runs([(good, make_events(2)), (clash, make_events(1)), (again, make_events(1)), (later, [])])
    assert out[0].stored is True and out[0].error is None
    assert isinstance(out[1].error, IntegrityError)
    assert out[2].stored is False and out[2].error is None  # t1 was finished by `good`
    assert out[3].stored is True
    assert {r.run_id for r in store.all_attempts()} == {first.run_id, good.run_id, later.run_id}
    assert len(store.events(good.run_id)) == 2


def test_two_processes_write_concurrently(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/shared.db"
    open_store(url).close()
    script = textwrap.dedent(
        f"""
        import sys, uuid
        sys.path.insert(0, {str(SRC)!r}); sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_store import make_record, make_events
        from assay.store import open_store
        s = open_store({url!r})
        for i in range(150):
            s.save_run(make_record(f"{{sys.argv[1]}}-{{i}}"), make_events(4))
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, tag]) for tag in ("p", "q")]
    assert [p.wait(60) for p in procs] == [0, 0]
    with open_store(url) as s:
        assert len(s.runs()) == 300


KILL_CHILD = """
import random, sys, uuid
sys.path.insert(0, {src!r})
from assay.record import Event, event_from_wire, RunKey, RunRecord
from assay.store import open_store

s = open_store({url!r})
rng = random.Random({seed})
i = 0
if {self_kill}:
    import os, signal
    from sqlalchemy import event

    @event.listens_for(s.engine, "after_cursor_execute")
    def _die(conn, cursor, statement, params, context, executemany):
        # die after the run row and its events are written, before the commit
        if i == 7 and statement.startswith("INSERT INTO events"):
            os.kill(os.getpid(), signal.SIGKILL)
while True:
    n = rng.randint(1, 80)
    rec = RunRecord(
        run_id=uuid.uuid4().hex,
        key=RunKey(campaign="k", task_id=f"t{{i}}", task_hash="h", agent="a", level=None, epoch=0,
                   options_hash="o"),
        kinds=["x"], harness_version="v", status="done", end_reason="finished",
        score=0.5, grade={{"n": n}}, task_meta={{"n_events": n}},
    )
    evs = [event_from_wire(seq=j, t=j * 0.1, kind="assistant", data={{"text": "x" * rng.randint(0, 4000)}})
           for j in range(n)]
    s.save_run(rec, evs)
    i += 1
    if i == 5:
        print("ready", flush=True)
"""


@pytest.mark.parametrize("seed,self_kill", [(1, False), (2, False), (3, False), (4, True)])
def test_kill_9_mid_save_leaves_complete_runs_only(tmp_path: Path, seed: int, self_kill: bool) -> None:
    """SIGKILL a process saving runs in a loop: at random moments, and (self_kill) for sure
    inside a transaction, after the run row and its events were written but before COMMIT."""
    db = tmp_path / "kill.db"
    url = f"sqlite:///{db}"
    child = subprocess.Popen(
        [sys.executable, "-c", KILL_CHILD.format(src=str(SRC), url=url, seed=seed, self_kill=self_kill)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        if not self_kill:
            time.sleep(0.2 + 0.037 * seed)  # land somewhere in the middle of a save
            os.kill(child.pid, signal.SIGKILL)
        assert child.wait(10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()

    with open_store(url) as s:
        with s.engine.connect() as c:
            assert c.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"
            assert c.exec_driver_sql("PRAGMA foreign_key_check").all() == []
            orphan_grades = c.exec_driver_sql(
                "select count(*) from runs r left join grades g on g.run_id = r.run_id where g.run_id is null"
            ).scalar()
            assert orphan_grades == 0
        runs = s.runs("k")
        assert len(runs) >= 5
        if self_kill:  # runs 0..6 committed; run 7 died before COMMIT and left nothing
            assert sorted(int(r.key.task_id[1:]) for r in runs) == list(range(7))
            with s.engine.connect() as c:
                assert c.exec_driver_sql("select count(*) from events").scalar() == sum(
                    r.task_meta["n_events"] for r in runs
                )
        for r in runs:
            evs = s.events(r.run_id)
            assert [e.seq for e in evs] == list(range(r.task_meta["n_events"]))
        # and the store keeps working after the crash
        s.save_run(make_record(campaign="k"), make_events(2))
        assert len(s.runs("k")) == len(runs) + 1
    with sqlite3.connect(db) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_many_saves_in_a_row_are_all_kept(tmp_path: Path) -> None:
    """300 runs saved one after another are all there with their events (the time per save is
    bench/bench_timings.py's `save_run`)."""
    with open_store(f"sqlite:///{tmp_path}/perf.db") as s:
        recs = [make_record(f"t{i}") for i in range(300)]
        evs = make_events(5)
        for r in recs:
            s.save_run(r, evs)
        assert {r.run_id for r in s.runs(recs[0].key.campaign)} == {r.run_id for r in recs}
        assert [e.seq for e in s.events(recs[-1].run_id)] == [e.seq for e in evs]


def test_a_nul_in_free_text_is_stored_escaped_on_every_backend(store: Store) -> None:
    """No PostgreSQL text holds a NUL: a task's domain or a void reason with one (a downloaded
    task's, an agent's) is stored as its escape `\\u0000` (`models.Str`, `FreeText`), here as
    on PostgreSQL, and the record keeps it (JSON escapes it)."""
    rec = make_record(status="void")
    rec.void_reason = "bad\x00reason"
    rec.task_meta = {"domain": "te\x00st"}
    store.save_run(rec, [])
    with store.engine.connect() as conn:
        row = conn.execute(text("SELECT domain, void_reason FROM current_runs")).one()
    assert tuple(row) == ("te\\u0000st", "bad\\u0000reason")
    assert store.get_run(rec.run_id).void_reason == "bad\x00reason"  # type: ignore[union-attr]


def test_the_last_epoch_of_a_task_agent_and_level_is_one_aggregate(store: Store) -> None:
    for epoch, level in ((1, None), (4, None), (2, "L1"), (9, "L1")):
        store.save_run(make_record(epoch=epoch, level=level), [])
    store.save_run(make_record(epoch=7, agent="other"), [])
    assert store.last_epoch("camp", "t1", "agent-a", None) == 4
    assert store.last_epoch("camp", "t1", "agent-a", "L1") == 9
    assert store.last_epoch("camp", "t1", "nobody", None) == 0
    assert store.last_epoch("elsewhere", "t1", "agent-a", None) == 0
