"""The stakeholder schema: a scenario's people as FDE-Gym's `npcs.json` declares them.

What a person knows, the words they use, their patience, costs and calendar, the inbox
and the pilot: typed here so that both scenario readers (FDE-Gym case folders and native
scenarios) can validate a spec without importing the environment that runs it
(`assay.people.world`). Upstream's other keys are kept, never refused.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from assay.task.formats.jsonio import JSONSyntaxError, loads_json
from assay.task.formats.yamlio import read_text
from assay.task.patterns import compile_pattern
from assay.task.re2_translation import PatternError
from assay.task.validation import PLACEHOLDER, FillBudget, FillTooLarge, fill_text

__all__ = ["MAX_TOPICS_PER_MESSAGE", "Clock", "InboxMessage", "Npc", "NpcSpec", "PilotSpec", "Topic", "fill_placeholders", "load_npcs"]

MAX_TOPICS_PER_MESSAGE = 4
"""A message is answered on at most this many scripted topics (upstream's rule)."""
TIME_FORMAT = "%Y-%m-%dT%H:%M"
DEFAULT_OUT_OF_PATIENCE = "Sorry, I'm in back-to-back meetings for the rest of the week."
DEFAULT_FALLBACK = "I'm not sure I can help with that."
DEFAULT_GONE_LABEL = "no longer reachable"


def _check_time(v: str | None) -> str | None:
    if v is None:
        return v
    try:
        dt.datetime.strptime(v, TIME_FORMAT)
    except ValueError:
        raise ValueError(f"{v!r} is not a time of the form YYYY-MM-DDTHH:MM") from None
    return v


def _routing_pattern(pattern: str) -> str:
    """A trigger or requires pattern the regex router can run: RE2, case-insensitive
    (`assay.task.patterns`); PatternError (a ValueError) says why not."""
    try:
        compile_pattern(pattern, "i")
    except PatternError as e:
        raise PatternError(f"bad regular expression {pattern!r}: {e}") from None
    return pattern


RoutingPattern = Annotated[str, AfterValidator(_routing_pattern)]
"""One element of `triggers`/`requires`: a refusal names its index (`triggers[2]`)."""

MAX_COUNT = 10**9
"""The largest count (patience, asks, trial days, questions) a stakeholder spec may give."""
Cost = Annotated[float, Field(ge=0, allow_inf_nan=False)]
"""A cost or a span of time in a stakeholder spec: finite and not negative. `1e999` reads as
infinity in JSON (and `.inf` in a variant's parameters), and a score less an infinite contact
cost is -inf for every agent that asks, which no mean of a report survives; a negative cost
pays an agent for every question."""
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
"""A count in a stakeholder spec: not negative, at most MAX_COUNT."""


class _Tolerant(BaseModel):
    """Known fields typed; upstream's other keys kept, never refused."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


class Topic(_Tolerant):
    id: str
    about: str = ""
    answer: str = ""
    facts: list[str] = Field(default_factory=list)
    triggers: list[RoutingPattern] = Field(default_factory=list)
    requires: list[RoutingPattern] = Field(default_factory=list)
    gate: str | list[str] | None = None
    gate_miss: str | None = None
    requires_hint: str | None = None
    exclusive: bool = False
    requires_facts: list[str] = Field(default_factory=list)
    requires_miss: str | None = None
    stall: list[str] = Field(default_factory=list)
    stall_again: str | None = None
    stall_seconds: Cost = 0.0
    available_at: str | None = None
    available_after_hours: Cost | None = None

    @field_validator("available_at")
    @classmethod
    def _v_at(cls, v: str | None) -> str | None:
        return _check_time(v)

    @property
    def gate_conditions(self) -> list[str]:
        if self.gate is None:
            return []
        return [self.gate] if isinstance(self.gate, str) else list(self.gate)

    @property
    def gated(self) -> bool:
        return bool(self.gate_conditions or self.requires)


class Npc(_Tolerant):
    id: str
    name: str
    role: str = ""
    blurb: str = ""
    topics: list[Topic] = Field(default_factory=list)
    fallback: str = DEFAULT_FALLBACK
    patience: Count | None = None
    out_of_patience: str | None = None
    cost: Cost = 0.0
    soft_limit: Count | None = None
    over_factor: Cost = 3.0
    off_limits: bool = False
    off_limits_reply: str | None = None
    gone_after_hours: Cost | None = None
    gone_at: str | None = None
    gone_after_asks: Count | None = None
    gone_label: str | None = None
    gone_reply: str | None = None
    overflow: str | None = None

    @field_validator("gone_at")
    @classmethod
    def _v_gone(cls, v: str | None) -> str | None:
        return _check_time(v)

    @model_validator(mode="after")
    def _unique_topics(self) -> Npc:
        seen: set[str] = set()
        for t in self.topics:
            if t.id in seen:
                raise ValueError(f"person {self.id!r}: topic id {t.id!r} appears twice")
            seen.add(t.id)
        if self.off_limits and not self.topics and self.off_limits_reply is None:
            raise ValueError(f"person {self.id!r}: off_limits without topics needs an off_limits_reply")
        return self


class Clock(_Tolerant):
    start: str
    ask_minutes: Cost = 120.0
    wait_cost_per_day: Cost = 0.0
    lang: str | None = None

    @field_validator("start")
    @classmethod
    def _v_start(cls, v: str | None) -> str | None:
        return _check_time(v)


class PilotSpec(_Tolerant):
    max_runs: Count = 3
    exhausted: str = "The trial window is used up."
    cost: list[Cost] = Field(default_factory=lambda: [0.0])


class InboxMessage(_Tolerant):
    id: str
    from_: str = Field(alias="from")
    text: str
    facts: list[str] = Field(default_factory=list)
    after_hours: Cost | None = None
    after_asks: Count | None = None
    after_fact: str | None = None


class NpcSpec(_Tolerant):
    npcs: list[Npc]
    matcher: Literal["regex", "llm", "lexical", "embedding"] = "regex"
    total_questions: Count | None = None
    show_budget: bool = True
    clock: Clock | None = None
    pilot: PilotSpec | None = None
    inbox: list[InboxMessage] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_ids(self) -> NpcSpec:
        seen: set[str] = set()
        for n in self.npcs:
            if n.id in seen:
                raise ValueError(f"person id {n.id!r} appears twice")
            seen.add(n.id)
        ids = [m.id for m in self.inbox]
        if len(ids) != len(set(ids)):
            raise ValueError("inbox message ids must be unique")
        return self

    def person(self, pid: str) -> Npc | None:
        return next((n for n in self.npcs if n.id == pid), None)

    def unknown_fields(self) -> list[str]:
        """Paths of the keys no model here declares (`npcs[0].topics[2].tirggers`): FDE-Gym
        files keep upstream's other keys, a native scenario's spec is refused for them."""
        return _extra_paths(self, "")


def _extra_paths(m: BaseModel, where: str) -> list[str]:
    out = [f"{where}.{k}" if where else k for k in (m.model_extra or {})]
    for name, info in type(m).model_fields.items():
        key = f"{where}.{info.alias or name}" if where else (info.alias or name)
        value = getattr(m, name)
        if isinstance(value, BaseModel):
            out += _extra_paths(value, key)
        elif isinstance(value, list):
            out += [p for i, v in enumerate(value) if isinstance(v, BaseModel) for p in _extra_paths(v, f"{key}[{i}]")]
    return out


# --------------------------------------------------------------------------- loading



def fill_placeholders(value: Any, params: dict[str, Any], budget: FillBudget | None = None, where: str = "") -> Any:
    """`{{name}}` filled from params in every string of a JSON value; unfilled -> ValueError.

    A string that is exactly one placeholder takes the parameter's own JSON type (so a
    variant can set `"patience": "{{patience}}"` to a number). Every fill draws on one
    `budget` (`validation.FillBudget`; a new one when none is given): a fill past it is a
    FillTooLarge whose `field` is where in the value it was (`npcs[0].role`).
    """
    budget = budget if budget is not None else FillBudget()
    if isinstance(value, dict):
        return {k: fill_placeholders(v, params, budget, f"{where}.{k}" if where else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [fill_placeholders(v, params, budget, f"{where}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, str) or "{{" not in value:
        return value
    try:
        whole = PLACEHOLDER.fullmatch(value.strip())
        if whole and whole.group(1) in params and not isinstance(params[whole.group(1)], str):
            param = params[whole.group(1)]  # a value pydantic copies where the spec holds it: charged as its JSON
            budget.take(len(json.dumps(param, ensure_ascii=False)) - len(value), whole.group(1), 1)
            return param
        return fill_text(value, params, budget=budget)
    except FillTooLarge as e:
        e.field = e.field or where or None
        raise


def load_npcs(path_or_dict: str | Path | dict[str, Any], params: dict[str, Any] | None = None,
              budget: FillBudget | None = None) -> NpcSpec:
    """Read a stakeholder spec (a path to npcs.json or the parsed dict), placeholders filled.

    Placeholders are filled from the variant's params; one left unfilled is a ValueError
    naming it. A file that is not valid JSON until filled (an unquoted `{{n}}`) is filled
    as text first, non-string values inserted as JSON. The file is a task file: read without
    following a link, within `jsonio`'s limits (size, depth, digits); InputError otherwise.
    Every fill draws on `budget` (`validation.FillBudget`): past it, a FillTooLarge.
    """
    params = dict(params or {})
    budget = budget if budget is not None else FillBudget()
    if isinstance(path_or_dict, dict):
        raw: Any = path_or_dict
    else:
        path = Path(path_or_dict)
        text = read_text(path)
        try:
            raw = loads_json(text, path)
        except JSONSyntaxError:
            if "{{" not in text:
                raise
            raw = loads_json(fill_text(text, params, inside_json_string=True, budget=budget), path)
    if not isinstance(raw, dict):
        raise ValueError("a stakeholder spec must be a JSON object with an `npcs` list")
    return NpcSpec.model_validate(fill_placeholders(raw, params, budget))
