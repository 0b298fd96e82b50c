"""assay.campaign.scheduler: resume, attempts of void runs, the counts, the concurrency bound."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import pytest
from rich.console import Console

from assay.agent.base import AgentEnv, AgentOutcome
from assay.agent.spec import AgentFactory
from assay.campaign.options import RunOptions
from assay.campaign.plan import AgentLike, Plan, build_plan
from assay.campaign.runner import RunContext
from assay.campaign.scheduler import CampaignResult, pending_runs, run_campaign
from assay.config import Config
from assay.llm.messages import Usage
from assay.record import RunRecord, UsageCost
from assay.store import Store
from assay.task.discover import discover
from assay.task.model import Task
from tests.fakes.agents import ConcurrencyProbe, FakeFactory, finish, run_home
from tests.helpers import answer_task


@pytest.fixture
def home() -> Iterator[tuple[Path, Store]]:
    with run_home() as h:
        yield h


@pytest.fixture
def tasks(tmp_path: Path) -> list[Task]:
    for name in ("t1", "t2", "t3"):
        answer_task(tmp_path / "suite" / name)
    return discover([tmp_path / "suite"])


def ctx_for(store: Store, **options: Any) -> RunContext:
    return RunContext(store=store, options=RunOptions(unsafe_no_sandbox=True, **options))


def plan_for(tasks: list[Task], agents: Sequence[AgentLike], ctx: RunContext) -> Plan:
    return build_plan(tasks, agents, ctx.options)


async def campaign(plan: Plan, ctx: RunContext, seen: list[RunRecord] | None = None) -> CampaignResult:
    quiet = Console(file=io.StringIO())
    return await run_campaign(plan, ctx, console=quiet, show_progress=False,
                              on_record=seen.append if seen is not None else None)


class FlakyOnce:
    """Raises on its first call for each task id, then writes the answer."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    async def act(self, env: AgentEnv) -> AgentOutcome:
        n = self.calls[env.task.id] = self.calls.get(env.task.id, 0) + 1
        if n == 1:
            raise ConnectionError("flaky tool")
        assert env.workspace is not None
        (env.workspace / "answer.txt").write_text("42\n")
        return AgentOutcome(end_reason="finished", final_message="done")


# --------------------------------------------------------------------------- pending_runs


async def test_pending_runs_on_an_empty_store(tasks: list[Task], home: tuple[Path, Store]) -> None:
    ctx = ctx_for(home[1], epochs=2)
    plan = plan_for(tasks, [FakeFactory()], ctx)
    todo, finished = pending_runs(plan, ctx)
    assert finished == 0 and [a for _, a in todo] == [1] * 6
    assert [p.key.digest for p, _ in todo] == [p.key.digest for p in plan.runs]


async def test_resume_skips_finished_keys_and_reruns_void_ones_with_the_next_attempt(
        tasks: list[Task], home: tuple[Path, Store]) -> None:
    store = home[1]
    ctx = ctx_for(store)
    flaky = FlakyOnce()
    steady = FakeFactory("steady", finish("ok"))
    plan = plan_for(tasks[:2], [steady, FakeFactory("flaky", flaky.act)], ctx)
    first = await campaign(plan, ctx)
    assert (first.ran, first.already_done, first.void) == (4, 0, 2)
    todo, finished = pending_runs(plan, ctx)
    assert finished == 2
    assert sorted((p.key.agent, p.key.task_id, a) for p, a in todo) == [("flaky", "t1", 2), ("flaky", "t2", 2)]

    seen: list[RunRecord] = []
    second = await campaign(plan, ctx, seen)
    assert (second.ran, second.already_done, second.void) == (2, 2, 0)
    assert sorted((r.key.agent, r.attempt, r.status) for r in seen) == [("flaky", 2, "done")] * 2
    assert len(steady.agents) == 2  # the finished runs were not started again

    third = await campaign(plan, ctx)
    assert (third.ran, third.already_done) == (0, 4)
    latest = {(r.key.agent, r.key.task_id): (r.attempt, r.status, r.score) for r in store.runs("default")}
    assert latest[("flaky", "t1")] == (2, "done", 1.0) and latest[("steady", "t1")] == (1, "done", 0.0)
    assert len(store.all_attempts("default")) == 6


async def test_a_changed_option_is_not_resumed(tasks: list[Task], home: tuple[Path, Store]) -> None:
    store = home[1]
    ctx = ctx_for(store)
    agents = [AgentFactory("noop", Config())]
    await campaign(plan_for(tasks, agents, ctx), ctx)
    changed = ctx_for(store, max_turns=5)
    todo, finished = pending_runs(plan_for(tasks, agents, changed), changed)
    assert finished == 0 and len(todo) == 3
    other = ctx_for(store, campaign="another")
    todo, finished = pending_runs(plan_for(tasks, agents, other), other)
    assert finished == 0 and len(todo) == 3


