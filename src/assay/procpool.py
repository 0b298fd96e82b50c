"""Pools of worker processes for work the harness must not do in its own interpreter.

Work on agent-made input (a predicate's regular expression, a copy of a tree of 100,000
folders) holds the interpreter lock between its steps; in a thread of the harness it froze
the event loop every run shares. A `WorkerPool` runs it in pebble's `ProcessPool`, started
lazily by a fork server (never a fork of the harness with its threads), whose workers end
with the harness, even after kill -9 (the standard library's pool's outlived it). Each pool
is named by what it runs; `schedule` hands back pebble's future (a timeout kills and
replaces the worker, the other calls go on).

`waited` runs a blocking wait on a child process (a grade that may take its whole time limit)
in a thread of `WAITS`, never in the event loop's default executor: six threads on two cores,
shared by the file tools and the store's saves, which six hanging grades held for minutes.
"""

from __future__ import annotations

import asyncio
import atexit
import multiprocessing
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from pebble import ProcessFuture, ProcessPool

__all__ = ["WAITS", "WorkerPool", "waited"]

T = TypeVar("T")

WAITS = ThreadPoolExecutor(max_workers=256, thread_name_prefix="assay-wait")
"""Threads that wait on child processes: a thread is made only when no idle one is left."""


async def waited(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)`, a call that blocks on a child process, in a thread of `WAITS`."""
    return await asyncio.get_running_loop().run_in_executor(WAITS, fn, *args)


def _retire(pool: ProcessPool) -> None:
    """Stop `pool` and wait for its worker processes and threads to end, in a thread of its own
    (pebble calls a future's callbacks on the pool's own thread, which `join` would wait on;
    `close` alone, or `stop` on a broken pool, left them running)."""
    def end() -> None:
        pool.stop()
        pool.join(timeout=10)

    threading.Thread(target=end, name="assay-pool-retire", daemon=True).start()


class WorkerPool:
    """A pool of `workers` processes, each set up by `initializer` (its own limits), started on
    first use and again after it was stopped; stopped when the harness exits.

    A call scheduled while every worker is busy runs in a pool of its own (`alone`), up to
    `spill` such calls at once, so that one slow call (a copy of a tree an agent made slow, a
    predicate at its time limit) does not hold the calls of other runs behind it; past `spill`
    it waits for a worker."""

    def __init__(self, name: str, workers: int, initializer: Callable[[], None] | None = None,
                 *, spill: int = 0) -> None:
        self.name = name
        self.workers = workers
        self.initializer = initializer
        self.spill = spill
        self._pool: ProcessPool | None = None
        self._lock = threading.Lock()
        self._busy = 0  # calls scheduled on the shared pool and not done
        self._spilled = 0  # calls running alone and not done
        atexit.register(self.stop)

    def _started(self) -> ProcessPool:
        with self._lock:
            if self._pool is None or not self._pool.active:
                if self._pool is not None:  # broken (a worker died where pebble cannot tell whose call it ran)
                    _retire(self._pool)
                self._pool = ProcessPool(max_workers=self.workers, initializer=self.initializer,
                                         context=multiprocessing.get_context("forkserver"))
            return self._pool

    def schedule(self, fn: Callable[..., Any], args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
                 timeout: float | None = None) -> ProcessFuture:
        """`fn(*args, **kwargs)` in a worker (module-level `fn`, picklable arguments and result),
        killed after `timeout` seconds when given; alone when every worker is busy (`spill`)."""
        with self._lock:
            alone = self._busy >= self.workers and self._spilled < self.spill
            if alone:
                self._spilled += 1
            else:
                self._busy += 1
        try:
            if alone:
                future = self.alone(fn, args, timeout, kwargs)
            else:
                future = self._started().schedule(fn, args=args, kwargs=dict(kwargs or {}), timeout=timeout)
        except BaseException:
            self._done(spilled=alone)
            raise
        future.add_done_callback(lambda _f: self._done(spilled=alone))
        return future

    def _done(self, *, spilled: bool) -> None:
        with self._lock:
            if spilled:
                self._spilled -= 1
            else:
                self._busy -= 1

    def alone(self, fn: Callable[..., Any], args: Sequence[Any] = (), timeout: float | None = None,
              kwargs: Mapping[str, Any] | None = None) -> ProcessFuture:
        """`fn(*args, **kwargs)` in a pool of its own (one worker, set up as this pool's), ended
        with its worker once the call ends: a call tried again after the shared pool broke cannot
        break it for the others, and one that spills over runs beside the busy workers."""
        pool = ProcessPool(max_workers=1, initializer=self.initializer,
                           context=multiprocessing.get_context("forkserver"))
        try:
            future = pool.schedule(fn, args=args, kwargs=dict(kwargs or {}), timeout=timeout)
        except BaseException:
            _retire(pool)
            raise
        future.add_done_callback(lambda _f: _retire(pool))  # its worker and threads end with the call
        return future

    def stop(self) -> None:
        """End the workers (what runs is killed); the next `schedule` starts the pool again."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.stop()
            pool.join(timeout=5)
