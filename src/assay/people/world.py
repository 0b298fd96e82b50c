"""Scripted stakeholders: the people of a scenario, as a deterministic state machine.

What a person knows, and the words they use, are fixed in the scenario's `npcs.json`
(FDE-Gym's stakeholder spec, typed in `assay.task.people`). The only judgement call is
which scripted topic a message is about, and whether it meets a topic's gate: that is the
router's job (`assay.people.routing`). Everything else (patience, costs, absence, stalls,
the customer's calendar, the inbox, the pilot) follows the rules of upstream's
`harness/npc_server.py`, summarised in `shared/docs/upstream-formats.md` ("Stakeholder
semantics").

Every event is appended to a signed `Ledger` (`assay.people.ledger`); `summary()` reads the
discovery record (questions asked, facts obtained, contact cost, ...) from that ledger.

The world is synchronous and thread-safe (one lock); the Unix-socket server
(`assay.people.server`) drives it.

What one run can put on record is bounded, because the ledger's lines also become the run's
transcript, kept in the store beside every other run's: a question is at most
`MAX_QUESTION_CHARS` characters (a longer one is refused and not recorded), and a run's
ledger takes at most `max_events` events (`MAX_EVENTS`); past that, every request that would
be recorded (a message, a wait, an inbox read with new mail, a pilot day) is refused, with a
message saying so, before it changes anything. Text that is not valid Unicode is escaped on
the way in (`assay.record.safe_text`), so routers, replies and the ledger see
valid text.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from assay.people.ledger import Ledger
from assay.people.routing import Router
from assay.record import Discovery, safe_text
from assay.task.people import (
    DEFAULT_GONE_LABEL,
    DEFAULT_OUT_OF_PATIENCE,
    MAX_TOPICS_PER_MESSAGE,
    TIME_FORMAT,
    InboxMessage,
    Npc,
    NpcSpec,
    PilotSpec,
)

__all__ = ["MAX_EVENTS", "MAX_QUESTION_CHARS", "AskError", "StakeholderWorld", "parse_duration"]

MAX_WAIT_HOURS = 24.0 * 14
MAX_QUESTION_CHARS = 4000
MAX_EVENTS = 500
OVERFLOW_EN = ("That's what I can give you right now, I'm being pulled into something. "
               "Come back to me on the rest.")
OVERFLOW_ZH = "先说这些，我这边有人找，别的回头再聊。"


class AskError(Exception):
    """A request the service refuses (unknown person, no calendar, bad duration, no pilot)."""


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([mhd])\s*$", re.I)


def parse_duration(spec: str) -> float:
    """'90m' | '6h' | '2d' -> hours."""
    text = str(spec)
    m = _DURATION.match(text) if len(text) <= 40 else None
    if not m:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise AskError(f"bad duration {shown!r}: use e.g. 90m, 6h or 2d")
    n, unit = float(m.group(1)), m.group(2).lower()
    return n / 60.0 if unit == "m" else n * 24.0 if unit == "d" else n


def _parse_time(s: str) -> dt.datetime:
    return dt.datetime.strptime(s, TIME_FORMAT)


def _cjk(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


# --------------------------------------------------------------------------- the world


def _extra_cost(value: Any) -> tuple[float, str]:
    """A trial day's extra cost as the trial module reports it (it may pass on what the
    delivered system says it cost: the agent's numbers), and why it was refused: a cost that
    is not a finite number of at least 0 counts as 0, never as a credit, and the refusal is an
    integrity incident of the run (`StakeholderWorld.cost_refusals`): a system that misreports
    what it cost gains nothing by it."""
    if value is None:
        return 0.0, ""
    try:
        cost = float(value)
    except (TypeError, ValueError, OverflowError):
        return 0.0, f"{str(value)[:60]!r} is not a number"
    if not math.isfinite(cost) or cost < 0:
        return 0.0, f"{cost!r} is not a finite cost of at least 0"
    return cost, ""


class StakeholderWorld:
    """The scripted people of one run, their calendar, inbox and pilot, logging to a ledger.

    Methods return the reply text the agent sees (as upstream's `bin/ask` prints it) and
    raise AskError for a refused request. Nothing here is random: `seed` is recorded for the
    run record only. `clock_start` overrides the spec's `clock.start`; `pilot_runner(day)`
    is the scenario's trial module (`{feedback, facts, topics, stats, extra_cost}`);
    `wall_clock` is only read for `stall_seconds` and the log's `ts`.
    """

    def __init__(self, spec: NpcSpec, router: Router, *, seed: int = 0, ledger: Ledger,
                 clock_start: str | dt.datetime | None = None,
                 pilot_runner: Callable[[int], dict[str, Any]] | None = None,
                 wall_clock: Callable[[], float] = time.time, max_events: int = MAX_EVENTS) -> None:
        self.spec = spec
        self.max_events = max_events
        self.router = router
        self.seed = seed
        self.ledger = ledger
        self.pilot_runner = pilot_runner
        self._wall = wall_clock
        self.people: dict[str, Npc] = {n.id: n for n in spec.npcs}
        self._start: dt.datetime | None = None
        if spec.clock is not None:
            if isinstance(clock_start, dt.datetime):
                self._start = clock_start
            else:
                self._start = _parse_time(clock_start or spec.clock.start)
        self.sim_minutes = 0.0
        self.asked: dict[str, int] = {pid: 0 for pid in self.people}
        self.total_left: int | None = spec.total_questions
        self.facts: set[str] = set()
        self.pilots = 0
        self.cost_refusals: list[str] = []  # trial days whose reported extra cost was no cost (incidents)
        self._stalled: dict[str, int] = {}
        self._stalled_at: dict[str, float] = {}
        self._free_at: dict[str, dt.datetime] = {}
        self._inbox_seen: set[str] = set()
        self._lock = threading.RLock()
        self.pilot_spec = spec.pilot or PilotSpec()

    # ------------------------------------------------------------------ clock

    def _now_dt(self) -> dt.datetime | None:
        if self._start is None:
            return None
        return self._start + dt.timedelta(minutes=self.sim_minutes)

    def stamp(self) -> str | None:
        t = self._now_dt()
        if t is None:
            return None
        assert self.spec.clock is not None
        if (self.spec.clock.lang or "").lower().startswith("zh"):
            return f"{t.month}月{t.day}日 周{'一二三四五六日'[t.weekday()]} {t.hour:02d}:{t.minute:02d}"
        return t.strftime("%a %d %b %H:%M")

    def now(self) -> str:
        with self._lock:
            at = self.stamp()
            return (at or "(this engagement keeps no calendar)") + self._mail_note()

    def wait(self, duration: str | float) -> str:
        """Let time pass at the customer's ('6h', '2d', '90m' or hours as a number)."""
        if self.spec.clock is None:
            raise AskError("this engagement keeps no calendar")
        hours = float(duration) if isinstance(duration, int | float) else parse_duration(duration)
        if math.isnan(hours):
            raise AskError("bad duration: not a number")
        hours = max(0.0, min(hours, MAX_WAIT_HOURS))
        with self._lock:
            self._room()
            self.sim_minutes += hours * 60
            cost = round(self.spec.clock.wait_cost_per_day * hours / 24.0, 4)
            self._log("wait", f"waited {hours:.0f} h", [], [], 0, cost)
            return f"It is now {self.stamp()}.{self._mail_note()}"

    # ------------------------------------------------------------------ directory

    def _left(self, pid: str) -> int | None:
        cap = self.people[pid].patience
        if cap is None:
            return self.total_left
        left = max(0, cap - self.asked[pid])
        return left if self.total_left is None else min(left, self.total_left)

    def _gone(self, npc: Npc) -> bool:
        clocked = self._start is not None
        if npc.gone_after_hours is not None and clocked and self.sim_minutes >= npc.gone_after_hours * 60:
            return True
        now = self._now_dt()
        if npc.gone_at and now is not None and now >= _parse_time(npc.gone_at):
            return True
        return npc.gone_after_asks is not None and sum(self.asked.values()) >= npc.gone_after_asks

    def who(self) -> str:
        with self._lock:
            lines = []
            at = self.stamp()
            if at:
                lines.append(f"[{at}]")
            for n in self.people.values():
                gone = "  [%s]" % (n.gone_label or DEFAULT_GONE_LABEL) if self._gone(n) else ""
                lines.append(f"{n.id:<12} {n.name} — {n.role}{gone}")
                if n.blurb:
                    lines.append(f"             {n.blurb}")
                left = self._left(n.id)
                if self.spec.show_budget and n.patience is not None and left is not None:
                    lines.append(f"             (questions left for this person: {left})")
            if self.spec.show_budget and self.total_left is not None:
                lines.append(f"\nQuestions left across everyone: {self.total_left}")
            note = self._mail_note().strip()
            if note:
                lines.append(note)
            return "\n".join(lines)

    # ------------------------------------------------------------------ asking

    def ask(self, person_id: str, question: str) -> str:
        question = safe_text(str(question))
        if len(question) > MAX_QUESTION_CHARS:
            raise AskError(f"question too long ({len(question):,} characters; at most {MAX_QUESTION_CHARS:,}): "
                           "ask one specific thing at a time")
        with self._lock:
            npc = self.people.get(person_id)
            if npc is None:
                shown = person_id if len(person_id) <= 40 else person_id[:37] + "..."
                raise AskError(f"unknown stakeholder {shown!r}; run `ask --who`")
            self._room()
            at = self.stamp()
            prefix = f"[{at}] " if at else ""
            if self._gone(npc):
                # Nobody is there: free, no time passes, only the absence is recorded.
                self._log(person_id, question, ["gone"], ["F_gone:" + person_id],
                          self.asked[person_id], 0.0)
                reply = npc.gone_reply or (
                    f"(automatic reply) {npc.name} is no longer reachable at this address.")
                return f"{prefix}{npc.name}: {reply}{self._mail_note()}"
            left, cost = self._left(person_id), 0.0
            if left is not None and left <= 0:
                answer, hit, facts = npc.out_of_patience or DEFAULT_OUT_OF_PATIENCE, [], []
            else:
                self.asked[person_id] += 1
                if self.total_left is not None:
                    self.total_left -= 1
                cost = self._cost(npc)
                if npc.off_limits and not npc.topics:
                    answer, hit, facts = (npc.off_limits_reply or npc.fallback, ["off_limits"],
                                          ["F_off_limits:" + person_id])
                elif npc.off_limits:
                    # a shortcut that works: they do answer, and the engagement pays for it
                    answer, hit, facts = self._answer(npc, question)
                    hit, facts = ["off_limits", *hit], ["F_off_limits:" + person_id, *facts]
                else:
                    answer, hit, facts = self._answer(npc, question)
            self._log(person_id, question, hit, facts, self.asked[person_id], cost)
            if self._start is not None:
                assert self.spec.clock is not None
                self.sim_minutes += self.spec.clock.ask_minutes
            return f"{prefix}{npc.name}: {answer}{self._budget_note(person_id)}{self._mail_note()}"

    def _budget_note(self, pid: str) -> str:
        if not self.spec.show_budget:
            return ""
        if self.total_left is not None:
            return f"\n\n(questions left across everyone: {self.total_left})"
        left = self._left(pid)
        if left is not None:
            return f"\n\n(questions left for this person: {left})"
        return ""

    def _cost(self, npc: Npc) -> float:
        """Every message costs `cost`; past `soft_limit` messages, `cost x over_factor`.

        Called after the message was counted, so message soft_limit+1 is the first dearer one.
        An off-limits person always costs `cost`.
        """
        if npc.off_limits:
            return npc.cost
        over = npc.soft_limit is not None and self.asked[npc.id] > npc.soft_limit
        return npc.cost * (npc.over_factor if over else 1.0)

    def _answer(self, npc: Npc, question: str) -> tuple[str, list[str], list[str]]:
        by_id = {t.id: t for t in npc.topics}
        matched = [by_id[i] for i in self.router.match(question, npc, npc.topics) if i in by_id]
        if not matched:
            return npc.fallback, [], []
        gates = {t.id: self.router.topic_gate(question, t) for t in matched if t.gated}
        # An exclusive topic whose gate is met replaces everything else: a person who has
        # just been persuaded does not also recite their old position.
        for t in matched:
            if t.exclusive and gates.get(t.id):  # as upstream: an ungated exclusive topic replaces nothing
                matched = [t]
                break
        parts: list[str] = []
        hit: list[str] = []
        facts: list[str] = []
        now = self._now_dt()
        for t in matched[:MAX_TOPICS_PER_MESSAGE]:
            if not set(t.requires_facts) <= self.facts:
                parts.append(t.requires_miss or npc.fallback)
                hit.append(t.id + ":needs_prior")
                continue
            if t.gated and not gates.get(t.id):
                parts.append(t.gate_miss or t.requires_hint or npc.fallback)
                hit.append(t.id + ":gated")
                continue
            key = npc.id + "/" + t.id
            stalls = t.stall
            past = bool(t.available_at and now is not None and now >= _parse_time(t.available_at))
            if self._stalled.get(key, 0) < len(stalls) and not past:
                # agrees in principle, not available yet: one stall line per ask
                parts.append(stalls[self._stalled.get(key, 0)])
                self._stalled[key] = self._stalled.get(key, 0) + 1
                self._stalled_at[key] = self._wall()
                if t.available_after_hours and now is not None:
                    self._free_at[key] = now + dt.timedelta(hours=t.available_after_hours)
                hit.append(t.id + ":stalled")
                continue
            if key in self._free_at and now is not None and now < self._free_at[key]:
                parts.append(t.stall_again or stalls[-1])
                hit.append(t.id + ":too_soon")
                continue
            if stalls and t.available_at and now is not None and not past and key in self._stalled:
                parts.append(t.stall_again or stalls[-1])
                hit.append(t.id + ":too_soon")
                continue
            if stalls and t.stall_seconds and self._wall() - self._stalled_at.get(key, 0.0) < t.stall_seconds:
                # "later" means later: chasing straight away gets the same answer
                parts.append(t.stall_again or stalls[-1])
                self._stalled_at.setdefault(key, self._wall())
                hit.append(t.id + ":too_soon")
                continue
            parts.append(t.answer)
            hit.append(t.id)
            facts.extend(t.facts)
        if len(matched) > MAX_TOPICS_PER_MESSAGE:
            cjk = _cjk(npc.fallback + npc.name)
            parts.append(npc.overflow or (OVERFLOW_ZH if cjk else OVERFLOW_EN))
        return "\n\n".join(parts), hit, facts

    # ------------------------------------------------------------------ inbox

    def _arrived(self) -> list[InboxMessage]:
        out = []
        for m in self.spec.inbox:
            if m.after_hours is not None and not (self._start is not None
                                                  and self.sim_minutes >= m.after_hours * 60):
                continue
            if m.after_asks is not None and sum(self.asked.values()) < m.after_asks:
                continue
            if m.after_fact and m.after_fact not in self.facts:
                continue
            out.append(m)
        return out

    def inbox_new(self) -> int:
        return sum(1 for m in self._arrived() if m.id not in self._inbox_seen)

    def _mail_note(self) -> str:
        n = self.inbox_new()
        return f"\n\n({n} new message{'' if n == 1 else 's'} for you: ask --inbox)" if n else ""

    def read_inbox(self) -> str:
        """Everything that has arrived, oldest first. Free; new messages' facts are logged."""
        with self._lock:
            arrived = self._arrived()
            new = [m for m in arrived if m.id not in self._inbox_seen]
            if new:
                self._room()
                self._inbox_seen.update(m.id for m in new)
                facts = [f for m in new for f in m.facts]
                self._log("inbox", f"read {len(new)} message(s)", [m.id for m in new], facts, 0, 0.0)
            if not arrived:
                return "No messages."
            new_ids = {m.id for m in new}
            return "\n".join("{}{}: {}\n".format("(new) " if m.id in new_ids else "", m.from_, m.text)
                             for m in arrived).rstrip("\n")

    # ------------------------------------------------------------------ pilot

    def pilot(self, day_runner: Callable[[int], dict[str, Any]] | None = None) -> str:
        """One trial day: the runner's `feedback` text; day n costs cost[n-1] + extra_cost."""
        runner = day_runner or self.pilot_runner
        if runner is None:
            raise AskError("no trial environment for this engagement")
        with self._lock:
            self._room()
            self.pilots += 1
            n = self.pilots
        if n > self.pilot_spec.max_runs:
            return self.pilot_spec.exhausted
        out = runner(n) or {}
        costs = self.pilot_spec.cost or [0.0]
        extra, note = _extra_cost(out.get("extra_cost"))
        cost = float(costs[min(n, len(costs)) - 1]) + extra
        stats = out.get("stats")
        if note:
            stats = {**(stats if isinstance(stats, dict) else {"stats": stats}), "extra_cost_refused": note}
            self.cost_refusals.append(f"trial day {n} reported an extra cost that is no cost ({note})")
        with self._lock:
            facts = [str(f) for f in out.get("facts", [])]
            self._log("pilot", f"trial day {n}", [str(t) for t in out.get("topics", [])], facts, n,
                      round(cost, 4), pilot=stats)
            return str(out.get("feedback", "")) + self._mail_note()

    @property
    def next_pilot_day(self) -> int:
        return self.pilots + 1

    # ------------------------------------------------------------------ records

    def _room(self) -> None:
        """Refuse (AskError) an event the ledger has no room for; called, under the lock, before
        the event changes anything."""
        if self.ledger.count >= self.max_events:
            raise AskError(f"this engagement's message log is full ({self.max_events} events): "
                           "nobody at the customer takes further messages, waits or trial days")

    def _log(self, to: str, question: str, topics: list[str], facts: list[str], n_asked: int,
             cost: float, **extra: Any) -> None:
        self.facts.update(facts)
        rec: dict[str, Any] = {"ts": round(self._wall(), 3), "at": self.stamp(), "to": to,
                               "question": question, "topics": topics, "facts": facts,
                               "n_asked": n_asked, "cost": cost}
        rec.update({k: v for k, v in extra.items() if v is not None})
        self.ledger.append(rec)

    @property
    def contact_cost(self) -> float:
        return round(sum(float(e.get("cost", 0.0)) for e in self.ledger.entries), 4)

    def summary(self) -> Discovery:
        """The discovery record, as upstream's `score_discovery` reads it from the log."""
        with self._lock:
            asked = 0
            by_person: dict[str, int] = {}
            facts: set[str] = set()
            for e in self.ledger.entries:
                facts.update(e.get("facts", []))
                if e["to"] in ("wait", "inbox", "pilot") or e.get("topics") == ["gone"]:
                    continue
                asked += 1
                by_person[e["to"]] = by_person.get(e["to"], 0) + 1
            return Discovery(
                questions_asked=asked, facts_obtained=sorted(facts), contact_cost=self.contact_cost,
                asked_by_person=by_person,
                off_limits_contacts=sorted(f.split(":", 1)[1] for f in facts if f.startswith("F_off_limits:")))

    @property
    def off_limits_contacts(self) -> list[str]:
        return self.summary().off_limits_contacts
