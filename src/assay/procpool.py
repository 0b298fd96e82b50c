"""Pools of worker processes for work the harness must not do in its own interpreter.

Work on agent-made input (a predicate's regular expression, a copy of a tree of 100,000
folders) holds the interpreter lock between its steps; in a thread of the harness it froze
the event loop every run shares. A `WorkerPool` runs it in pebble's `ProcessPool`, started
lazily by a fork server (never a fork of the harness with its threads), whose workers end
with the harness, even after kill -9 (the standard library's pool's outlived it). Each pool
is named by what it runs; `schedule` hands back pebble's future (a timeout kills and
replaces the worker, the other calls go on).
"""

from __future__ import annotations

import atexit
import multiprocessing
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pebble import ProcessFuture, ProcessPool

__all__ = ["WorkerPool"]


class WorkerPool:
    """A pool of `workers` processes, each set up by `initializer` (its own limits), started on
    first use and again after it was stopped; stopped when the harness exits."""

    def __init__(self, name: str, workers: int, initializer: Callable[[], None] | None = None) -> None:
        self.name = name
        self.workers = workers
        self.initializer = initializer
        self._pool: ProcessPool | None = None
        self._lock = threading.Lock()
        atexit.register(self.stop)

    def _started(self) -> ProcessPool:
        with self._lock:
            if self._pool is None or not self._pool.active:
                self._pool = ProcessPool(max_workers=self.workers, initializer=self.initializer,
                                         context=multiprocessing.get_context("forkserver"))
            return self._pool

    def schedule(self, fn: Callable[..., Any], args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
                 timeout: float | None = None) -> ProcessFuture:
        """`fn(*args, **kwargs)` in a worker (module-level `fn`, picklable arguments and result),
        killed after `timeout` seconds when given."""
        return self._started().schedule(fn, args=args, kwargs=dict(kwargs or {}), timeout=timeout)

    def stop(self) -> None:
        """End the workers (what runs is killed); the next `schedule` starts the pool again."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.stop()
            pool.join(timeout=5)
