"""The asyncio scheduler: bounded concurrency, live progress, resume, clean Ctrl-C.

Every run is claimed through the store before it starts (`Store.claim_many`, a few runs
per transaction: `CLAIM_BATCH`), so several `assay run` processes, on one machine or many,
can share one campaign: a run another live worker holds is skipped and looked at again at
the end, when it is either finished (counted as done by another worker) or, once its holder
stopped heart-beating, taken over here (at once when the holder was a process of this
machine that is gone). That wait is woken by the store (`Store.watch`) when another worker
stores runs or gives leases back, and otherwise lasts until the earliest of those leases
lapses: no fixed poll, so the workers of a campaign end together with its last save. A
background task renews this process's leases every third of their
TTL (`ASSAY_LEASE_TTL_S`); a run's lease is released in the transaction that stores its
record, and all of them at the end or on Ctrl-C.

When the store refuses this worker's heartbeats `HEARTBEAT_FAILURES_STOP` times in a row,
its leases are about to expire for others to take over: it starts no new run, lets the runs
going finish and ends with the reason (InputError: exit 2); the rest stay to do.

An agent whose provider refuses its credentials or model name (HTTP 401/403/404) on
`CREDENTIAL_STOP_AFTER` runs in a row is stopped for the rest of the campaign with one
message: its remaining runs are not started (they stay to do) and the other agents go on.

With `--max-campaign-usd X`, no new run starts once the campaign's spend (agents and
judges: the runs stored before this command, plus this command's) reaches X; runs already
going finish, so the spend can pass X by what they cost. The runs not started stay to do.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterable

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from sqlalchemy.exc import SQLAlchemyError

from assay.campaign.plan import Plan, PlannedRun
from assay.campaign.runner import RunContext, execute_run
from assay.config import settings
from assay.errors import InputError
from assay.record import RunRecord
from assay.store.transactions import db_reason
from assay.store.watch import Watch

log = logging.getLogger(__name__)

Executor = Callable[[PlannedRun, RunContext, int], Awaitable[RunRecord]]
"""Runs one planned run (with its attempt number) to a stored record: `execute_run` in this
process, or a backend that sends it to another worker (`--backend ray`). Claiming, heartbeats
and releasing stay here, around the executor, whichever runs it."""

CREDENTIAL_STATUSES = frozenset({401, 403, 404})
CREDENTIAL_STOP_AFTER = 3
HEARTBEATS_PER_TTL = 3
CLAIM_BATCH = 32
HEARTBEAT_FAILURES_STOP = 3
DEAD_CHECK_S = 1.0
"""A worker waiting on another's keys looks at least this often whether that holder, when a
process of this machine, is gone (no store read: a signal 0 to its pid)."""
LAPSE_MARGIN_S = 0.05
"""A waiting worker wakes this long after the earliest lease it waits on lapses (clocks tick
apart by a little)."""


def lease_holder() -> str:
    """A name for this worker's leases, unique across processes and machines: host:pid:nonce."""
    return f"{socket.gethostname()[:120]}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def is_local_holder(holder: str) -> bool:
    """Whether `holder` names a process of this machine (`lease_holder`)."""
    parts = holder.rsplit(":", 2)
    return len(parts) == 3 and parts[0] == socket.gethostname()[:120] and parts[1].isdigit()


def dead_local_holders(holders: Iterable[str]) -> set[str]:
    """The holders that were processes of this machine and are gone: their leases need not
    wait for their TTL (a run killed with kill -9 resumes at once). A pid now used by another
    process counts as alive, which only means waiting for the TTL."""
    host = socket.gethostname()[:120]
    dead: set[str] = set()
    for h in holders:
        parts = h.rsplit(":", 2)
        if len(parts) != 3 or parts[0] != host or not parts[1].isdigit():
            continue
        pid = int(parts[1])
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            dead.add(h)
        except PermissionError:  # alive, another user's
            continue
    return dead


