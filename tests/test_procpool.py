"""The worker pools' spill-over: a call scheduled while every worker is busy runs beside them,
in a pool of its own, instead of waiting behind a slow call of another run."""

from __future__ import annotations

import os
import time
from pathlib import Path

from assay.procpool import WorkerPool


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
