"""The worker pools' spill-over: a call scheduled while every worker is busy runs beside them,
in a pool of its own, instead of waiting behind a slow call of another run."""

from __future__ import annotations

import os
import time
from pathlib import Path

from assay.procpool import WorkerPool
from tests.helpers import live_processes


def _wait_for(path: str) -> str:
    """Blocks until `path` exists (at most 60 s): a slow call the test releases."""
    for _ in range(600):
        if os.path.exists(path):
            return "released"
        time.sleep(0.1)
    return "never released"


def _quick(x: int) -> int:
    return x * 2


def test_a_call_spills_past_a_busy_worker_and_waits_once_the_spill_is_full(tmp_path: Path) -> None:
    gate = str(tmp_path / "go")
    pool = WorkerPool("test", 1, spill=1)
    try:
        slow = pool.schedule(_wait_for, (gate,))
        spilled = pool.schedule(_quick, (21,))  # the one worker is busy: this one runs alone
        assert spilled.result(timeout=30) == 42 and not slow.done()
        blocker = pool.schedule(_wait_for, (gate,))  # spills (the spill is free again)
        queued = pool.schedule(_quick, (1,))  # worker busy, spill full: waits for the worker
        time.sleep(1.0)
        assert not queued.done()
        Path(gate).touch()
        assert slow.result(timeout=30) == "released" and blocker.result(timeout=30) == "released"
        assert queued.result(timeout=30) == 2
    finally:
        Path(gate).touch()
        pool.stop()


def _descendants() -> set[int]:
    """Live processes below this one (pebble's workers are children of the fork server)."""
    parent = {pid: int(fields[1]) for pid, fields in live_processes()}
    out: set[int] = set()
    frontier = {os.getpid()}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier} - out
        out |= frontier
    return out


def test_calls_run_alone_leave_no_worker_behind(tmp_path: Path) -> None:
    """Each spilled call's pool is stopped and joined once the call is done: five rounds of three
    calls on a one-worker pool leave no more processes than one round did."""
    pool = WorkerPool("test", 1, spill=2)
    try:
        assert [f.result(timeout=60) for f in [pool.schedule(_quick, (i,)) for i in range(3)]] == [0, 2, 4]
        time.sleep(2)
        after_one = len(_descendants())
        for _ in range(5):
            assert [f.result(timeout=60) for f in [pool.schedule(_quick, (i,)) for i in range(3)]] == [0, 2, 4]
        for _ in range(100):  # the retiring threads join the pools' workers
            if len(_descendants()) <= after_one:
                break
            time.sleep(0.1)
        assert len(_descendants()) <= after_one
    finally:
        pool.stop()
