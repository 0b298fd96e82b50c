"""`assay run --backend ray`: the campaign's runs as Ray tasks, into the same store.

The driver (the `assay run` process) plans the campaign and schedules it as it does locally
(the same `run_campaign`: concurrency, progress, resume, Ctrl-C); only the executor differs.
Each run goes to a Ray task carrying what the worker needs to rebuild it: the task (its
files are read from the same paths, so every worker needs the suite at the path the driver
read it from: one machine, or a shared filesystem), the agent spec and `assay.toml`, the
campaign's options, the store URL and the attempt number. The worker builds its own
workspace and sandbox, runs, grades, saves the record to the store itself and returns it;
the driver never saves it a second time.

A worker that dies mid-run (killed, out of memory, its node lost) stored nothing: the run is
sent again, up to `RAY_RETRIES` times (first checking the store, so a run whose worker died
after saving is never run twice); after that the driver stores it void with the reason.
Ctrl-C cancels the outstanding Ray tasks (each worker stops its run without storing it).

Ray is imported only here and only when the backend starts: the plain install has no Ray.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from sqlalchemy.engine import make_url

from assay.agent.spec import AgentFactory
from assay.campaign.options import RunOptions
from assay.campaign.plan import PlannedRun
from assay.campaign.runner import RunContext, execute_run, lost_run
from assay.config import Config
from assay.env.bwrap import bwrap_available
from assay.errors import HarnessError, InputError
from assay.grade.judge import Judge
from assay.llm.providers import registered_providers
from assay.llm.urls import is_loopback
from assay.record import RunKey, RunRecord
from assay.store import Store
from assay.task.model import Task

__all__ = ["LOCAL_OBJECT_STORE_BYTES", "RAY_RETRIES", "RayBackend", "WorkerRun", "check_ray_store",
           "run_on_worker"]

RAY_RETRIES = 3
"""How many times a run whose Ray worker died is sent again before it is stored void."""
LOCAL_OBJECT_STORE_BYTES = 100 * 1024**2
"""Object store of the local Ray instance (no `--ray-address`): runs pass only small payloads."""
CANCEL_GRACE_S = 15.0
"""After Ctrl-C, how long the driver waits for cancelled runs to clean up before Ray shuts down."""
TICK_S = 0.2
"""A worker's event loop wakes this often, so a cancel (raised between Python steps) lands promptly."""
FORWARDED_ENV = ("BRAVE_API_KEY",)


@dataclass
class WorkerRun:
    """What a Ray worker needs to rebuild one planned run (pickled into the Ray task)."""

    task: Task
    level: str | None
    epoch: int
    key: RunKey
    agent_spec: str
    config: Config
    options: RunOptions
    store_url: str
    attempt: int
    cwd: str  # the driver's folder: relative paths (a PostgreSQL store's `.assay/runs`) mean the same there


# --- the worker side ----------------------------------------------------------------------

_STORES: dict[str, Store] = {}  # one Store (and connection pool) per worker process and URL


def _worker_store(url: str) -> Store:
    store = _STORES.get(url)
    if store is None:
        store = _STORES[url] = Store(url)
    return store


