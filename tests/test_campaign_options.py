"""assay.campaign.options: every refusal names its flag; result_options holds what can change a result."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from assay.campaign.options import DEFAULT_AGENTS, RunOptions
from assay.config import DEFAULTS
from assay.errors import InputError


@pytest.mark.parametrize(("fields", "flag", "reason"), [
    ({"concurrency": 0}, "--concurrency", "must be at least 1"),
    ({"concurrency": -3}, "--concurrency", "must be at least 1"),
    ({"epochs": 0}, "--epochs", "must be at least 1"),
    ({"level": "L4"}, "--level", "unknown level 'L4' (L0, L1, L2, L3 or all)"),
    ({"level": "l3"}, "--level", "unknown level 'l3'"),
    ({"level": ""}, "--level", "unknown level ''"),
    ({"judge_mode": "pairwise"}, "--judge-mode", "'pairwise' is not batched or per-item"),
    ({"judge_repeats": 0}, "--judge-repeats", "must be at least 1"),
    ({"search": "google"}, "--search", "'google' is not off, native, local or brave"),
    ({"max_turns": 0}, "--max-turns", "must be a positive, finite number"),
    ({"max_minutes": -1.0}, "--max-minutes", "must be a positive, finite number"),
    ({"max_minutes": math.inf}, "--max-minutes", "must be a positive, finite number"),
    ({"max_minutes": math.nan}, "--max-minutes", "must be a positive, finite number"),
    ({"max_usd": 0.0}, "--max-usd", "must be a positive, finite number"),
    ({"max_usd": math.inf}, "--max-usd", "must be a positive, finite number"),
    ({"campaign": "   "}, "--campaign", "empty campaign name"),
    ({"routing": "telepathy"}, "--routing", "'telepathy' is not one of regex, lexical, embedding, llm"),
    ({"routing": "llm"}, "--router-model", "--routing llm needs --router-model SPEC"),
    ({"agents": ["noop", "reference", "noop"]}, "--agent", "agent 'noop' given twice"),
])
def test_check_refuses_with_the_flag_name(fields: dict[str, Any], flag: str, reason: str) -> None:
    with pytest.raises(InputError) as e:
        RunOptions(**fields).check()
    err = e.value
    assert err.field == flag and err.file is None
    assert err.reason.startswith(reason)
    assert err.message == f"<input>: field '{flag}': {err.reason}"


def test_check_reports_the_first_bad_flag_in_its_order() -> None:
    with pytest.raises(InputError) as e:
        RunOptions(concurrency=0, epochs=0, search="x").check()
    assert e.value.field == "--concurrency"


@pytest.mark.parametrize("fields", [
    {}, {"level": "all"}, {"level": "L0"}, {"level": "L3"}, {"judge_mode": "per-item"},
    {"search": "native"}, {"search": "local"}, {"routing": "lexical"},
    {"routing": "llm", "router_model": "openai/gpt-4.1-mini"}, {"max_minutes": 0.01, "max_usd": 1e-6},
    {"agents": []},
])
def test_check_accepts_good_values(fields: dict[str, Any]) -> None:
    RunOptions(**fields).check()  # no InputError


def test_defaults_come_from_config_defaults() -> None:
    o = RunOptions()
    assert (o.epochs, o.concurrency, o.campaign) == (DEFAULTS.epochs, DEFAULTS.concurrency, DEFAULTS.campaign)
    assert (o.max_turns, o.max_minutes, o.max_usd) == (DEFAULTS.max_turns, DEFAULTS.max_minutes, DEFAULTS.max_usd)
    assert o.agents == list(DEFAULT_AGENTS) == ["noop", "literal", "reference"]
    assert o.level is None and o.search == "off" and o.unsafe_no_sandbox is False


def test_unknown_fields_are_refused() -> None:
    with pytest.raises(ValueError, match="max_dollars"):
        RunOptions(max_dollars=3)  # type: ignore[call-arg]


def test_result_options_hold_what_can_change_a_result() -> None:
    o = RunOptions(judges=["openai/b", "openai/a"], judge_mode="per-item", judge_repeats=3, max_turns=9,
                   max_minutes=2.5, max_usd=0.25, search="local", unsafe_no_sandbox=True)
    got = o.result_options()
    assert set(got["judges"]) == {"openai/a", "openai/b"}
    assert {k: v for k, v in got.items() if k != "judges"} == {
        "judge_mode": "per-item", "judge_repeats": 3, "max_turns": 9, "max_minutes": 2.5, "max_usd": 0.25,
        "search": "local", "sandbox": False, "injection_screen": "on"}


def test_result_options_leave_out_what_cannot_change_a_result() -> None:
    base = RunOptions().result_options()
    other = RunOptions(paths=[Path("/x")], agents=["noop"], level="all", epochs=5, concurrency=16,
                       campaign="elsewhere", store="sqlite:///x.db", values=Path("v.md"), task_ids=["a"],
                       tasks_from=Path("m.yaml")).result_options()
    assert base == other
    assert set(base) == {"judges", "judge_mode", "judge_repeats", "max_turns", "max_minutes", "max_usd",
                         "search", "sandbox"}
    assert base["sandbox"] is True and base["judges"] == []


def test_gateway_routing_and_router_enter_only_when_set() -> None:
    assert not {"gateway_model", "routing", "router_model"} & set(RunOptions().result_options())
    got = RunOptions(gateway_model="openai/gpt-4.1-mini", routing="llm", router_model="openai/o3").result_options()
    assert (got["gateway_model"], got["routing"], got["router_model"]) == ("openai/gpt-4.1-mini", "llm", "openai/o3")


def test_the_order_of_judges_is_part_of_the_result_options() -> None:
    """The first judge is the contract judge and the audit's meta-judge (`Judge.ask_raw` asks
    `models[0]`), so `--judge A --judge B` and `--judge B --judge A` can grade differently and
    must not share run keys."""
    ab = RunOptions(judges=["openai/a", "openai/b"]).result_options()
    ba = RunOptions(judges=["openai/b", "openai/a"]).result_options()
    assert ab != ba
