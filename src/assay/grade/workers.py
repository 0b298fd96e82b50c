"""Grading work on agent-made input, in worker processes of its own, never on the event loop.

A contract predicate parses bytes the agent wrote (JSON with a task-supplied JSON Schema whose
`pattern` runs in Python's `re`, CSV, images): Python's regular expressions hold the GIL while
they backtrack, so one such predicate in a thread of the harness froze every run of the
campaign. `call` runs a function in a pool of worker processes (`assay.procpool`) with a
wall-clock limit, past which the worker is killed and replaced while the other calls go on, and an
address-space and a recursion limit per worker. A call that passes its time limit raises
`WorkerTimeout`; one that runs out of memory, passes the recursion limit (a task's recursive
JSON Schema `$ref` walked down an artifact nested a few hundred levels deep), kills its
worker, or breaks the pool and then its own (a worker that dies before its call starts, e.g.
on an argument too large to unpickle, breaks the whole pool: every call in flight is tried
once more, each in a pool of its own) raises `WorkerFailed`; the caller decides whose fault that is (for a predicate: the
agent's artifact, a failed predicate). Any other exception of `fn` is raised as it is.
"""

from __future__ import annotations

import asyncio
import resource
import sys
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from pebble.common import ProcessExpired

from assay.procpool import WorkerPool

__all__ = ["MEMORY_BYTES", "POOL", "WORKERS", "WorkerFailed", "WorkerTimeout", "call"]

T = TypeVar("T")

WORKERS = 2
MEMORY_BYTES = 2 * 1024**3
"""Address space of a worker process: a predicate reads at most 20 MiB of an artifact."""
RECURSION = 2000


class WorkerTimeout(Exception):
    """The call passed its wall-clock limit; its worker was killed."""


class WorkerFailed(Exception):
    """The worker died or ran out of memory during the call."""


def _limit() -> None:
    """Each worker's own ceilings (its initializer)."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    sys.setrecursionlimit(RECURSION)


POOL = WorkerPool("grading work on agent-made input", WORKERS, initializer=_limit, spill=2)  # each may hold MEMORY_BYTES


START_GRACE_S = 60.0
"""How long past its own time limit a call may wait for a worker to take it: pebble's limit
counts from the start, and a call whose worker died before taking it (while another call ran)
never starts at all."""


async def _result(future: Any, timeout_s: float) -> Any:
    """The call's result, or its own exception (pebble's time limit among them: a TimeoutError,
    which is why the grace is waited with `asyncio.wait`, not `wait_for`)."""
    wrapped = asyncio.wrap_future(future)
    done, _pending = await asyncio.wait({wrapped}, timeout=timeout_s + START_GRACE_S)
    if not done:
        future.cancel()
        raise WorkerFailed(f"no worker took it within {timeout_s + START_GRACE_S:g} s (its worker died "
                           "before starting it)")
    return wrapped.result()


async def call(fn: Callable[..., T], *args: Any, timeout_s: float) -> T:
    """`fn(*args)` in a worker process, at most `timeout_s` seconds (module-level `fn`, picklable
    arguments and result)."""
    try:
        try:
            result: T = await _result(POOL.schedule(fn, args, timeout=timeout_s), timeout_s)
        except (BrokenProcessPool, RuntimeError):  # the pool broke (maybe by another call): once more, alone
            result = await _result(POOL.alone(fn, args, timeout=timeout_s), timeout_s)
        return result
    except (BrokenProcessPool, RuntimeError) as e:
        raise WorkerFailed(f"its pool broke, and the pool it was tried again in alone ({e})") from None
    except FutureTimeout:
        raise WorkerTimeout(f"stopped after {timeout_s:g} s (killed)") from None
    except MemoryError:
        raise WorkerFailed(f"ran out of its {MEMORY_BYTES // 1024**3} GiB of memory") from None
    except RecursionError:  # the worker's own ceiling (RECURSION), like its memory
        raise WorkerFailed(f"passed its recursion limit of {RECURSION} frames") from None
    except ProcessExpired as e:
        raise WorkerFailed(f"its process died ({e})") from None
