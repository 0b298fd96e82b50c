"""The asyncio scheduler: bounded concurrency, live progress, resume, clean Ctrl-C."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from assay.campaign.plan import Plan, PlannedRun
from assay.campaign.runner import RunContext, execute_run
from assay.record import RunRecord

Executor = Callable[[PlannedRun, RunContext, int], Awaitable[RunRecord]]
"""Runs one planned run (with its attempt number) to a stored record: `execute_run` in this
process, or a backend that sends it to another worker (`--backend ray`)."""


class CampaignResult:
    """What one `run_campaign` call did, with running totals for the progress line."""

    def __init__(self) -> None:
        self.records: list[RunRecord] = []
        self.already_done = 0
        self.interrupted = False
        self.void = 0
        self.passed = 0
        self.cost_usd = 0.0
        self.elapsed_s = 0.0

    def add(self, rec: RunRecord) -> None:
        """Keep running totals, so progress updates stay O(1) per run."""
        self.records.append(rec)
        self.void += rec.status == "void"
        self.passed += bool(rec.passed)
        self.cost_usd += (rec.usage.cost_usd or 0.0) + (rec.judge_usage.cost_usd or 0.0)


def pending_runs(plan: Plan, ctx: RunContext) -> tuple[list[tuple[PlannedRun, int]], int]:
    """Runs still to do (with their attempt number) and how many are already finished."""
    done = ctx.store.finished_digests(ctx.options.campaign)
    attempts = ctx.store.attempts(ctx.options.campaign)
    todo: list[tuple[PlannedRun, int]] = []
    finished = 0
    for p in plan.runs:
        d = p.key.digest
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
    sem = asyncio.Semaphore(max(1, ctx.options.concurrency))
    console = console or Console(stderr=True)
    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[stats]}"), TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
        console=console, transient=False, disable=not show_progress,
    )
    t0 = time.monotonic()

    async def one(p: PlannedRun, attempt: int, bar: TaskID) -> None:
        async with sem:
            rec = await execute(p, ctx, attempt)
        result.add(rec)
        if on_record is not None:
            on_record(rec)
        progress.update(bar, advance=1, stats=_stats(result))

    with progress:
        bar = progress.add_task(f"campaign {ctx.options.campaign}", total=len(todo), stats=_stats(result))
        tasks = [asyncio.create_task(one(p, a, bar)) for p, a in todo]
        try:
            if tasks:
                await asyncio.gather(*tasks)
        except asyncio.CancelledError:
            result.interrupted = True
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    result.elapsed_s = time.monotonic() - t0
    return result


def _stats(result: CampaignResult) -> str:
    return f"passed {result.passed}/{len(result.records)}  void {result.void}  ${result.cost_usd:.2f}"
