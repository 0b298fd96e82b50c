"""Workers never deadlock (issue 26, part 6): one lock order for claims, saves, heartbeats
and releases on a real PostgreSQL; a conflict the database breaks is retried; a worker
waiting on another's keys wakes when they are stored or their lease lapses, not on a poll;
and 4 real `assay run` processes on one PostgreSQL campaign pay each model call once and
end together with the last save."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from sqlalchemy import create_engine, text

from assay.agent.base import AgentEnv, AgentOutcome
from assay.campaign.options import RunOptions
from assay.campaign.plan import Plan, build_plan
from assay.campaign.runner import RunContext
from assay.campaign.scheduler import CampaignResult, run_campaign
from assay.store import Store, open_store
from assay.task.discover import discover
from tests.fakes import reply
from tests.fakes.agents import FakeFactory
from tests.fakes.openai_server import FakeOpenAIServer
from tests.helpers import REPO, answer_task
from tests.test_store import make_events, make_record

SRC = REPO / "src"
FOREIGN = "elsewhere.example:1:feedface"  # a worker of another machine: never "dead" from here


def _deadlocks(url: str) -> int:
    """PostgreSQL's own count of deadlocks it detected in this database (every backend that
    counted one has ended before: counts reach the statistics as a backend exits)."""
    eng = create_engine(url)
    try:
        with eng.connect() as c:
            c.execute(text("SELECT pg_stat_clear_snapshot()"))
            return int(c.execute(text("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"))
                       .scalar_one())
    finally:
        eng.dispose()


# --------------------------------------------------------------------------- lock order


def _race(pg_url: str, bodies: list[Callable[[Store], None]], timeout_s: float) -> None:
    """Each body in a thread of its own, on a store of its own, all started together: none may
    raise or hang, and PostgreSQL may detect no deadlock meanwhile (a retry would hide a
    deadlock from the errors, not from `pg_stat_database.deadlocks`)."""
    before = _deadlocks(pg_url)
    errors: list[BaseException] = []
    go = threading.Barrier(len(bodies))

    def run(body: Callable[[Store], None]) -> None:
        store = open_store(pg_url)
        try:
            go.wait()
            body(store)
        except BaseException as e:
            errors.append(e)
        finally:
            store.close()

    threads = [threading.Thread(target=run, args=(body,)) for body in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout_s)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert _deadlocks(pg_url) == before


def _saved(store: Store, runs: list[tuple[Any, Any]]) -> None:
    """`save_runs`, a failed run raised (the race collects it)."""
    failed = [o.error for o in store.save_runs(runs) if o.error is not None]
    if failed:
        raise failed[0]


def _void(task_id: str, attempt: int) -> Any:
    return make_record(task_id, campaign="c", attempt=attempt, status="void", end_reason="api_error", score=None)


def test_claims_saves_heartbeats_and_releases_in_opposite_orders_never_deadlock(pg_url: str) -> None:
    """Threads, each on its own store, race over 24 keys whose lease rows lie in the table in
    a shuffled order: claimers take them over ascending and descending, savers store runs of
    them ascending and descending (a done run and void ones), holders heart-beat and release
    theirs. No transaction fails and PostgreSQL detects no deadlock at all: every statement
    locks lease rows in the one order."""
    keys = [make_record(f"t{i:02d}", campaign="c").key for i in range(24)]
    digests = [k.digest for k in keys]
    setup = open_store(pg_url)
    shuffled = digests[:]
    random.Random(7).shuffle(shuffled)
    for d in shuffled:  # the heap order is not the key order
        assert setup.claim("c", d, "old", 0.0) == 1  # lapsed at once: every claimer takes them over
    setup.close()
    rounds = 30

    def claimer(i: int) -> Callable[[Store], None]:
        def body(store: Store) -> None:
            for r in range(rounds):
                order = digests if (i + r) % 2 else digests[::-1]
                won = store.claim_many("c", order, f"claimer{i}", 0.01)  # lapses almost at once: others take over
                store.heartbeat(f"claimer{i}")
                if r % 3 == 2:
                    store.release(f"claimer{i}", "c", list(won)[::-1])
        return body

    def saver(i: int) -> Callable[[Store], None]:
        def body(store: Store) -> None:
            for r in range(rounds):
                order = keys if (i + r) % 2 else keys[::-1]
                runs: list[tuple[Any, Any]] = []
                for j, k in enumerate(order):
                    if (r + j) % 5 != 0 or r < rounds - 2:  # mostly void attempts: they keep the keys open
                        rec = _void(k.task_id, 100 + r * 10 + i)
                    else:
                        rec = make_record(k.task_id, campaign="c", attempt=100 + r * 10 + i, score=0.5)
                    runs.append((rec, make_events(1)))
                _saved(store, runs)
        return body

    _race(pg_url, [*(claimer(i) for i in range(4)), *(saver(i) for i in range(2))], timeout_s=120)
    check = open_store(pg_url)
    try:
        done = [r.key.digest for r in check.all_attempts("c") if r.status == "done"]
        assert len(done) == len(set(done))  # a key finished at most once
    finally:
        check.close()


def test_claims_that_read_the_table_at_different_moments_and_saves_of_reclaimed_keys_never_deadlock(
        pg_url: str) -> None:
    """Six claimers claim random subsets of 24 keys with leases that lapse at once and give
    back half of what they won, while two savers store void attempts whose numbers the claims
    then hand out again. Two claims read the lease table at different moments (one sees a
    lease another worker just inserted, the other does not), and a save meets lease rows that
    appeared after it locked the key's rows. PostgreSQL detects no deadlock: a claim writes
    (drops, take-overs, inserts) in one pass in key order, and a save releases only the lease
    rows it locked (before: 2 to 23 deadlocks in a run of this test)."""
    keys = [make_record(f"t{i:02d}", campaign="c").key for i in range(24)]
    digests = [k.digest for k in keys]
    open_store(pg_url).close()
    rounds = 200

    def claimer(i: int) -> Callable[[Store], None]:
        def body(store: Store) -> None:
            rnd = random.Random(i)
            for _ in range(rounds):
                won = store.claim_many("c", rnd.sample(digests, rnd.randint(3, 24)), f"claimer{i}", 0.0)
                if rnd.random() < 0.5:
                    store.release(f"claimer{i}", "c", list(won))
        return body

    def saver(i: int) -> Callable[[Store], None]:
        def body(store: Store) -> None:
            for r in range(rounds // 3):
                order = keys if (i + r) % 2 else keys[::-1]
                _saved(store, [(_void(k.task_id, 1000 + r * 10 + i), make_events(1)) for k in order])
        return body

    _race(pg_url, [*(claimer(i) for i in range(6)), *(saver(i) for i in range(2))], timeout_s=300)


def test_two_saves_of_the_same_keys_without_leases_in_opposite_orders_never_deadlock(pg_url: str) -> None:
    """Two savers store void attempts of the same 24 keys, one ascending and one descending,
    with no lease rows to lock first (their leases lapsed and were dropped): each save's
    writes to the keys' current rows (`current_runs`) come in the one order as well, so the
    two queue on the first shared key and PostgreSQL never detects a deadlock (before: the
    current rows were written in the caller's order and about one CI run in a few died here)."""
    keys = [make_record(f"t{i:02d}", campaign="c").key for i in range(24)]
    open_store(pg_url).close()

    def saver(i: int) -> Callable[[Store], None]:
        def body(store: Store) -> None:
            for r in range(40):
                order = keys if i == 0 else keys[::-1]
                _saved(store, [(_void(k.task_id, 1000 + r * 2 + i), make_events(1)) for k in order])
        return body

    _race(pg_url, [saver(0), saver(1)], timeout_s=120)


def test_a_deadlock_the_database_breaks_is_retried(pg_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """Another program on the database locks two lease rows in the order opposite to the
    store's: PostgreSQL breaks the deadlock by rolling back the store's claim (SQLSTATE
    40P01), which is run again after a short backoff and wins both keys once the other
    program commits: no error, each key claimed once, with the right attempt."""
    store = open_store(pg_url)
    a, b = sorted(["k-" + "a" * 10, "k-" + "b" * 10])
    for d in (b, a):
        assert store.claim("c", d, "old", 0.0) == 1
    other = create_engine(pg_url)
    caplog.set_level(logging.WARNING, logger="assay.store.transactions")
    before = _deadlocks(pg_url)
    won: dict[str, int] = {}
    try:
        with other.connect() as conn:
            conn.execute(text("SET deadlock_timeout = '20s'"))  # the store's backend detects it, after 1 s
            conn.execute(text("SELECT 1 FROM leases WHERE key_digest = :d FOR UPDATE"), {"d": b})
            claim = threading.Thread(target=lambda: won.update(store.claim_many("c", [b, a], "W", 30)))
            claim.start()
            time.sleep(0.5)  # the store's claim holds a, waits for b
            conn.execute(text("SELECT 1 FROM leases WHERE key_digest = :d FOR UPDATE"), {"d": a})  # a cycle
            time.sleep(0.2)
            conn.commit()
            claim.join(timeout=30)
        assert won == {a: 2, b: 2}
        assert store.leases("c") == {a: ("W", 2), b: ("W", 2)}
        assert any("40P01" in r.getMessage() and "retried" in r.getMessage() for r in caplog.records)
    finally:
        store.close()
        other.dispose()
    assert _deadlocks(pg_url) == before + 1


# --------------------------------------------------------------------------- waking up


@pytest.fixture
def three_tasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ASSAY_LEASE_TTL_S", "60")  # a poll at a third of the TTL would wait 20 s
    for name in ("t0", "t1", "t2"):
        answer_task(tmp_path / "suite" / name)
    return discover([tmp_path / "suite"])


async def _answer_at_once(env: AgentEnv) -> AgentOutcome:
    assert env.workspace is not None
    (env.workspace / "answer.txt").write_text("42\n")
    return AgentOutcome(end_reason="finished", final_message="done")


async def _write_answer(env: AgentEnv) -> AgentOutcome:
    assert env.workspace is not None
    if env.task.id == "t0":
        await asyncio.sleep(2.0)  # the other worker's run, still going when this one has nothing left
    (env.workspace / "answer.txt").write_text("42\n")
    return AgentOutcome(end_reason="finished", final_message="done")


def _quiet(plan: Plan, ctx: RunContext) -> Any:
    return run_campaign(plan, ctx, console=Console(file=io.StringIO()), show_progress=False)


async def _timed(plan: Plan, ctx: RunContext) -> tuple[CampaignResult, float]:
    result = await _quiet(plan, ctx)
    return result, time.time()


def _saved_at(store: Store, campaign: str, digest: str) -> float:
    """When the key's done run was stored (`runs.created_at`, this machine's clock)."""
    with store.engine.connect() as c:
        return float(c.execute(text("SELECT max(created_at) FROM runs WHERE campaign = :c AND key_digest = :d "
                                    "AND status = 'done'"), {"c": campaign, "d": digest}).scalar_one())


@pytest.fixture
def wake_store(store_url: str) -> Iterator[Store]:
    s = open_store(store_url)
    try:
        yield s
    finally:
        s.close()


async def test_a_waiting_worker_wakes_when_the_other_stores_its_keys(three_tasks: list[Any],
                                                                     wake_store: Store) -> None:
    """Worker B runs t0 (2 s); worker A, started right after on t0, t1 and t2, finishes the
    two it could claim and waits on t0: it ends within a fraction of a second of B storing
    t0, counting it as done by another worker (a 20 s poll would have kept it 18 s more)."""
    ctx = RunContext(store=wake_store, options=RunOptions(unsafe_no_sandbox=True, concurrency=3))
    agent = FakeFactory("writer", _write_answer)
    plan = build_plan(three_tasks, [agent], ctx.options)
    t0 = [p for p in plan.runs if p.task.id == "t0"]
    b = asyncio.create_task(_timed(Plan(runs=t0, skipped=[]), ctx))
    while wake_store.leases(ctx.options.campaign) == {}:
        await asyncio.sleep(0.02)
    (a_result, a_end), (b_result, _) = await asyncio.gather(_timed(plan, ctx), b)
    assert (b_result.ran, a_result.ran, a_result.by_others) == (1, 2, 1)
    stored_at = _saved_at(wake_store, ctx.options.campaign, t0[0].digest)
    assert 0 <= a_end - stored_at < 1.0, a_end - stored_at
    assert wake_store.leases(ctx.options.campaign) == {}


async def test_a_waiting_worker_takes_over_as_the_lease_lapses(three_tasks: list[Any], wake_store: Store) -> None:
    """A worker of another machine claimed t0 with a 1.5 s lease and then went silent (no
    heartbeat, no release): this worker finishes t1 and t2, takes t0 over as that lease
    lapses, not before and not a 20 s poll later, and runs it as attempt 2."""
    ctx = RunContext(store=wake_store, options=RunOptions(unsafe_no_sandbox=True, concurrency=3))

    plan = build_plan(three_tasks, [FakeFactory("writer", _answer_at_once)], ctx.options)
    t0 = next(p for p in plan.runs if p.task.id == "t0")
    claimed = time.time()
    assert wake_store.claim(ctx.options.campaign, t0.digest, FOREIGN, 1.5) == 1
    result, end = await _timed(plan, ctx)
    assert (result.ran, result.by_others) == (3, 0)
    rec = wake_store.done_run(ctx.options.campaign, t0.digest)
    assert rec is not None and rec.attempt == 2
    assert rec.started_at >= claimed + 1.5 - 0.1  # waited for the lapse (the store clock, give or take)
    assert end - claimed < 1.5 + 1.5, end - claimed  # and took it over right then


async def test_a_waiting_worker_wakes_when_the_other_gives_its_keys_back(three_tasks: list[Any],
                                                                           wake_store: Store) -> None:
    """Another worker holds t0 on a 60 s lease and gives it back after 1 s (its Ctrl-C, or its
    agent stopped): this worker, waiting on it, starts it within half a second."""
    ctx = RunContext(store=wake_store, options=RunOptions(unsafe_no_sandbox=True, concurrency=3))

    plan = build_plan(three_tasks, [FakeFactory("writer", _answer_at_once)], ctx.options)
    t0 = next(p for p in plan.runs if p.task.id == "t0")
    assert wake_store.claim(ctx.options.campaign, t0.digest, FOREIGN, 60) == 1
    released: list[float] = []

    async def give_back() -> None:
        await asyncio.sleep(1.0)
        await asyncio.to_thread(wake_store.release, FOREIGN, ctx.options.campaign, [t0.digest])
        released.append(time.time())

    (result, _end), _ = await asyncio.gather(_timed(plan, ctx), give_back())
    assert (result.ran, result.by_others) == (3, 0)
    rec = wake_store.done_run(ctx.options.campaign, t0.digest)
    assert rec is not None and rec.attempt == 1  # given back unrun: its attempt number is free again
    assert -0.1 < rec.started_at - released[0] < 0.5, rec.started_at - released[0]  # taken over at once


# --------------------------------------------------------------------------- 4 real workers

PONG_TASK = """\
title: pong
execution: single-step
prompt: Reply with the word pong.
reference: {answer: pong}
rubric:
  items:
    - id: pong
      text: says pong
      weight: 10
      tag: IF
      check: {regex: "pong"}
"""
TRIALS = int(os.environ.get("ASSAY_TEST_TRIALS", "20"))
RUNS = 40
WORKERS = 4


def _workers(cmd: list[str], cwd: Path, env: dict[str, str]) -> list[tuple[int, str, float, float]]:
    """`WORKERS` processes of `cmd` started at once: each one's exit code, stderr, when it
    ended its campaign (wrote its closing "N runs this time, ..." line) and when it exited
    (this machine's clock, as `runs.created_at`)."""
    procs = [subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for _ in range(WORKERS)]
    out: list[tuple[int, str, float, float]] = [(0, "", 0.0, 0.0)] * WORKERS

    def reap(i: int) -> None:
        p = procs[i]
        assert p.stderr is not None
        lines: list[str] = []
        summary = 0.0
        for line in p.stderr:
            if " runs this time, " in line and not summary:
                summary = time.time()
            lines.append(line)
        p.wait(timeout=60)
        out[i] = (p.returncode, "".join(lines), summary, time.time())

    reapers = [threading.Thread(target=reap, args=(i,)) for i in range(WORKERS)]
    for t in reapers:
        t.start()
    for t in reapers:
        t.join(timeout=300)
    for p in procs:  # none is left running, whatever failed
        if p.poll() is None:
            p.kill()
            p.wait()
    return out


@pytest.mark.slow
def test_four_real_workers_pay_each_call_once_and_end_with_the_last_save(pg_url: str, tmp_path: Path) -> None:
    """4 `assay run` processes on one PostgreSQL campaign of 40 fake-model runs, 20 times
    (a campaign per trial): every worker exits 0, each run key is done once, the model was
    called exactly once per run, PostgreSQL detected no deadlock, and every worker
    ends its campaign (its closing line written) within 3 s of the campaign's last save
    (before: a waiting worker re-checked every 20 s, and one group in six died of a
    deadlock). The interpreter's own exit after that is printed, not asserted: on two
    loaded cores it takes another 0.2-1.5 s."""
    suite = tmp_path / "suite" / "pong"
    suite.mkdir(parents=True)
    (suite / "task.yaml").write_text(PONG_TASK)
    open_store(pg_url).close()  # migrated before the first trial
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "ASSAY_"))}
    env["PYTHONPATH"] = str(SRC)
    before = _deadlocks(pg_url)
    eng = create_engine(pg_url)
    lags: list[float] = []
    exit_lags: list[float] = []
    with FakeOpenAIServer(latency_s=0.05) as srv:
        srv.default = reply("pong", prompt_tokens=20, completion_tokens=2)
        (tmp_path / "assay.toml").write_text(
            f'[models.fake]\nprovider = "openai"\nmodel = "fake-model"\nbase_url = "{srv.url}"\n'
            "max_retries = 0\ntimeout_s = 60\n")
        for trial in range(TRIALS):
            campaign = f"trial-{trial}"
            calls_before = len(srv.requests)
            cmd = [sys.executable, "-m", "assay.cli", "run", str(suite.parent), "--agent", "fake", "--epochs",
                   str(RUNS), "--concurrency", "6", "--campaign", campaign, "--store", pg_url, "-q"]
            procs = _workers(cmd, tmp_path, env)
            assert [rc for rc, *_ in procs] == [0] * WORKERS, (trial, [e[-1500:] for _, e, _, _ in procs])
            ended = [at for _, _, at, _ in procs]
            exited = [at for *_, at in procs]
            with eng.connect() as c:
                rows = c.execute(text("SELECT key_digest, status, created_at FROM runs WHERE campaign = :c"),
                                 {"c": campaign}).all()
            done = [d for d, status, _ in rows if status == "done"]
            assert len(done) == len(set(done)) == RUNS == len(rows), (trial, len(done), len(rows))
            assert len(srv.requests) - calls_before == RUNS, (trial, len(srv.requests) - calls_before)
            last_save = max(at for _, _, at in rows)
            lag = max(ended) - last_save
            lags.append(lag)
            exit_lags.append(max(exited) - last_save)
            assert 0 < lag < 3.0, (trial, [round(e - last_save, 2) for e in ended])
    eng.dispose()
    assert _deadlocks(pg_url) == before
    print(f"\nworkers ended their campaign {min(lags):.2f}-{max(lags):.2f} s after the last save over {TRIALS} "
          f"trials; the last one exited {min(exit_lags):.2f}-{max(exit_lags):.2f} s after it")