# --------------------------------------------------------------------------- CampaignResult


async def test_campaign_result_counts(tasks: list[Task], home: tuple[Path, Store]) -> None:
    store = home[1]
    ctx = ctx_for(store)

    async def crash(env: AgentEnv) -> AgentOutcome:
        raise ValueError("nope")

    agents: list[AgentLike] = [
        AgentFactory("reference", Config()),                            # 3 passed, cost 0
        FakeFactory("paid", finish("x", cost_usd=0.25, usage=Usage(input_tokens=10))),  # 3 failed, 0.75
        FakeFactory("unpriced", finish("x", cost_usd=None)),            # 3 failed, cost unknown
        FakeFactory("crash", crash),                                    # 3 void
    ]
    seen: list[RunRecord] = []
    result = await campaign(plan_for(tasks, agents, ctx), ctx, seen)
    assert result.ran == 12 and result.already_done == 0 and not result.interrupted
    assert (result.passed, result.void) == (3, 3)
    assert result.cost_usd == pytest.approx(0.75)
    assert result.elapsed_s > 0
    assert len(seen) == 12 and len({r.run_id for r in seen}) == 12
    assert {r.run_id for r in store.all_attempts("default")} == {r.run_id for r in seen}


def test_campaign_result_add_counts_judge_cost_and_unknown_costs_as_zero() -> None:
    from assay.record import RunKey

    key = RunKey(campaign="c", task_id="t", task_hash="h", agent="a", level=None, epoch=1, options_hash="o")

    def rec(status: Literal["done", "void"], passed: bool | None, cost: float | None,
            judge: float | None) -> RunRecord:
        return RunRecord(run_id=status + str(cost), key=key, kinds=["rubric"], harness_version="x", status=status,
                         end_reason="finished" if status == "done" else "api_error", passed=passed,
                         usage=UsageCost(cost_usd=cost), judge_usage=UsageCost(cost_usd=judge))

    r = CampaignResult()
    r.add(rec("done", True, 0.5, 0.25))
    r.add(rec("done", False, None, 0.125))
    r.add(rec("void", None, 1.0, None))
    assert (r.ran, r.passed, r.void) == (3, 1, 1)
    assert r.cost_usd == pytest.approx(1.875)


async def test_an_interrupted_campaign_keeps_what_finished(tmp_path: Path, home: tuple[Path, Store]) -> None:
    store = home[1]
    task = discover([answer_task(tmp_path / "s" / "one")])[0]
    ctx = ctx_for(store, concurrency=1, epochs=3)
    calls = 0

    async def first_fast(env: AgentEnv) -> AgentOutcome:
        nonlocal calls
        calls += 1
        if calls > 1:
            await asyncio.sleep(3600)
        return AgentOutcome(end_reason="finished")

    plan = plan_for([task], [FakeFactory("f", first_fast)], ctx)
    seen: list[RunRecord] = []
    running = asyncio.create_task(campaign(plan, ctx, seen))
    for _ in range(500):
        if seen and calls == 2:
            break
        await asyncio.sleep(0.01)
    running.cancel()
    result = await asyncio.wait_for(running, 10)
    assert result.interrupted is True and result.ran == 1
    assert [r.key.epoch for r in store.all_attempts("default")] == [1]
    todo, finished = pending_runs(plan, ctx)
    assert finished == 1 and sorted((p.epoch, a) for p, a in todo) == [(2, 1), (3, 1)]


# --------------------------------------------------------------------------- concurrency


@pytest.mark.parametrize("concurrency", [1, 2, 3])
async def test_the_concurrency_bound_is_respected(tmp_path: Path, home: tuple[Path, Store],
                                                  concurrency: int) -> None:
    task = discover([answer_task(tmp_path / "s" / "one")])[0]
    probe = ConcurrencyProbe(concurrency)
    ctx = ctx_for(home[1], concurrency=concurrency, epochs=6)
    result = await campaign(plan_for([task], [FakeFactory("probe", probe.act)], ctx), ctx)
    assert result.ran == 6 and probe.calls == 6
    assert probe.peak == concurrency  # never more, and the bound is actually used


async def test_an_empty_plan_does_nothing(home: tuple[Path, Store]) -> None:
    ctx = ctx_for(home[1])
    result = await campaign(Plan(runs=[], skipped=[]), ctx)
    assert (result.ran, result.already_done, result.void, result.cost_usd) == (0, 0, 0, 0.0)