class CampaignResult:
    """What one `run_campaign` call did, with running totals for the progress line."""

    def __init__(self) -> None:
        self.ran = 0  # runs this command finished and stored (the records themselves are not kept)
        self.already_done = 0
        self.by_others = 0  # runs of this plan another worker finished while this one ran
        self.not_started = 0  # runs of stopped agents, or past the campaign budget, left to do
        self.spent_before = 0.0  # USD of the campaign's runs stored before this command
        self.budget_reached: float | None = None  # --max-campaign-usd, when it stopped runs from starting
        self.stopped_agents: dict[str, str] = {}  # agent -> why it was stopped
        self.interrupted = False
        self.void = 0
        self.passed = 0
        self.cost_usd = 0.0
        self.elapsed_s = 0.0

    def add(self, rec: RunRecord) -> None:
        """Keep running totals (progress updates stay O(1) per run; nothing kept per run)."""
        self.ran += 1
        self.void += rec.status == "void"
        self.passed += bool(rec.passed)
        self.cost_usd += (rec.usage.cost_usd or 0.0) + (rec.judge_usage.cost_usd or 0.0)


class CredentialGuard:
    """Counts each agent's runs refused by its provider (401/403/404) in a row."""

    def __init__(self) -> None:
        self.streak: dict[str, int] = {}
        self.stopped: dict[str, str] = {}

    def seen(self, rec: RunRecord) -> str | None:
        """Note a finished run; the stop message when this run stops its agent."""
        agent = rec.key.agent
        if rec.end_reason != "api_error" or rec.provider_status not in CREDENTIAL_STATUSES:
            self.streak[agent] = 0
            return None
        self.streak[agent] = n = self.streak.get(agent, 0) + 1
        if n < CREDENTIAL_STOP_AFTER or agent in self.stopped:
            return None
        self.stopped[agent] = why = (
            f"agent {agent} stopped: its provider refused its credentials or model name "
            f"(HTTP {rec.provider_status}) on {n} runs in a row ({rec.void_reason}); its remaining runs "
            "are not started and stay to do: fix the key or model name and run the same command again")
        return why


def pending_runs(plan: Plan, ctx: RunContext) -> tuple[list[tuple[PlannedRun, int]], int]:
    """Runs still to do (with the attempt number they would get now) and how many are already
    finished. The attempt a run really gets is decided when it is claimed."""
    done = ctx.store.finished_digests(ctx.options.campaign, retry_void=ctx.options.retry_void)
    attempts = ctx.store.attempts(ctx.options.campaign)
    todo: list[tuple[PlannedRun, int]] = []
    finished = 0
    for p in plan.runs:
        d = p.digest
        if d in done:
            finished += 1
        else:
            todo.append((p, attempts.get(d, 0) + 1))
    return todo, finished


async def run_campaign(plan: Plan, ctx: RunContext, *, console: Console | None = None,
                       show_progress: bool = True,
                       on_record: Callable[[RunRecord], None] | None = None,
                       execute: Executor = execute_run) -> CampaignResult:
    result = CampaignResult()
    todo, result.already_done = pending_runs(plan, ctx)
    console = console or Console(stderr=True)
    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[stats]}"), TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
        console=console, transient=False, disable=not show_progress,
    )
    t0 = time.monotonic()
    with progress:
        bar = progress.add_task(f"campaign {ctx.options.campaign}", total=len(todo), stats=_stats(result))
        worker = _Worker(ctx, result, progress, bar, on_record, execute)
        await worker.run([p for p, _ in todo])
    result.elapsed_s = time.monotonic() - t0
    return result


