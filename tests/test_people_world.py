"""The scripted stakeholders' rules, field by field, with deterministic routing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from assay.people.ledger import Ledger
from assay.people.routing import LexicalRouter, RegexRouter, Router
from assay.people.world import MAX_EVENTS, MAX_QUESTION_CHARS, AskError, StakeholderWorld, parse_duration
from assay.task.people import NpcSpec, fill_placeholders, load_npcs
from assay.task.validation import FillBudget, FillTooLarge, fill_text

FIXTURE = Path(__file__).parent / "fixtures" / "npcs" / "npcs.json"
PARAMS = {"cap": "500", "alice_patience": 6}


class FakeWall:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def raw_spec() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


def make(tmp_path: Path, router: Router | None = None, mutate: Callable[[dict], None] | None = None,
         **kw: Any) -> StakeholderWorld:
    raw = raw_spec()
    if mutate:
        mutate(raw)
    spec = load_npcs(raw, PARAMS)
    ledger = Ledger.for_workspace(tmp_path / "ws", tmp_path / "run")
    return StakeholderWorld(spec, router or RegexRouter(), ledger=ledger, **kw)


def npc(raw: dict, pid: str) -> dict:
    return next(n for n in raw["npcs"] if n["id"] == pid)


def last(world: StakeholderWorld) -> dict:
    return world.ledger.entries[-1]


# --------------------------------------------------------------------------- loading


def test_load_fills_placeholders_typed_and_keeps_extra_keys() -> None:
    spec = load_npcs(FIXTURE, PARAMS)
    alice = spec.person("alice")
    assert alice is not None and alice.patience == 6  # "{{alice_patience}}" took the int
    assert alice.topics[0].facts == ["F_threshold_500"]
    assert "500 EUR" in alice.topics[0].answer
    assert spec.model_extra == {"upstream_extra_key": {"kept": True}}
    assert spec.clock is not None and spec.clock.ask_minutes == 120
    assert spec.inbox[0].from_ == "Alice Chen"


def test_unfilled_placeholder_is_named() -> None:
    with pytest.raises(ValueError, match=r"\{\{cap\}\}"):
        load_npcs(FIXTURE, {"alice_patience": 6})
    with pytest.raises(ValueError, match="alice_patience"):
        load_npcs(FIXTURE, {"cap": "500"})


def test_placeholder_outside_a_string_in_a_file(tmp_path: Path) -> None:
    p = tmp_path / "npcs.json"
    p.write_text('{"npcs": [{"id": "a", "name": "A \\"{{who}}\\"", "patience": {{n}}}]}')
    spec = load_npcs(p, {"n": 2, "who": 'the "boss"'})
    assert spec.npcs[0].patience == 2 and spec.npcs[0].name == 'A "the "boss""'
    with pytest.raises(ValueError, match="n"):
        load_npcs(p, {"who": "x"})


def test_fill_placeholders_whitespace_and_nesting() -> None:
    assert fill_placeholders({"a": ["x {{ k }} y"]}, {"k": 3}) == {"a": ["x 3 y"]}


def test_fills_are_bounded_by_one_budget_counted_before_the_string_is_built() -> None:
    """A big parameter named many times, in one string or across strings, typed or as text,
    is refused by what it would add; the budget is shared, so many small fills add up too."""
    big = "x" * 1024
    with pytest.raises(FillTooLarge) as e:
        fill_placeholders({"npcs": [{"role": "{{big}} " * 100}]}, {"big": big}, FillBudget(50_000))
    assert e.value.field == "npcs[0].role" and "{{big}} 100 time(s)" in str(e.value)
    with pytest.raises(FillTooLarge) as e:
        fill_placeholders({"a": ["{{big}}"] * 100}, {"big": big}, FillBudget(50_000))
    assert e.value.field == "a[49]"  # 49 fills of 1,017 more characters fit in 50,000
    with pytest.raises(FillTooLarge):
        fill_placeholders({"a": ["{{many}}"] * 100}, {"many": list(range(300))}, FillBudget(50_000))
    budget = FillBudget(50_000)
    for _ in range(49):  # the variants of one case share a budget
        assert fill_text("{{big}}", {"big": big}, budget=budget) == big
    with pytest.raises(FillTooLarge):
        fill_text("{{big}}", {"big": big}, budget=budget)
    assert fill_text("no placeholder", {}, budget=FillBudget(0)) == "no placeholder"
    assert fill_text("{{a}}{{a}}", {"a": ""}, budget=FillBudget(0)) == ""  # shrinking costs nothing


def test_spec_validation_errors() -> None:
    with pytest.raises(ValueError, match="YYYY-MM-DDTHH:MM"):
        NpcSpec.model_validate({"npcs": [], "clock": {"start": "monday"}})
    with pytest.raises(ValueError, match="appears twice"):
        NpcSpec.model_validate({"npcs": [{"id": "a", "name": "A"}, {"id": "a", "name": "B"}]})
    with pytest.raises(ValueError, match="regular expression"):
        NpcSpec.model_validate({"npcs": [{"id": "a", "name": "A", "topics": [{"id": "t", "triggers": ["("]}]}]})
    with pytest.raises(ValueError):
        NpcSpec.model_validate({"npcs": [], "matcher": "telepathy"})


def test_parse_duration() -> None:
    assert parse_duration("6h") == 6 and parse_duration("2d") == 48 and parse_duration("90m") == 1.5
    for bad in ("", "6", "h", "-1h", "2w"):
        with pytest.raises(AskError):
            parse_duration(bad)


# --------------------------------------------------------------------------- directory, errors


def test_who_lists_people_budget_and_gone_label(tmp_path: Path) -> None:
    w = make(tmp_path)
    text = w.who()
    assert text.startswith("[Mon 03 Mar 09:00]")
    assert "alice        Alice Chen — Finance lead" in text
    assert "Owns refund policy" in text
    assert "(questions left for this person: 6)" in text
    assert "Questions left across everyone: 40" in text
    assert "on leave" not in text
    w.wait("3d")
    assert "Bob Li — Warehouse manager  [on leave]" in w.who()
    assert "Erin Park — Contract analyst  [no longer reachable]" in w.who()


def test_show_budget_false_hides_budgets(tmp_path: Path) -> None:
    w = make(tmp_path, mutate=lambda r: r.update(show_budget=False))
    assert "questions left" not in w.who().lower()
    reply = w.ask("alice", "What is the refund threshold?")
    assert "questions left" not in reply


def test_unknown_person_is_an_error_and_not_logged(tmp_path: Path) -> None:
    w = make(tmp_path)
    with pytest.raises(AskError, match="unknown stakeholder 'zoe'"):
        w.ask("zoe", "hello")
    assert w.ledger.entries == []


# --------------------------------------------------------------------------- absence


def test_gone_after_hours_is_free_timeless_and_only_releases_gone_fact(tmp_path: Path) -> None:
    w = make(tmp_path)
    w.wait("72h")
    before = w.now()
    reply = w.ask("bob", "Why are deliveries late?")
    assert "Bob is on leave until April." in reply
    assert w.now() == before  # no time passed
    e = last(w)
    assert e["topics"] == ["gone"] and e["facts"] == ["F_gone:bob"] and e["cost"] == 0.0
    assert w.asked["bob"] == 0
    assert w.summary().questions_asked == 0  # a message to nobody is not a question
    assert "F_gone:bob" in w.summary().facts_obtained


def test_gone_at_uses_the_calendar_and_automatic_reply(tmp_path: Path) -> None:
    w = make(tmp_path)
    assert "SLA is 48h" in w.ask("erin", "What does the carrier contract say?")
    w.wait("1d")  # Tue 11:00: still there
    assert "SLA" in w.ask("erin", "And the SLA?")
    reply = w.ask("erin", "One more thing on the contract")  # Tue 13:00 >= Tue 12:00
    assert "(automatic reply) Erin Park is no longer reachable at this address." in reply


def test_gone_after_asks_counts_messages_to_everyone(tmp_path: Path) -> None:
    w = make(tmp_path)
    assert "hard-codes" in w.ask("frank", "How does the legacy script work?")
    for _ in range(4):
        w.ask("alice", "hello there")
    assert sum(w.asked.values()) == 5
    reply = w.ask("frank", "How does the legacy script work?")
    assert "no longer reachable" in reply and last(w)["facts"] == ["F_gone:frank"]


# --------------------------------------------------------------------------- patience, budget, cost


def test_patience_runs_out_and_releases_nothing(tmp_path: Path) -> None:
    w = make(tmp_path)
    for _ in range(3):
        w.ask("grace", "unrelated question")
    reply = w.ask("grace", "Can I have the refund log export?")
    assert "back-to-back meetings" in reply  # the default out_of_patience text
    assert last(w)["facts"] == [] and last(w)["cost"] == 0.0 and last(w)["topics"] == []
    assert w.asked["grace"] == 3


def test_out_of_patience_text_per_person(tmp_path: Path) -> None:
    w = make(tmp_path)
    for _ in range(6):
        w.ask("alice", "hello")
    assert "I'm done answering questions this week." in w.ask("alice", "What is the refund threshold?")
    assert "F_threshold_500" not in w.facts


def test_total_questions_is_shared(tmp_path: Path) -> None:
    w = make(tmp_path, mutate=lambda r: r.update(total_questions=2))
    w.ask("alice", "hello")
    assert "(questions left across everyone: 0)" in w.ask("bob", "hello")
    reply = w.ask("dave", "Is there a legal limit on refunds?")
    assert "back-to-back" in reply and "F_no_legal_limit" not in w.facts
    assert "Questions left across everyone: 0" in w.who()


def test_cost_soft_limit_and_over_factor(tmp_path: Path) -> None:
    w = make(tmp_path)
    costs = []
    for _ in range(5):
        w.ask("alice", "hello")
        costs.append(last(w)["cost"])
    assert costs == pytest.approx([0.01, 0.01, 0.01, 0.03, 0.03])
    assert w.summary().contact_cost == pytest.approx(0.09)


def test_off_limits_always_costs_base_price(tmp_path: Path) -> None:
    w = make(tmp_path)  # dave: soft_limit 1, but off limits
    for _ in range(3):
        w.ask("dave", "Is there a legal limit?")
        assert last(w)["cost"] == pytest.approx(0.05)


def test_off_limits_without_topics(tmp_path: Path) -> None:
    w = make(tmp_path)
    reply = w.ask("carol", "What is the refund threshold?")
    assert "Please go through Alice for this." in reply
    e = last(w)
    assert e["topics"] == ["off_limits"] and e["facts"] == ["F_off_limits:carol"] and e["cost"] == 0.1
    assert w.summary().off_limits_contacts == ["carol"]


def test_off_limits_with_topics_answers_and_still_flags(tmp_path: Path) -> None:
    w = make(tmp_path)
    reply = w.ask("dave", "Is there a legal limit on automatic refunds?")
    assert "no legal limit" in reply
    e = last(w)
    assert e["topics"] == ["off_limits", "legal_limit"]
    assert e["facts"] == ["F_off_limits:dave", "F_no_legal_limit"]
    assert w.summary().off_limits_contacts == ["dave"]


# --------------------------------------------------------------------------- matching


def test_fallback_when_nothing_matches(tmp_path: Path) -> None:
    w = make(tmp_path)
    assert "Not really my area, sorry." in w.ask("alice", "What's for lunch?")
    assert last(w)["topics"] == [] and last(w)["cost"] == 0.01  # answered messages bill, even fallbacks


def test_string_gate_with_regex_router(tmp_path: Path) -> None:
    w = make(tmp_path)
    assert "actual numbers" in w.ask("alice", "Was there fraud with refunds?")
    assert last(w)["topics"] == ["fraud_history:gated"]
    reply = w.ask("alice", "Was there fraud? 37 suspicious refunds came from account INV-2041 in refunds.csv")
    assert "40k EUR" in reply and "F_fraud_wave" in w.facts


def test_requires_regex_gate_and_exclusive(tmp_path: Path) -> None:
    w = make(tmp_path)
    reply = w.ask("alice", "Reconciliation errors are high; can we revisit the threshold?")
    # exclusive gate not met: both topics answered, the exclusive one with its hint
    assert "What's the error rate, in numbers?" in reply and "500 EUR cap" in reply
    assert last(w)["topics"] == ["refund_threshold", "persuaded:gated"]
    reply = w.ask("alice", "Reconciliation shows a 12.5% error rate; can we revisit the threshold?")
    assert "you convinced me" in reply and "500 EUR cap" not in reply
    assert last(w)["topics"] == ["persuaded"] and last(w)["facts"] == ["F_alice_persuaded"]


def test_exclusive_without_gate_replaces_nothing(tmp_path: Path) -> None:
    def ungate(r: dict) -> None:
        t = next(t for t in npc(r, "alice")["topics"] if t["id"] == "persuaded")
        del t["requires"]
    w = make(tmp_path, mutate=ungate)
    reply = w.ask("alice", "Reconciliation errors are high; can we revisit the threshold?")
    assert "500 EUR cap" in reply and "you convinced me" in reply


def test_requires_facts_then_stalls_then_available_at(tmp_path: Path) -> None:
    w = make(tmp_path)
    assert "Talk to me about the current threshold first." in w.ask("alice", "Can I get approval?")
    assert last(w)["topics"] == ["policy_approval:needs_prior"]
    w.ask("alice", "What is the threshold?")
    assert "Let me check with the board" in w.ask("alice", "Can I get approval?")
    assert "Still waiting on the board." in w.ask("alice", "Approval now?")
    assert "The board hasn't met yet." in w.ask("alice", "Approval now?")  # stalls used up, not yet time
    assert last(w)["topics"] == ["policy_approval:too_soon"]
    w.wait("2d")  # past Wed 09:00
    assert "Approved" in w.ask("alice", "Approval now?")
    assert "F_approval" in w.facts


def test_available_at_already_passed_skips_stalls(tmp_path: Path) -> None:
    w = make(tmp_path)
    w.ask("alice", "What is the threshold?")
    w.wait("3d")
    assert "Approved" in w.ask("alice", "Can I get approval?")


def test_available_after_hours_makes_person_unavailable(tmp_path: Path) -> None:
    w = make(tmp_path)
    assert "I'll do a count tomorrow." in w.ask("bob", "Can you do a full physical count?")
    assert last(w)["topics"] == ["stock_count:stalled"]
    assert "Count's not done yet" in w.ask("bob", "Is the count done?")
    assert last(w)["topics"] == ["stock_count:too_soon"]
    w.wait("1d")
    assert "312 missing units" in w.ask("bob", "Is the count done?")


def test_stall_seconds_is_wall_clock(tmp_path: Path) -> None:
    wall = FakeWall()
    w = make(tmp_path, wall_clock=wall)
    assert "Give me a minute" in w.ask("grace", "Can I get the refund log export?")
    wall.t += 10
    assert "Still pulling it" in w.ask("grace", "Is the export ready?")
    wall.t += 55
    assert "refunds_2024.csv" in w.ask("grace", "Is the export ready?")


def test_overflow_after_four_topics(tmp_path: Path) -> None:
    w = make(tmp_path)
    reply = w.ask("bob", "Shipping, stock, returns, carriers and packaging: what's up?")
    assert reply.count("\n\n") >= 4
    assert "That's too much for one message!" in reply
    assert last(w)["topics"] == ["shipping_delays", "stock_levels", "returns", "carriers"]
    assert "F_packaging" not in w.facts


def test_default_overflow_line(tmp_path: Path) -> None:
    w = make(tmp_path, mutate=lambda r: npc(r, "bob").pop("overflow"))
    reply = w.ask("bob", "Shipping, stock, returns, carriers and packaging: what's up?")
    assert "Come back to me on the rest." in reply


@pytest.mark.parametrize("router", [RegexRouter(), LexicalRouter()], ids=["regex", "lexical"])
@pytest.mark.parametrize("question", [
    "Tell me everything you know.",
    "Anything I should know?",
    "Is there anything else I should know about the project?",
    "Any advice?",
    "有什么需要注意的吗？",
    "把你知道的都告诉我",
])
def test_broad_questions_match_nothing(tmp_path: Path, router: Router, question: str) -> None:
    # A catch-all trigger on every topic: broad questions still reach none.
    def catch_all(r: dict) -> None:
        for t in npc(r, "alice")["topics"]:
            t["triggers"].append(".")
    w = make(tmp_path, router=router, mutate=catch_all)
    assert "Not really my area, sorry." in w.ask("alice", question)
    assert last(w)["topics"] == []


def test_specific_question_with_a_broad_phrase_still_matches(tmp_path: Path) -> None:
    w = make(tmp_path)
    assert "500 EUR" in w.ask("alice", "Anything I should know about the refund threshold?")


# --------------------------------------------------------------------------- clock, wait, zh


def test_clock_advances_per_message_and_waiting_costs(tmp_path: Path) -> None:
    w = make(tmp_path)
    assert w.now().startswith("Mon 03 Mar 09:00")
    w.ask("alice", "hello")
    assert last(w)["at"] == "Mon 03 Mar 09:00"  # stamped when sent
    assert w.now().startswith("Mon 03 Mar 11:00")
    assert w.wait("2d").startswith("It is now Wed 05 Mar 11:00.")
    e = last(w)
    assert e["to"] == "wait" and e["cost"] == pytest.approx(0.04) and e["question"] == "waited 48 h"
    w.wait("90m")
    assert w.now().startswith("Wed 05 Mar 12:30")
    with pytest.raises(AskError):
        w.wait("soon")
    assert w.summary().contact_cost == pytest.approx(0.01 + 0.04 + 0.02 * 1.5 / 24, abs=1e-4)


def test_no_clock(tmp_path: Path) -> None:
    def drop(r: dict) -> None:
        del r["clock"]
    w = make(tmp_path, mutate=drop)
    assert w.now().startswith("(this engagement keeps no calendar)")
    with pytest.raises(AskError, match="calendar"):
        w.wait("1d")
    reply = w.ask("alice", "What is the threshold?")
    assert reply.startswith("Alice Chen: ")
    assert last(w)["at"] is None
    # gone_after_hours needs a calendar: without one Bob never leaves
    assert "No idea" in w.ask("bob", "hello")
    assert "on leave" not in w.who()


def test_zh_dates(tmp_path: Path) -> None:
    w = make(tmp_path, mutate=lambda r: r["clock"].update(lang="zh"))
    assert w.now() == "3月3日 周一 09:00"
    w.wait("2d")
    assert w.now().startswith("3月5日 周三 09:00")
    assert w.ask("alice", "hello").startswith("[3月5日 周三 09:00] Alice Chen:")


def test_clock_start_override(tmp_path: Path) -> None:
    w = make(tmp_path, clock_start="2025-03-08T10:00")
    assert w.now().startswith("Sat 08 Mar 10:00")


# --------------------------------------------------------------------------- inbox


def test_inbox_after_hours_note_read_and_facts(tmp_path: Path) -> None:
    w = make(tmp_path)
    assert w.read_inbox() == "No messages."
    assert w.ledger.entries == []  # nothing new: no log line
    reply = w.wait("1d")
    assert "(1 new message for you: ask --inbox)" in reply
    text = w.read_inbox()
    assert text == "(new) Alice Chen: FYI: the board meets on Wednesday morning."
    e = last(w)
    assert e["to"] == "inbox" and e["facts"] == ["F_board_meeting"] and e["cost"] == 0.0
    assert e["topics"] == ["m_board"]
    n = len(w.ledger.entries)
    assert w.read_inbox() == "Alice Chen: FYI: the board meets on Wednesday morning."
    assert len(w.ledger.entries) == n  # re-reading logs nothing
    assert "new message" not in w.ask("alice", "hello")


def test_inbox_after_asks(tmp_path: Path) -> None:
    w = make(tmp_path)
    w.ask("alice", "a")
    w.ask("alice", "b")
    assert "new message" not in w.who()
    assert "(1 new message for you: ask --inbox)" in w.ask("alice", "c")
    assert "(new) Bob Li: Heads-up" in w.read_inbox()
    assert "F_short_staffed" in w.facts


def test_inbox_after_fact(tmp_path: Path) -> None:
    w = make(tmp_path)
    reply = w.ask("alice", "Fraud: 37 suspicious refunds from INV-2041, see refunds.csv")
    assert "40k" in reply and "(1 new message for you: ask --inbox)" in reply
    assert "Carol Wu: I hear you are looking into the fraud wave" in w.read_inbox()
    assert "F_cfo_aware" in w.summary().facts_obtained


# --------------------------------------------------------------------------- pilot


def test_pilot_costs_and_exhaustion(tmp_path: Path) -> None:
    days: list[int] = []

    def runner(day: int) -> dict[str, Any]:
        days.append(day)
        return {"feedback": f"day {day}: 3 complaints", "facts": [f"F_pilot_{day}"], "topics": ["complaints"],
                "stats": {"orders": 100}, "extra_cost": 0.01}

    w = make(tmp_path, pilot_runner=runner)
    assert w.pilot() == "day 1: 3 complaints"
    e = last(w)
    assert e["to"] == "pilot" and e["cost"] == pytest.approx(0.06) and e["n_asked"] == 1
    assert e["pilot"] == {"orders": 100} and e["facts"] == ["F_pilot_1"]
    assert w.pilot() == "day 2: 3 complaints"
    assert last(w)["cost"] == pytest.approx(0.11)
    assert w.pilot() == "The trial window is used up: no more trial days."
    assert days == [1, 2] and len(w.ledger.entries) == 2
    s = w.summary()
    assert s.contact_cost == pytest.approx(0.17) and s.questions_asked == 0


@pytest.mark.parametrize("extra", [-5, float("nan"), float("inf"), "cheap", {"usd": 1}])
def test_a_trial_days_reported_cost_that_is_no_cost_counts_as_none_and_is_an_incident(tmp_path: Path,
                                                                                     extra: Any) -> None:
    """The trial module may pass on what the delivered system says a day cost (the agent's
    number): a negative, non-finite or non-numeric cost is no credit (round 11: -5 took S to
    6.0, NaN left a done run with no score); it counts as 0 and is an integrity incident."""
    w = make(tmp_path, pilot_runner=lambda day: {"feedback": "ok", "extra_cost": extra})
    w.pilot()
    e = last(w)
    assert e["cost"] == pytest.approx(0.05) and "extra_cost_refused" in e["pilot"]
    assert w.summary().contact_cost == pytest.approx(0.05)
    assert len(w.cost_refusals) == 1 and "trial day 1" in w.cost_refusals[0]
    honest = make(tmp_path / "honest", pilot_runner=lambda day: {"feedback": "ok", "extra_cost": 0.01})
    honest.pilot()
    assert honest.cost_refusals == [] and last(honest)["cost"] == pytest.approx(0.06)


def test_pilot_runner_argument_and_missing(tmp_path: Path) -> None:
    w = make(tmp_path)
    with pytest.raises(AskError, match="no trial environment"):
        w.pilot()
    assert w.pilot(lambda d: {"feedback": "ok"}) == "ok"


def test_pilot_default_cost_list_reuses_last(tmp_path: Path) -> None:
    w = make(tmp_path, mutate=lambda r: r.update(pilot={"max_runs": 3, "cost": [0.2]}))
    for _ in range(3):
        w.pilot(lambda d: {"feedback": "ok"})
        assert last(w)["cost"] == pytest.approx(0.2)
    assert w.pilot(lambda d: {"feedback": "ok"}) == "The trial window is used up."


# --------------------------------------------------------------------------- records


def test_summary_and_workspace_log(tmp_path: Path) -> None:
    w = make(tmp_path)
    w.ask("alice", "What is the refund threshold?")
    w.ask("carol", "hi")
    w.ask("dave", "legal limit?")
    w.wait("3d")
    w.ask("bob", "hello")  # gone: not a question
    s = w.summary().model_dump()
    assert s == {
        "questions_asked": 3,
        "facts_obtained": ["F_gone:bob", "F_no_legal_limit", "F_off_limits:carol", "F_off_limits:dave",
                           "F_threshold_500"],
        "contact_cost": pytest.approx(0.01 + 0.1 + 0.05 + 0.06),
        "asked_by_person": {"alice": 1, "carol": 1, "dave": 1},
        "off_limits_contacts": ["carol", "dave"],
    }
    lines = (tmp_path / "ws" / "logs" / "ask.jsonl").read_text().splitlines()
    assert len(lines) == 5
    rec = json.loads(lines[0])
    assert set(rec) == {"ts", "at", "to", "question", "topics", "facts", "n_asked", "cost", "mac"}
    assert w.ledger.verify() == []


def test_lexical_router_world_paraphrase(tmp_path: Path) -> None:
    w = make(tmp_path, router=LexicalRouter())
    assert "500 EUR cap" in w.ask("alice", "Who came up with the ceiling on money-back payouts?")
    assert "carrier collects at 4pm" in w.ask("bob", "Why are parcels from up north arriving behind schedule?")


# --------------------------------------------------------------------------- bounds


def test_a_question_over_the_length_cap_is_refused_and_not_recorded(tmp_path: Path) -> None:
    w = make(tmp_path)
    assert "500 EUR cap" in w.ask("alice", "refund threshold? " + "x" * (MAX_QUESTION_CHARS - 20))
    with pytest.raises(AskError, match=r"question too long \(4,001 characters; at most 4,000\)"):
        w.ask("alice", "x" * (MAX_QUESTION_CHARS + 1))
    assert len(w.ledger.entries) == 1 and w.asked["alice"] == 1


def test_the_event_cap_refuses_before_anything_changes(tmp_path: Path) -> None:
    days: list[int] = []

    def runner(day: int) -> dict[str, Any]:
        days.append(day)
        return {"feedback": "ok"}

    w = make(tmp_path, pilot_runner=runner, max_events=3)
    w.ask("alice", "What is the refund threshold?")
    w.wait("1d")  # the board message arrives
    w.ask("dave", "legal limit?")
    state = (dict(w.asked), w.sim_minutes, set(w.facts), w.total_left, w.pilots)
    for call in (lambda: w.ask("alice", "hello"), lambda: w.wait("2h"), w.read_inbox, w.pilot):
        with pytest.raises(AskError, match=r"message log is full \(3 events\)"):
            call()
    assert (dict(w.asked), w.sim_minutes, set(w.facts), w.total_left, w.pilots) == state
    assert len(w.ledger.entries) == 3 and days == []
    assert "Alice Chen" in w.who() and w.now()  # reading the directory and the clock records nothing
    with pytest.raises(AskError, match="unknown stakeholder"):
        w.ask("zoe", "hi")


def test_default_event_cap() -> None:
    assert MAX_EVENTS * MAX_QUESTION_CHARS <= 2_000_000  # what one run can put in the store, in characters


def test_a_nan_wait_is_refused(tmp_path: Path) -> None:
    w = make(tmp_path)
    with pytest.raises(AskError, match="not a number"):
        w.wait(float("nan"))
    assert w.ledger.entries == []
    assert "It is now" in w.wait(float("inf"))  # capped at the longest wait
    assert w.sim_minutes == 14 * 24 * 60


def test_long_ids_and_durations_are_quoted_short(tmp_path: Path) -> None:
    w = make(tmp_path)
    with pytest.raises(AskError) as e:
        w.ask("z" * 100_000, "hi")
    assert len(str(e.value)) < 200
    with pytest.raises(AskError) as e:
        w.wait("9" * 100_000 + "h")
    assert len(str(e.value)) < 200


def test_a_question_that_is_not_valid_unicode_is_answered_and_recorded_escaped(tmp_path: Path) -> None:
    w = make(tmp_path, router=LexicalRouter())
    reply = w.ask("alice", "What is the refund threshold? \ud800 \udcff")
    assert "500 EUR cap" in reply
    assert last(w)["question"] == "What is the refund threshold? \\ud800 \\udcff"
    assert w.ledger.verify() == []