def run_on_worker(job: WorkerRun) -> str:
    """The Ray task: run one planned run on this worker, store it, return its record as JSON.

    `ray.cancel` interrupts the task's thread as a SIGINT would; with Python's own handler in
    place, `asyncio.run` turns that into a cancel of the run (`execute_run` then stores
    nothing, stops the sandbox and removes the run folder), not a KeyboardInterrupt landing at
    some random point in it."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler) if main else None
    try:
        return asyncio.run(_work(job))
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


async def _tick() -> None:
    while True:
        await asyncio.sleep(TICK_S)


async def _work(job: WorkerRun) -> str:
    from assay.campaign.service import brave_search

    if os.path.isdir(job.cwd):  # same machine or a shared filesystem: work where the driver works
        os.chdir(job.cwd)
    # Built afresh per run: their HTTP clients (created on first use) belong to this run's event loop.
    agent = AgentFactory(job.agent_spec, job.config)
    if agent.kind in ("model", "script") and not job.options.unsafe_no_sandbox and not bwrap_available():
        # The driver checked its own machine; this worker would silently run the agent unsandboxed.
        raise HarnessError(f"bubblewrap is not installed on the Ray worker at {socket.gethostname()}, so "
                           f"{job.agent_spec} cannot be sandboxed there (install it on every worker)")
    store = _worker_store(job.store_url)
    judge = Judge.from_specs(list(job.options.judges), job.config, mode=job.options.judge_mode,
                             repeats=job.options.judge_repeats) if job.options.judges else None
    if judge is not None:
        judge.cache = store
    brave = brave_search() if job.options.search == "brave" else None
    ctx = RunContext(store=store, options=job.options, judge=judge, brave=brave)
    planned = PlannedRun(task=job.task, agent=agent, level=job.level, epoch=job.epoch, key=job.key)
    ticker = asyncio.create_task(_tick())
    try:
        record = await execute_run(planned, ctx, job.attempt)
    finally:
        ticker.cancel()
        if brave is not None:
            brave.close()
        await agent.aclose()
        if judge is not None:
            await judge.aclose()
    return record.model_dump_json()


# --- the driver side ----------------------------------------------------------------------

def _absolute_store_url(url: str) -> str:
    """A SQLite file's URL with an absolute path, so a worker in another folder opens the same file."""
    parsed = make_url(url)
    db = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or db in ("", ":memory:") or db.startswith("file:"):
        return url
    path = Path(db).expanduser()
    if not path.is_absolute():
        path = Path.cwd() / path
    return parsed.set(database=str(path.resolve())).render_as_string(hide_password=False)


def _remote_address(address: str | None) -> bool:
    """Whether `--ray-address` may put workers on other machines (not this one's loopback)."""
    if address is None or address in ("local", "auto"):
        return False
    return not is_loopback(address if "://" in address else f"ray://{address}")


