"""assay.campaign.plan: levels per task and --level, skips with their reasons, epochs, run keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from assay.agent.spec import AgentFactory
from assay.campaign.options import RunOptions
from assay.campaign.plan import Plan, build_plan, levels_for, options_hash
from assay.config import Config, ModelAlias
from assay.errors import InputError
from assay.task.discover import discover
from assay.task.model import Task
from tests.fakes.agents import FakeFactory
from tests.helpers import answer_task, write_task

BRIEFS = {"L0": "Do it (no help).", "L1": "Do it, hint one.", "L3": "Do it: write 42 into answer.txt."}


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    """Three tasks: `plain` (no levels, a reference), `leveled` (L0, L1, L3, a reference),
    `bare` (no levels, no reference policy)."""
    root = tmp_path / "suite"
    answer_task(root / "plain")
    answer_task(root / "leveled", prompt=None, briefs=BRIEFS)
    write_task(root / "bare", {"prompt": "Write 7 into a.txt.",
                               "contract": [{"path": "a.txt", "predicate": "regex", "pattern": "^7$"}]})
    return root


@pytest.fixture
def tasks(suite: Path) -> dict[str, Task]:
    return {t.id: t for t in discover([suite])}


def keys(plan: Plan) -> list[tuple[str, str, str | None, int]]:
    return [(p.task.id, p.agent.spec, p.level, p.epoch) for p in plan.runs]


# --------------------------------------------------------------------------- levels_for


def test_levels_for_a_task_without_levels_is_one_null_level_whatever_level_says(tasks: dict[str, Task]) -> None:
    for level in (None, "all", "L0", "L2"):
        assert levels_for(tasks["plain"], level) == ([None], None)


def test_levels_for_a_leveled_task(tasks: dict[str, Task]) -> None:
    t = tasks["leveled"]
    assert t.levels == ["L0", "L1", "L3"]
    assert levels_for(t, None) == (["L3"], None)  # the default is L3
    assert levels_for(t, "all") == (["L0", "L1", "L3"], None)
    assert levels_for(t, "L1") == (["L1"], None)
    assert levels_for(t, "L2") == ([], "no L2 brief")


def test_levels_for_default_without_l3_takes_the_highest_level() -> None:
    t = Task(id="x", briefs={"L0": "a", "L1": "b", "L2": "c"})
    assert levels_for(t, None) == (["L2"], None)


# --------------------------------------------------------------------------- build_plan


def test_build_plan_levels_and_epochs(tasks: dict[str, Task]) -> None:
    fake = FakeFactory("fake")
    chosen = [tasks["plain"], tasks["leveled"]]
    plan = build_plan(chosen, [fake], RunOptions(epochs=2))
    assert keys(plan) == [("plain", "fake", None, 1), ("plain", "fake", None, 2),
                          ("leveled", "fake", "L3", 1), ("leveled", "fake", "L3", 2)]
    assert plan.skipped == []
    plan = build_plan(chosen, [fake], RunOptions(level="all"))
    assert keys(plan) == [("plain", "fake", None, 1), ("leveled", "fake", "L0", 1),
                          ("leveled", "fake", "L1", 1), ("leveled", "fake", "L3", 1)]
    for p in plan.runs:
        assert (p.key.task_id, p.key.agent, p.key.level, p.key.epoch) == (p.task.id, "fake", p.level, p.epoch)
        assert p.key.campaign == "default" and p.key.task_hash == p.task.content_hash


def test_build_plan_skips_a_level_the_task_has_no_brief_for(tasks: dict[str, Task]) -> None:
    plan = build_plan([tasks["plain"], tasks["leveled"]], [FakeFactory("fake")], RunOptions(level="L2"))
    assert keys(plan) == [("plain", "fake", None, 1)]  # a task without levels still runs once
    assert plan.skipped == [("leveled", "fake", "no L2 brief")]


def test_build_plan_skips_tasks_without_the_policy(tasks: dict[str, Task]) -> None:
    agents = [AgentFactory("noop", Config()), AgentFactory("reference", Config()),
              AgentFactory("literal", Config())]
    plan = build_plan([tasks["plain"], tasks["bare"]], agents, RunOptions())
    assert keys(plan) == [("plain", "noop", None, 1), ("bare", "noop", None, 1), ("plain", "reference", None, 1)]
    assert plan.skipped == [("bare", "reference", "task bare has no reference policy"),
                            ("plain", "literal", "task plain has no literal policy"),
                            ("bare", "literal", "task bare has no literal policy")]


def test_build_plan_skips_unsupported_requirements(tmp_path: Path) -> None:
    answer_task(tmp_path / "s" / "gpu", requirements=["python3", "gpu", "cuda"])
    answer_task(tmp_path / "s" / "py", requirements=["python3", "sqlite3"])
    plan = build_plan(discover([tmp_path / "s"]), [FakeFactory("fake")], RunOptions())
    assert keys(plan) == [("py", "fake", None, 1)]
    assert plan.skipped == [("gpu", "fake", "needs gpu, cuda, which this machine cannot provide")]


def test_build_plan_the_agents_own_skip_reason_comes_first(tasks: dict[str, Task]) -> None:
    fake = FakeFactory("picky", skip=lambda t: f"{t.id}: not my kind of task")
    plan = build_plan([tasks["leveled"]], [fake], RunOptions(level="L2"))
    assert plan.runs == [] and plan.skipped == [("leveled", "picky", "leveled: not my kind of task")]


def test_build_plan_agents_on_different_tasks(tasks: dict[str, Task]) -> None:
    only_plain = FakeFactory("a", skip=lambda t: None if t.id == "plain" else "not plain")
    only_bare = FakeFactory("b", skip=lambda t: None if t.id == "bare" else "not bare")
    plan = build_plan([tasks["plain"], tasks["bare"]], [only_plain, only_bare], RunOptions())
    assert keys(plan) == [("plain", "a", None, 1), ("bare", "b", None, 1)]
    assert plan.skipped == [("bare", "a", "not plain"), ("plain", "b", "not bare")]
    assert plan.runs[0].agent is only_plain and plan.runs[1].agent is only_bare


def test_build_plan_checks_the_options_first(tasks: dict[str, Task]) -> None:
    with pytest.raises(InputError) as e:
        build_plan([tasks["plain"]], [FakeFactory()], RunOptions(epochs=0))
    assert e.value.field == "--epochs"


# --------------------------------------------------------------------------- run keys


def digests(plan: Plan) -> list[str]:
    return [p.key.digest for p in plan.runs]


def test_run_keys_are_stable_for_the_same_inputs(suite: Path) -> None:
    one = build_plan(discover([suite]), [AgentFactory("noop", Config())], RunOptions(epochs=2, level="all"))
    two = build_plan(discover([suite]), [AgentFactory("noop", Config())], RunOptions(epochs=2, level="all"))
    assert digests(one) == digests(two)
    assert len(set(digests(one))) == len(one.runs) == 10  # plain x2, leveled 3 levels x2, bare x2


@pytest.mark.parametrize("change", [
    {"max_turns": 7}, {"max_minutes": 3.0}, {"max_usd": 0.5}, {"judges": ["openai/gpt-4.1"]},
    {"judge_mode": "per-item"}, {"judge_repeats": 3}, {"search": "local"}, {"unsafe_no_sandbox": True},
    {"gateway_model": "openai/gpt-4.1-mini"}, {"routing": "lexical"}, {"campaign": "other"},
])
def test_a_changed_option_gives_new_run_keys(tasks: dict[str, Task], change: dict[str, Any]) -> None:
    agent = FakeFactory("fake")
    before = build_plan([tasks["plain"]], [agent], RunOptions())
    after = build_plan([tasks["plain"]], [agent], RunOptions(**change))
    assert before.runs[0].key.digest != after.runs[0].key.digest


@pytest.mark.parametrize("change", [
    {"concurrency": 9}, {"store": "sqlite:///elsewhere.db"}, {"task_ids": ["plain"]},
    {"paths": [Path("/somewhere")]}, {"agents": ["fake", "noop"]}, {"epochs": 3},
])
def test_options_that_cannot_change_a_result_keep_the_run_keys(tasks: dict[str, Task],
                                                                change: dict[str, Any]) -> None:
    agent = FakeFactory("fake")
    before = build_plan([tasks["plain"]], [agent], RunOptions())
    after = build_plan([tasks["plain"]], [agent], RunOptions(**change))
    assert before.runs[0].key.digest == after.runs[0].key.digest


def test_the_agents_options_are_in_the_options_hash() -> None:
    opts = RunOptions()
    a = FakeFactory("m", options={"model": "openai/x", "temperature": 0.0})
    b = FakeFactory("m", options={"model": "openai/x", "temperature": 0.7})
    assert options_hash(opts, a) != options_hash(opts, b)
    assert options_hash(opts, a) == options_hash(opts, FakeFactory("m", options={"temperature": 0.0,
                                                                                 "model": "openai/x"}))


def test_a_model_alias_changed_behind_its_name_gives_new_keys(tasks: dict[str, Task]) -> None:
    def factory(temperature: float) -> AgentFactory:
        alias = ModelAlias(provider="openai", model="m", base_url="http://127.0.0.1:9/v1", temperature=temperature)
        return AgentFactory("local", Config(models={"local": alias}))

    cold = build_plan([tasks["plain"]], [factory(0.0)], RunOptions())
    warm = build_plan([tasks["plain"]], [factory(1.0)], RunOptions())
    assert cold.runs[0].key.agent == warm.runs[0].key.agent == "local"
    assert cold.runs[0].key.digest != warm.runs[0].key.digest


def test_a_changed_script_gives_new_keys(tasks: dict[str, Task], tmp_path: Path) -> None:
    script = tmp_path / "s.jsonl"
    script.write_text('{"say": "one"}\n')
    spec = f"script:{script}"
    first = build_plan([tasks["plain"]], [AgentFactory(spec, Config())], RunOptions())
    script.write_text('{"say": "two"}\n')
    second = build_plan([tasks["plain"]], [AgentFactory(spec, Config())], RunOptions())
    assert first.runs[0].key.digest != second.runs[0].key.digest


def test_a_changed_task_gives_a_new_key(tmp_path: Path) -> None:
    folder = answer_task(tmp_path / "s" / "t", want="42")
    before = build_plan(discover([folder]), [FakeFactory()], RunOptions())
    (folder / "workspace" / "README.md").write_text("changed\n")
    after = build_plan(discover([folder]), [FakeFactory()], RunOptions())
    assert before.runs[0].key.task_hash != after.runs[0].key.task_hash
    assert before.runs[0].key.digest != after.runs[0].key.digest