class _Worker:
    """One `run_campaign` call's claims, runs and heartbeats."""

    def __init__(self, ctx: RunContext, result: CampaignResult, progress: Progress, bar: TaskID,
                 on_record: Callable[[RunRecord], None] | None, execute: Executor) -> None:
        self.ctx, self.result, self.progress, self.bar = ctx, result, progress, bar
        self.on_record, self.execute = on_record, execute
        self.store, self.campaign = ctx.store, ctx.options.campaign
        self.sem = asyncio.Semaphore(max(1, ctx.options.concurrency))
        self.ttl = settings().lease_ttl_s
        self.interval = self.ttl / HEARTBEATS_PER_TTL
        self.holder = lease_holder()
        self.guard = CredentialGuard()
        self.dead: set[str] = set()
        self.lost: str | None = None  # why this worker stopped taking runs (its heartbeats failed)

    async def look_for_dead(self) -> None:
        """Note the holders of this campaign's leases that were processes here and died."""
        leases = await asyncio.to_thread(self.store.leases, self.campaign)
        self.dead = dead_local_holders({h for h, _ in leases.values()})

    async def run(self, runs: list[PlannedRun]) -> None:
        beat = asyncio.create_task(self.heartbeat())
        try:
            await self.everything(runs)
        except asyncio.CancelledError:
            self.result.interrupted = True
        finally:
            await asyncio.shield(self.ctx.saver.flush())  # runs cancelled mid-save (Ctrl-C) are stored
            beat.cancel()
            await asyncio.gather(beat, return_exceptions=True)
            self.result.stopped_agents = dict(self.guard.stopped)
            await asyncio.shield(asyncio.to_thread(self.store.release, self.holder))
        if self.lost is not None and not self.result.interrupted:
            raise InputError(None, "--store", f"{self.lost}: {self.result.ran} runs of this command are stored, "
                                              f"{self.result.not_started} not started; run the same command again "
                                              "to resume")

    async def everything(self, runs: list[PlannedRun]) -> None:
        if self.ctx.options.max_campaign_usd is not None:
            self.result.spent_before = await asyncio.to_thread(self.store.campaign_cost, self.campaign)
        await self.look_for_dead()
        held = await self.wave(runs)
        if held and self.lost is None:
            await self.wait_for_others(held)

    async def wait_for_others(self, held: list[PlannedRun]) -> None:
        """Runs other workers hold: wait until they store them (done by another worker) or
        give them back or their leases lapse (taken over and run here). The store's watch
        wakes this worker when another one stores runs or releases leases (`Store.watch`:
        PostgreSQL's NOTIFY, a SQLite file's commit counter); otherwise it wakes as the
        earliest of their leases lapses, or within `DEAD_CHECK_S` when one of their holders
        is a process of this machine that is gone. No fixed poll: a worker ends as soon as
        the last of its keys is stored elsewhere."""
        watch = await asyncio.to_thread(self.store.watch, self.campaign)  # listening before the state is read
        try:
            while held and self.lost is None:
                states = await asyncio.to_thread(self.store.lease_states, self.campaign, [p.digest for p in held],
                                                 retry_void=self.ctx.options.retry_void)
                theirs = sum(p.digest in states.finished for p in held)
                if theirs:
                    self.result.by_others += theirs
                    self.progress.update(self.bar, advance=theirs, stats=_stats(self.result))
                held = [p for p in held if p.digest not in states.finished]
                holders = {h for h, _ in states.leases.values()}
                self.dead = dead_local_holders(holders)
                free = [p for p in held if (lease := states.leases.get(p.digest)) is None
                        or lease[0] in self.dead or lease[0] == self.holder or lease[1] <= 0]
                if free:
                    taken = {p.digest for p in free}
                    held = [p for p in held if p.digest not in taken] + await self.wave(free)
                    continue
                if held:
                    await self._sleep_on(watch, min(lapse for _, lapse in states.leases.values()), holders)
        finally:
            await asyncio.shield(asyncio.to_thread(watch.close))

    async def _sleep_on(self, watch: Watch, lapse_s: float, holders: set[str]) -> None:
        """Until `watch` sees a change, the earliest lease lapses (`lapse_s` from now), or one
        of `holders` turns out a process of this machine that is gone; in slices of at most
        `DEAD_CHECK_S`, so Ctrl-C and a dead local holder are noticed within one."""
        deadline = time.monotonic() + lapse_s + LAPSE_MARGIN_S
        local = {h for h in holders if is_local_holder(h)}
        while (left := deadline - time.monotonic()) > 0 and self.lost is None:
            if await asyncio.to_thread(watch.wait, min(left, DEAD_CHECK_S)):
                return
            if local and dead_local_holders(local):
                return

    async def wave(self, runs: list[PlannedRun]) -> list[PlannedRun]:
        """Run what can be claimed; the runs another worker holds.

        `concurrency` lanes take runs one after the other; runs are claimed `CLAIM_BATCH` at a
        time (one store transaction for the batch) by whichever lane finds none claimed left,
        so the store's cost per run stays small and nothing is kept per run once it is stored:
        the cost of a run is the same in a campaign of 2,000 runs and of 100,000."""
        pending = iter(runs)
        ready: deque[tuple[PlannedRun, int]] = deque()
        held: list[PlannedRun] = []
        claiming = asyncio.Lock()
        batch_size = max(1, min(CLAIM_BATCH, self.ctx.options.concurrency))

        async def take() -> tuple[PlannedRun, int] | None:
            async with claiming:  # one claim transaction at a time; the lanes queued here share what it won
                while not ready:
                    batch: list[PlannedRun] = []
                    for p in pending:
                        if self.stopping(p):
                            self.result.not_started += 1
                            continue
                        batch.append(p)
                        if len(batch) == batch_size:
                            break
                    if not batch:
                        return None
                    won = await asyncio.to_thread(self.store.claim_many, self.campaign,
                                                  [p.digest for p in batch], self.holder, self.ttl, self.dead)
                    for p in batch:
                        attempt = won.get(p.digest)
                        if attempt is None:
                            held.append(p)
                        else:
                            ready.append((p, attempt))
                return ready.popleft()

        async def lane() -> None:
            while (claimed := await take()) is not None:
                p, attempt = claimed
                if self.stopping(p):  # claimed before its agent was stopped or the budget reached
                    self.result.not_started += 1
                    await asyncio.to_thread(self.store.release, self.holder, self.campaign, [p.digest])
                    continue
                self.finished(await self.execute(p, self.ctx, attempt))  # its lease is released as it is stored

        lanes = [asyncio.create_task(lane()) for _ in range(min(len(runs), max(1, self.ctx.options.concurrency)))]
        try:
            await asyncio.gather(*lanes)
        except BaseException:
            for t in lanes:
                t.cancel()
            await asyncio.gather(*lanes, return_exceptions=True)
            raise
        return held

    def stopping(self, p: PlannedRun) -> bool:
        """Whether `p` is not to start: the heartbeats failed, its agent was stopped, or the
        campaign budget is reached."""
        return self.lost is not None or p.key.agent in self.guard.stopped or self.over_budget()

    def finished(self, rec: RunRecord) -> None:
        self.result.add(rec)
        stop = self.guard.seen(rec)
        if stop is not None:
            self.progress.console.print(f"[red]{escape(stop)}[/]", soft_wrap=True)
        if self.on_record is not None:
            self.on_record(rec)
        self.progress.update(self.bar, advance=1, stats=_stats(self.result))

    def over_budget(self) -> bool:
        budget = self.ctx.options.max_campaign_usd
        if budget is None or self.result.spent_before + self.result.cost_usd < budget:
            return False
        self.result.budget_reached = budget
        return True

    async def heartbeat(self) -> None:
        """Renew this worker's leases every `interval`. A failed beat is retried at the next
        one; after `HEARTBEAT_FAILURES_STOP` in a row the worker's leases are expiring for
        others to take over, so it starts no new run (`lost`), lets the runs going finish, and
        the campaign ends with the reason (exit 2, resumable)."""
        failures = 0
        while True:
            await asyncio.sleep(self.interval)
            try:
                await asyncio.to_thread(self.store.heartbeat, self.holder)
                failures = 0
            except (SQLAlchemyError, InputError) as e:
                failures += 1
                reason = e.reason if isinstance(e, InputError) else db_reason(e)
                log.warning("lease heartbeat failed (%d in a row): %s", failures, reason)
                if failures >= HEARTBEAT_FAILURES_STOP:
                    self.lost = (f"the store refused this worker's lease heartbeats {failures} times in a row "
                                 f"({reason}); no new run was started")
                    return


def _stats(result: CampaignResult) -> str:
    others = f"  by others {result.by_others}" if result.by_others else ""
    return f"passed {result.passed}/{result.ran}  void {result.void}{others}  ${result.cost_usd:.2f}"
