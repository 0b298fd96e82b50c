"""Group commit of finished runs (`assay.campaign.saver.RunSaver`) on a real store: runs
saved together share a transaction, each save returns once its run is committed, one bad
run fails only itself, and saves whose tasks are cancelled (Ctrl-C) are still stored."""

from __future__ import annotations

import asyncio

from sqlalchemy import event
from sqlalchemy.exc import IntegrityError

from assay.campaign.saver import RunSaver
from assay.store import Store
from tests.test_store import make_events, make_record


def _commits(store: Store) -> list[int]:
    seen: list[int] = []
    event.listen(store.engine, "commit", lambda _conn: seen.append(1))
    return seen


async def test_runs_finishing_together_are_written_in_one_transaction(store: Store) -> None:
    saver = RunSaver(store)
    commits = _commits(store)
    recs = [make_record(f"t{i}") for i in range(100)]
    assert await asyncio.gather(*(saver.save(r, make_events(2)) for r in recs)) == [True] * 100
    assert len(commits) == 1
    assert {r.run_id for r in store.runs()} == {r.run_id for r in recs}
    assert len(store.events(recs[57].run_id)) == 2


async def test_a_lone_run_is_written_at_once_and_later_ones_in_later_transactions(store: Store) -> None:
    saver = RunSaver(store)
    commits = _commits(store)
    first = make_record("t0")
    assert await saver.save(first, make_events(1))
    assert len(commits) == 1 and [r.run_id for r in store.runs()] == [first.run_id]  # committed on return
    assert await saver.save(make_record("t0"), make_events(1)) is False  # its key is finished
    assert len(store.all_attempts()) == 1


async def test_a_bad_run_fails_only_its_own_save(store: Store) -> None:
    saver = RunSaver(store)
    taken = make_record("t0")
    await saver.save(taken, [])
    recs = [make_record(f"t{i}") for i in range(1, 6)]
    recs[2] = make_record("t3", run_id=taken.run_id)  # the database refuses its run id
    got = await asyncio.gather(*(saver.save(r, make_events(1)) for r in recs), return_exceptions=True)
    assert isinstance(got[2], IntegrityError)
    assert [g for i, g in enumerate(got) if i != 2] == [True] * 4
    assert len(store.runs()) == 5


async def test_saves_of_cancelled_runs_are_still_stored(store: Store) -> None:
    """Ctrl-C cancels the runs waiting for their save: the saves go on, and `flush` (what a
    campaign awaits as it ends) returns once every one is written."""
    saver = RunSaver(store)
    recs = [make_record(f"t{i}") for i in range(30)]
    tasks = [asyncio.create_task(saver.save(r, make_events(1))) for r in recs]
    await asyncio.sleep(0)  # every save queued
    for t in tasks:
        t.cancel()
    got = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(g, asyncio.CancelledError) for g in got)
    await saver.flush()
    assert {r.run_id for r in store.runs()} == {r.run_id for r in recs}