def check_ray_store(url: str, address: str | None) -> None:
    """Refuse a store Ray workers cannot reach (InputError, exit 2): an in-memory SQLite store
    (each worker would get its own), or a SQLite file with a cluster on other machines."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return
    db = parsed.database or ""
    if db in ("", ":memory:") or db.startswith("file:"):
        raise InputError(None, "--store", "an in-memory SQLite store cannot be shared with Ray workers; give a "
                                          "file (sqlite:///PATH) or a PostgreSQL URL")
    if _remote_address(address):
        raise InputError(None, "--store", f"a SQLite store is a file on this machine, which Ray workers at "
                                          f"{address} cannot write; use a PostgreSQL store "
                                          "(postgresql+psycopg://...) shared by the driver and every worker")


def _forwarded_env(config: Config) -> dict[str, str]:
    """The environment a remote cluster's workers need: provider keys and URLs (of the built-in
    providers and the plugins' the campaign resolved), the keys that assay.toml names, Brave's
    key and every ASSAY_* setting (a local instance inherits them)."""
    names = {n for p in registered_providers() for n in (p.key_env, p.url_env) if n} | set(FORWARDED_ENV)
    names |= {m.api_key_env for m in config.models.values() if m.api_key_env}
    names |= {n for n in os.environ if n.startswith("ASSAY_")}
    return {n: os.environ[n] for n in sorted(names) if n in os.environ}


def _crashed(e: BaseException) -> bool:
    """A Ray failure of the worker (died, lost, out of memory), not an error of the run itself."""
    import ray.exceptions as rex

    return isinstance(e, rex.RayError) and not isinstance(e, rex.RayTaskError | rex.TaskCancelledError)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300]}" if text else type(e).__name__


class RayBackend:
    """The executor of `--backend ray` (`run_campaign(..., execute=backend.execute)`)."""

    def __init__(self, options: RunOptions, config: Config, store_url: str, console: Console | None = None) -> None:
        self.options = options
        self.config = config
        self.store_url = _absolute_store_url(store_url)
        self.console = console or Console(stderr=True)
        self.cwd = os.getcwd()
        self._remote: Any = None
        self._cancelled: list[Any] = []

    def start(self) -> None:
        """Connect to `--ray-address`, or start a private local Ray instance (InputError when Ray fails)."""
        import ray

        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # assay sends nothing anywhere
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                  "configure_logging": False}
        address = self.options.ray_address
        if address is None or address == "local":
            kwargs.update(address="local", object_store_memory=LOCAL_OBJECT_STORE_BYTES,
                          _node_ip_address="127.0.0.1")
        else:
            kwargs.update(address=address, runtime_env={"env_vars": _forwarded_env(self.config)})
        t0 = time.monotonic()
        try:
            ray.init(**kwargs)
        except Exception as e:  # Ray raises many kinds (ConnectionError, RuntimeError, ValueError)
            raise InputError(None, "--ray-address", f"cannot start or reach Ray at {address or 'a local instance'}: "
                                                   f"{_first_line(e)}") from None
        # Retries are the driver's (`execute`): it checks the store before sending a run again.
        self._remote = ray.remote(run_on_worker).options(num_cpus=1, max_retries=0, name="assay-run")
        cpus = int(ray.cluster_resources().get("CPU", 0))
        self.console.print(f"ray: {'local instance' if kwargs['address'] == 'local' else address}, {cpus} CPUs, "
                           f"ready in {time.monotonic() - t0:.1f}s")

    def _job(self, planned: PlannedRun, attempt: int) -> WorkerRun:
        return WorkerRun(task=planned.task, level=planned.level, epoch=planned.epoch, key=planned.key,
                         agent_spec=planned.agent.spec, config=self.config, options=self.options,
                         store_url=self.store_url, attempt=attempt, cwd=self.cwd)

    async def execute(self, planned: PlannedRun, ctx: RunContext, attempt: int) -> RunRecord:
        """Run one planned run on a Ray worker; the worker stores its record."""
        import ray

        job = self._job(planned, attempt)
        reason = ""
        for tries in range(1, RAY_RETRIES + 2):
            ref = self._remote.remote(job)
            try:
                raw: str = await ref
            except asyncio.CancelledError:
                ray.cancel(ref)  # the worker stops the run (nothing stored) when it sees the cancel
                self._cancelled.append(ref)
                raise
            except Exception as e:
                if not _crashed(e):  # the run function failed on the worker (e.g. the store unreachable there)
                    reason = f"the Ray task failed: {_first_line(getattr(e, 'cause', None) or e)}"
                    break
                reason = f"the Ray worker was lost {tries} time(s): {_first_line(e)}"
                stored = await asyncio.to_thread(ctx.store.done_run, ctx.options.campaign, planned.digest)
                if stored is not None:  # the worker died after saving: the run is done, not re-run
                    return stored
                if tries <= RAY_RETRIES:
                    self.console.print(f"ray: worker lost running {planned.key.task_id} ({planned.agent.spec}); "
                                       f"run re-queued ({_first_line(e)})")
                continue
            return RunRecord.model_validate_json(raw)
        stored = await asyncio.to_thread(ctx.store.done_run, ctx.options.campaign, planned.digest)
        if stored is not None:
            return stored
        record, events = lost_run(planned, ctx, attempt, reason)
        await ctx.saver.save(record, events)
        return record

    def close(self) -> None:
        """Let cancelled runs clean up (briefly), then leave Ray (a local instance ends with it)."""
        import ray

        if not ray.is_initialized():
            return
        if self._cancelled:  # ready when the worker finished its cleanup (or died)
            ray.wait(self._cancelled, num_returns=len(self._cancelled), timeout=CANCEL_GRACE_S)
        ray.shutdown()
