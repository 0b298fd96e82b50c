"""assay.campaign.runner: one run in process, on a real Store (a temporary SQLite file) and tiny
native tasks. Most runs go without a sandbox (`unsafe_no_sandbox`), so they take milliseconds;
the few that start bubblewrap say so."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from assay.agent.base import AgentEnv, AgentOutcome
from assay.agent.spec import AgentFactory
from assay.campaign import runner
from assay.campaign.options import RunOptions
from assay.campaign.plan import AgentLike, PlannedRun, build_plan
from assay.campaign.runner import RunContext, effective_limits, execute_run, stage_readable
from assay.config import Config
from assay.env.bwrap import bwrap_available
from assay.grade.grader import GradeInput, GradeOutcome
from assay.record import AssistantEvent, ErrorEvent, HarnessEvent, RunRecord
from assay.store import Store
from assay.task.discover import discover
from assay.task.model import Task
from tests.fakes.agents import FakeFactory, finish, run_home
from tests.helpers import answer_task, write_task

UNSAFE = RunOptions(unsafe_no_sandbox=True)


@pytest.fixture
def home() -> Iterator[tuple[Path, Store]]:
    with run_home() as h:
        yield h


@pytest.fixture
def contract_task(tmp_path: Path) -> Task:
    """`answer_task`: the contract asks for answer.txt holding 42; its reference copies it in."""
    return discover([answer_task(tmp_path / "suite" / "answer")])[0]


def planned(task: Task, agent: AgentLike, options: RunOptions = UNSAFE) -> PlannedRun:
    plan = build_plan([task], [agent], options)
    assert len(plan.runs) == 1, plan.skipped
    return plan.runs[0]


async def run_one(task: Task, agent: AgentLike, store: Store, options: RunOptions = UNSAFE,
                  attempt: int = 1) -> RunRecord:
    return await execute_run(planned(task, agent, options), RunContext(store=store, options=options), attempt)


# --------------------------------------------------------------------------- effective_limits


@pytest.mark.parametrize(("budget", "options", "want"), [
    ({}, {}, (200, 150.0, 8.0)),
    ({"turns": 3, "minutes": 1.0, "usd": 0.5}, {}, (3, 1.0, 0.5)),
    ({"turns": 50, "minutes": 10.0, "usd": 2.0}, {"max_turns": 5, "max_minutes": 0.5, "max_usd": 0.1},
     (5, 0.5, 0.1)),
    ({"minutes": 1.0}, {"max_minutes": 30.0, "max_turns": 4}, (4, 1.0, 8.0)),
    ({"turns": 0}, {}, (0, 150.0, 8.0)),
])
def test_effective_limits_the_smaller_wins(contract_task: Task, budget: dict[str, float],
                                           options: dict[str, Any], want: tuple[float, float, float]) -> None:
    task = contract_task.model_copy(update={"budget": contract_task.budget.model_copy(update=budget)})
    opts = RunOptions(**options)
    lim = effective_limits(planned(task, FakeFactory(), opts), opts)
    assert (lim.max_turns, lim.max_minutes, lim.max_usd) == want


async def test_the_agent_gets_the_smaller_limits(tmp_path: Path, home: tuple[Path, Store]) -> None:
    task = discover([answer_task(tmp_path / "s" / "b", budget={"turns": 2, "minutes": 40.0})])[0]
    fake = FakeFactory("fake")
    opts = RunOptions(unsafe_no_sandbox=True, max_turns=10, max_minutes=20.0, max_usd=0.3)
    await run_one(task, fake, home[1], opts)
    lim = fake.agents[0].envs[0].limits
    assert (lim.max_turns, lim.max_minutes, lim.max_usd) == (2, 20.0, 0.3)


async def test_a_run_over_its_time_is_graded_as_it_stands(tmp_path: Path, home: tuple[Path, Store],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "GRACE_S", 0.0)
    task = discover([answer_task(tmp_path / "s" / "slow", budget={"minutes": 0.002})])[0]  # 0.12 s

    async def dawdle(env: AgentEnv) -> AgentOutcome:
        assert env.workspace is not None
        (env.workspace / "answer.txt").write_text("42\n")
        await asyncio.sleep(30)
        raise AssertionError("not reached")

    rec = await run_one(task, FakeFactory("slow", dawdle), home[1])
    assert (rec.status, rec.end_reason, rec.void_reason) == ("done", "max_time", None)
    assert rec.score == 1.0 and rec.passed is True  # the workspace as it stood passes the contract
    assert any(isinstance(e, HarnessEvent) and "time limit" in e.note for e in home[1].events(rec.run_id))


# --------------------------------------------------------------------------- execute_run


def _limits_note(e: object) -> bool:
    """The note every run starts with: the sandbox limits it ran under."""
    return isinstance(e, HarnessEvent) and e.note.startswith("sandbox limits:")


async def test_noop_on_a_contract_task_scores_zero_and_is_stored(contract_task: Task,
                                                                 home: tuple[Path, Store]) -> None:
    root, store = home
    rec = await run_one(contract_task, AgentFactory("noop", Config()), store)
    assert (rec.status, rec.end_reason, rec.score, rec.passed) == ("done", "finished", 0.0, False)
    assert rec.attempt == 1 and rec.sandbox == "none" and rec.kinds == ["contract"]
    assert rec.grade.contract is not None and rec.grade.contract.sat is False
    assert [(p.path, p.ok) for p in rec.grade.contract.predicates] == [("answer.txt", False)]
    assert rec.options == UNSAFE.result_options()
    assert rec.key.agent == "noop" and rec.key.task_id == "answer" and rec.key.level is None
    assert rec.run_dir is not None and Path(rec.run_dir).parent == root / "runs"
    assert (Path(rec.run_dir) / "workspace" / "README.md").read_text() == "hello\n"
    stored = store.get_run(rec.run_id)
    assert stored is not None and stored.model_dump() == rec.model_dump()
    events = store.events(rec.run_id)
    assert [(e.kind, getattr(e, "note", None)) for e in events if not _limits_note(e)] == [
        ("harness", "noop: submitted without doing anything")]
    assert store.finished_digests("default") == {rec.key.digest}


async def test_the_reference_passes(contract_task: Task, home: tuple[Path, Store]) -> None:
    rec = await run_one(contract_task, AgentFactory("reference", Config()), home[1])
    assert (rec.status, rec.end_reason, rec.score, rec.passed) == ("done", "finished", 1.0, True)
    assert rec.run_dir is not None and (Path(rec.run_dir) / "workspace" / "answer.txt").read_text() == "42\n"
    assert rec.grade.audit is not None and rec.grade.audit.pre_audit_score == 1.0 and rec.grade.audit.removed == 0
    notes = [e for e in home[1].events(rec.run_id) if isinstance(e, HarnessEvent) and not _limits_note(e)]
    assert notes and notes[0].note == "reference: copied artifacts" and notes[0].files == ["answer.txt"]


@pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")
async def test_a_sandboxed_run_is_recorded_as_bwrap(contract_task: Task, home: tuple[Path, Store]) -> None:
    """Starts a real sandbox."""
    rec = await run_one(contract_task, AgentFactory("reference", Config()), home[1], RunOptions())
    assert (rec.sandbox, rec.status, rec.score) == ("bwrap", "done", 1.0)


async def test_an_agent_that_raises_voids_its_run(contract_task: Task, home: tuple[Path, Store]) -> None:
    async def crash(env: AgentEnv) -> AgentOutcome:
        raise RuntimeError("agent bug 17")

    rec = await run_one(contract_task, FakeFactory("crashy", crash), home[1])
    assert (rec.status, rec.end_reason, rec.void_reason) == ("void", "harness_error", "RuntimeError: agent bug 17")
    assert rec.score is None and rec.passed is None and rec.grade.empty
    errors = [e for e in home[1].events(rec.run_id) if isinstance(e, ErrorEvent)]
    assert len(errors) == 1 and errors[0].source == "harness" and "agent bug 17" in errors[0].reason
    assert "Traceback" in errors[0].reason
    assert home[1].finished_digests("default") == set()  # a void run is not finished: resume re-runs it
    assert home[1].attempts("default") == {rec.key.digest: 1}


async def test_a_grader_that_crashes_voids_the_run(contract_task: Task, home: tuple[Path, Store],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(inp: GradeInput) -> GradeOutcome:
        raise ZeroDivisionError("grader bug")

    monkeypatch.setattr(runner, "grade_run", broken)
    rec = await run_one(contract_task, AgentFactory("reference", Config()), home[1])
    assert (rec.status, rec.end_reason, rec.void_reason) == ("void", "grader_error", "ZeroDivisionError: grader bug")
    assert rec.score is None and rec.passed is None and rec.grade.empty
    errors = [e for e in home[1].events(rec.run_id) if isinstance(e, ErrorEvent)]
    assert [(e.source, e.reason) for e in errors] == [("grader", "ZeroDivisionError: grader bug")]


CRASHING_CHECKS = "def grade(workspace, final_message):\n    raise KeyError('no such column')\n"


async def test_a_check_that_crashes_on_the_reference_too_makes_the_task_broken(
        tmp_path: Path, home: tuple[Path, Store]) -> None:
    """A task's own checks code raising whatever it is given: the run is not the agent's fault
    and not void; the task is broken (its grader fails on the task's own reference too)."""
    folder = write_task(tmp_path / "s" / "checked", {
        "prompt": "Write anything.", "grading": {"type": "automated", "checks": "checks.py"},
        "reference": {"artifacts": "reference"}},
        {"checks.py": CRASHING_CHECKS, "reference/answer.txt": "anything\n"})
    rec = await run_one(discover([folder])[0], FakeFactory("fake", finish("done")), home[1])
    assert (rec.status, rec.end_reason, rec.score) == ("broken", "finished", None)
    assert rec.void_reason is not None and rec.void_reason.startswith(
        "the task's grader fails on its reference deliverable (checks): check crashed")
    assert "no such column" in rec.void_reason
    assert [f.part for f in rec.grade.faults] == ["checks"]


async def test_without_a_reference_checks_crashing_on_an_untouched_workspace_make_the_task_broken(
        tmp_path: Path, home: tuple[Path, Store]) -> None:
    """The same checks on a task without a reference: they fail on an untouched workspace too
    (SPEC), so the task is broken, with the reason."""
    folder = write_task(tmp_path / "s" / "checked", {
        "prompt": "Write anything.", "grading": {"type": "automated", "checks": "checks.py"}},
        {"checks.py": CRASHING_CHECKS})
    rec = await run_one(discover([folder])[0], FakeFactory("fake", finish("done")), home[1])
    assert (rec.status, rec.end_reason, rec.score, rec.passed) == ("broken", "finished", None, None)
    assert rec.void_reason is not None and rec.void_reason.startswith(
        "the task's grader fails on an untouched workspace (checks): check crashed")


def writes(path: str, content: str) -> Any:
    """An act that writes `content` to `path` in its workspace, then finishes."""
    done = finish("done")

    async def act(env: AgentEnv) -> AgentOutcome:
        assert env.workspace is not None
        (env.workspace / path).write_text(content)
        return await done(env)

    return act


CHECKS_OF_A_NUMBER = (
    "import json, os\n"
    "def grade(workspace, final_message):\n"
    "    path = os.path.join(workspace, 'result.json')\n"
    "    if not os.path.exists(path):\n"
    "        return {'right': 0.0}\n"
    "    with open(path) as f:\n"
    "        return {'right': 1.0 if json.load(f)['total'] == 7 else 0.0}\n")


async def test_checks_crashing_only_on_what_the_agent_wrote_are_its_scored_failure(
        tmp_path: Path, home: tuple[Path, Store]) -> None:
    """Checks that work on an untouched workspace but crash on the agent's file: the task is
    not broken, the agent's run scores 0 with the fault, and a solver's run beside it scores."""
    folder = write_task(tmp_path / "s" / "checked", {
        "prompt": "Write {\"total\": 7} to result.json.", "grading": {"type": "automated", "checks": "checks.py"}},
        {"checks.py": CHECKS_OF_A_NUMBER})
    task = discover([folder])[0]
    bad = FakeFactory("bad", writes("result.json", "not json"))
    good = FakeFactory("good", writes("result.json", '{"total": 7}'))
    rec = await run_one(task, bad, home[1])
    assert (rec.status, rec.score, rec.passed, rec.void_reason) == ("done", 0.0, False, None)
    assert [f.part for f in rec.grade.faults] == ["checks"]
    solved = await run_one(task, good, home[1])
    assert (solved.status, solved.score, solved.grade.faults) == ("done", 1.0, [])


async def test_whether_a_task_is_broken_does_not_depend_on_the_run_asking(
        tmp_path: Path, home: tuple[Path, Store]) -> None:
    """Checks that fail on an untouched workspace but grade a right result: every run of the
    task is broken, the one that solved it as well as the one that crashed the checks, so no
    agent can have the task left out by failing loudly (round 5). Asked once: the verdict is
    kept in the store."""
    folder = write_task(tmp_path / "s" / "checked", {
        "prompt": "Write {\"total\": 7} to result.json.", "grading": {"type": "automated", "checks": "checks.py"}},
        {"checks.py": CHECKS_OF_A_NUMBER.replace("        return {'right': 0.0}\n", "        raise KeyError('x')\n")})
    task = discover([folder])[0]
    good = FakeFactory("good", writes("result.json", '{"total": 7}'))
    bad = FakeFactory("bad", writes("result.json", "not json"))
    solved = await run_one(task, good, home[1])
    crashed = await run_one(task, bad, home[1])
    assert solved.status == crashed.status == "broken"
    assert solved.void_reason == crashed.void_reason and solved.void_reason is not None
    assert "untouched workspace (checks)" in solved.void_reason
    assert solved.grade.faults == [] and [f.part for f in crashed.grade.faults] == ["checks"]
    kept = [k for k in _cache_keys(home[1]) if k.startswith("task-health:")]
    assert len(kept) == 1


async def test_a_task_graded_by_a_judge_alone_is_never_probed(tmp_path: Path, home: tuple[Path, Store]) -> None:
    """A rubric task whose items are task patterns: nothing of the task's own runs a program
    on the deliverable, so no probe is run and nothing is kept."""
    folder = write_task(tmp_path / "s" / "talk", {
        "prompt": "Say hello.", "rubric": {"items": [
            {"id": "hi", "text": "says hello", "weight": 1, "tag": "IF", "check": {"regex": "hello"}}]}})
    rec = await run_one(discover([folder])[0], FakeFactory("fake", finish("hello")), home[1])
    assert rec.status == "done" and rec.score == 1.0
    assert not [k for k in _cache_keys(home[1]) if k.startswith("task-health:")]


def _cache_keys(store: Store) -> list[str]:
    from sqlalchemy import select

    from assay.store.models import judge_cache_t
    with store.engine.connect() as conn:
        return [k for (k,) in conn.execute(select(judge_cache_t.c.key))]


async def test_surrogates_in_a_final_message_are_stored_escaped(tmp_path: Path, home: tuple[Path, Store]) -> None:
    folder = write_task(tmp_path / "s" / "talk", {
        "prompt": "Say hello.", "rubric": {"items": [
            {"id": "hi", "text": "says hello", "weight": 1, "tag": "IF", "check": {"regex": "hello"}}]}})
    rec = await run_one(discover([folder])[0], FakeFactory("fake", finish("hello \udcff\ud800!")), home[1])
    assert rec.status == "done" and rec.score == 1.0
    assert rec.final_message == "hello \\udcff\\ud800!"
    stored = home[1].get_run(rec.run_id)
    assert stored is not None and stored.final_message == "hello \\udcff\\ud800!"
    said = [e for e in home[1].events(rec.run_id) if isinstance(e, AssistantEvent)]
    assert [e.content for e in said] == ["hello \\udcff\\ud800!"]


async def test_surrogates_in_an_answer_written_to_answer_path(tmp_path: Path, home: tuple[Path, Store]) -> None:
    """A task without tools whose answer the harness writes to `answer_path`: a model's reply
    with a lone surrogate must be stored (escaped) and graded, not crash the campaign."""
    folder = write_task(tmp_path / "s" / "single", {
        "prompt": "Answer 42.", "execution": "single-step", "answer_path": "answer.txt",
        "contract": [{"path": "answer.txt", "predicate": "regex", "pattern": "^42"}]})
    rec = await run_one(discover([folder])[0], FakeFactory("fake", finish("42 \udcff")), home[1])
    assert rec.status == "done" and rec.end_reason == "finished"
    assert rec.final_message == "42 \\udcff"
    assert rec.score == 1.0
    stored = home[1].get_run(rec.run_id)
    assert stored is not None and stored.final_message == "42 \\udcff"


async def test_surrogates_in_a_final_message_reach_the_checks(tmp_path: Path, home: tuple[Path, Store]) -> None:
    """The task's checks get the final message (final_message.txt beside them): a lone
    surrogate in it must not void the run (starts a sandbox where bubblewrap runs)."""
    folder = write_task(tmp_path / "s" / "checked", {
        "prompt": "Say 42.", "grading": {"type": "automated", "checks": "checks.py"}},
        {"checks.py": "def grade(workspace, final_message):\n    return {'said_42': '42' in final_message}\n"})
    rec = await run_one(discover([folder])[0], FakeFactory("fake", finish("42 \udcff")), home[1])
    assert (rec.status, rec.end_reason, rec.void_reason) == ("done", "finished", None)
    assert rec.score == 1.0 and rec.final_message == "42 \\udcff"


async def test_a_workspace_that_cannot_be_built_voids_the_run(tmp_path: Path, home: tuple[Path, Store]) -> None:
    """`workspace_files` writing a file where the task's workspace/ has a folder: the copy
    refuses (PathError); the run must be void (harness_error), not an exception out of
    `execute_run` that takes the campaign down."""
    folder = write_task(tmp_path / "s" / "clash", {
        "prompt": "x", "workspace_files": [{"path": "notes", "content": "x"}],
        "contract": [{"path": "a.txt"}]}, {"workspace/notes/keep.txt": "k"})
    rec = await run_one(discover([folder])[0], FakeFactory("fake"), home[1])
    assert (rec.status, rec.end_reason) == ("void", "harness_error")
    assert rec.void_reason is not None and "notes is a directory" in rec.void_reason


async def test_the_attempt_number_is_recorded(contract_task: Task, home: tuple[Path, Store]) -> None:
    rec = await run_one(contract_task, AgentFactory("noop", Config()), home[1], attempt=3)
    assert rec.attempt == 3 and home[1].attempts("default") == {rec.key.digest: 3}


async def test_usage_and_cost_of_the_agent_are_recorded(contract_task: Task, home: tuple[Path, Store]) -> None:
    from assay.llm.messages import Usage

    act = finish("ok", cost_usd=0.125, usage=Usage(input_tokens=100, output_tokens=20, cache_read_tokens=5))
    rec = await run_one(contract_task, FakeFactory("fake", act), home[1])
    u = rec.usage
    assert (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens, u.cost_usd) == \
        (100, 20, 5, 0, 0.125)
    unknown = await run_one(contract_task, FakeFactory("other", finish("ok", cost_usd=None)), home[1])
    assert unknown.usage.cost_usd is None


@pytest.mark.parametrize("reason", ["max_turns", "max_usd", "max_time"])
async def test_an_agent_at_its_own_limit_is_graded(contract_task: Task, home: tuple[Path, Store],
                                                   reason: str) -> None:
    async def stop(env: AgentEnv) -> AgentOutcome:
        assert env.workspace is not None
        (env.workspace / "answer.txt").write_text("42\n")
        return AgentOutcome(end_reason=reason, final_message="ran out")  # type: ignore[arg-type]

    rec = await run_one(contract_task, FakeFactory("limited", stop), home[1])
    assert (rec.status, rec.end_reason, rec.score, rec.passed, rec.void_reason) == ("done", reason, 1.0, True, None)


async def test_a_key_void_three_times_is_stored_as_failed_until_retry_void(contract_task: Task,
                                                                          home: tuple[Path, Store]) -> None:
    """SPEC: a run key still void after 3 attempts counts as failed (score 0, `void_attempts`) in
    every number, so an agent cannot remove a task from its score by making the harness fail;
    `--retry-void` runs it again."""
    from assay.campaign.scheduler import pending_runs

    fixed_now = [False]

    async def crash(env: AgentEnv) -> AgentOutcome:
        if fixed_now[0]:
            return await AgentFactory("reference", Config()).for_task(env.task).run(env)
        raise RuntimeError("agent bug 17")

    store = home[1]
    agent = FakeFactory("crashy", crash)
    first = await run_one(contract_task, agent, store, attempt=1)
    second = await run_one(contract_task, agent, store, attempt=2)
    assert (first.status, second.status) == ("void", "void")
    third = await run_one(contract_task, agent, store, attempt=3)
    assert (third.status, third.end_reason, third.score, third.passed, third.void_attempts) == (
        "done", "harness_error", 0.0, False, 3)
    assert [(f.part, f.reason) for f in third.grade.faults] == [
        ("run", "void 3 times; the last: RuntimeError: agent bug 17")]
    assert third.grade.contract is not None and third.grade.contract.sat is False  # its kind's block counts it
    plan = build_plan([contract_task], [agent], UNSAFE)
    todo, finished = pending_runs(plan, RunContext(store=store, options=UNSAFE))
    assert (todo, finished) == ([], 1)  # not re-run on resume
    retry = UNSAFE.model_copy(update={"retry_void": True})
    todo, finished = pending_runs(plan, RunContext(store=store, options=retry))
    assert [(p.digest, attempt) for p, attempt in todo] == [(third.key.digest, 4)] and finished == 0
    from assay.report.build import build_report

    crashy = build_report("default", store.runs("default"))["agents"][0]
    assert (crashy["agent"], crashy["runs"], crashy["void"], crashy["pass_rate"]) == ("crashy", 1, 0, 0.0)
    fixed_now[0] = True
    fixed = await run_one(contract_task, agent, store, retry, attempt=4)
    assert (fixed.status, fixed.score, fixed.void_attempts) == ("done", 1.0, None)
    assert store.get_run(fixed.run_id) is not None  # the retry is stored, and replaces the failed one
    crashy = build_report("default", store.runs("default"))["agents"][0]
    assert (crashy["runs"], crashy["void"], crashy["pass_rate"]) == (1, 0, 1.0)


@pytest.mark.parametrize("reason", ["api_error", "harness_error"])
async def test_an_agent_ending_on_an_error_is_void_and_not_graded(contract_task: Task, home: tuple[Path, Store],
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  reason: str) -> None:
    async def never(inp: GradeInput) -> GradeOutcome:
        raise AssertionError("a void run is not graded")

    monkeypatch.setattr(runner, "grade_run", never)

    async def fail(env: AgentEnv) -> AgentOutcome:
        return AgentOutcome(end_reason=reason, error="HTTP 503 from the provider")  # type: ignore[arg-type]

    rec = await run_one(contract_task, FakeFactory("down", fail), home[1])
    assert (rec.status, rec.end_reason, rec.void_reason) == ("void", reason, "HTTP 503 from the provider")
    assert rec.score is None and rec.grade.empty


async def test_an_interrupted_run_is_not_stored_and_leaves_no_run_folder(contract_task: Task,
                                                                         home: tuple[Path, Store]) -> None:
    root, store = home
    started = asyncio.Event()

    async def wait_forever(env: AgentEnv) -> AgentOutcome:
        started.set()
        await asyncio.sleep(3600)
        raise AssertionError("not reached")

    task = asyncio.create_task(run_one(contract_task, FakeFactory("stuck", wait_forever), store))
    await asyncio.wait_for(started.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert store.all_attempts() == []  # resume runs it again from attempt 1
    assert list((root / "runs").iterdir()) == []


# --------------------------------------------------------------------------- stage_readable


def test_stage_readable_gives_every_uid_a_readable_copy(tmp_path: Path) -> None:
    src = tmp_path / "policy"
    (src / "lib" / "__pycache__").mkdir(parents=True)
    (src / "run.py").write_text("print(1)\n")
    (src / "lib" / "data.txt").write_text("d\n")
    (src / "lib" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    os.chmod(src / "run.py", 0o700)
    os.chmod(src / "lib" / "data.txt", 0o600)
    os.chmod(src / "lib", 0o700)
    os.symlink("data.txt", src / "lib" / "alias")
    dst = stage_readable(src, tmp_path / "run" / "binds" / "0")
    assert dst == tmp_path / "run" / "binds" / "0"

    def mode(p: Path) -> int:
        return stat.S_IMODE(os.lstat(p).st_mode)

    assert mode(dst) == 0o755 and mode(dst / "lib") == 0o755
    assert mode(dst / "run.py") == 0o755 and mode(dst / "lib" / "data.txt") == 0o644
    assert mode(dst.parent) == 0o711
    assert not (dst / "lib" / "__pycache__").exists()
    assert os.readlink(dst / "lib" / "alias") == "data.txt"
    assert mode(src / "lib" / "data.txt") == 0o600  # the original is untouched