def test_a_claim_whose_commit_answer_is_lost_still_holds_its_keys_once(pg_url: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The server commits a claim and the connection is lost before the answer arrives: the
    claim is run once more on a fresh connection, finds its own leases and keeps them (the
    next attempt number, so no two attempts share one), and no other worker can take them."""
    store = open_store(pg_url)
    admin = create_engine(pg_url.rsplit("/", 1)[0] + "/postgres", isolation_level="AUTOCOMMIT")
    lost: list[int] = []
    try:
        real_commit = store.engine.dialect.do_commit

        def commit_then_lose(raw: Any) -> None:
            real_commit(raw)
            if lost:
                return
            driver = raw.dbapi_connection
            pid = driver.info.backend_pid
            with admin.connect() as c:
                assert c.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar_one()
            lost.append(pid)
            driver.execute("SELECT 1")  # the driver's own error for the lost connection

        monkeypatch.setattr(store.engine.dialect, "do_commit", commit_then_lose)
        assert store.claim_many("c", ["k2", "k1"], "W", 30) == {"k1": 2, "k2": 2}
        assert lost
        monkeypatch.undo()
        assert store.leases("c") == {"k1": ("W", 2), "k2": ("W", 2)}
        assert store.claim_many("c", ["k1", "k2"], "other", 30) == {}
    finally:
        store.close()
        admin.dispose()
