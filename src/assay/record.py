"""What a run leaves behind: its key, its transcript events, its grade and usage.

These pydantic models are what the store persists and what reports are built from; every
field needed to trace a result back to the exact task content, harness, model and prices
is here.

- `RunRecord.grade` is a typed `Grade`: one model per kind (`RubricGrade`, `ScenarioGrade`,
  `ContractGrade`) and the `Audit`, serialised as SPEC's one flat object (the fields of every
  kind the task has, side by side, plus `audit`) and read back from it.
- Transcript events are a discriminated union on `kind`, one model per event kind (as
  Inspect AI's event log). On the wire (the store, `assay show --json`) an event is
  `{seq, t, kind, data}`, `data` holding the kind's own fields.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_serializer, model_validator

EndReason = Literal[
    "finished", "max_turns", "max_usd", "max_time",
    "api_error", "interrupted", "harness_error", "grader_error",
]
VOID_REASONS = frozenset({"api_error", "interrupted", "harness_error", "grader_error"})
"""End reasons of a harness fault (SPEC "void, scored, broken: who failed decides"): the run is void."""
RunStatus = Literal["done", "void", "broken"]
"""`done`: scored; `void`: the harness failed (re-run on resume); `broken`: the task's own grader
fails on its reference deliverable (or, with none, an untouched workspace), so its runs are
left out of every agent's numbers alike."""
MAX_VOID_ATTEMPTS = 3
"""A run key still void after this many attempts is stored as a failed run (score 0, `void_attempts`)
until `assay run --retry-void` runs it again."""
Kind = Literal["rubric", "scenario", "contract"]
KINDS: tuple[Kind, ...] = ("rubric", "scenario", "contract")
SCORE_ORDER: tuple[Kind, ...] = ("scenario", "contract", "rubric")
"""A task with several kinds scores by the first of these it has (SPEC "Levels, scores and passing")."""


_SURROGATE = re.compile("[\ud800-\udfff]")


def safe_text(text: str) -> str:
    """`text` with every lone surrogate (a file name that was not UTF-8, an agent's broken
    string) written as its escape `\\udcff`, so it can be stored, sent and shown as UTF-8."""
    if not _SURROGATE.search(text):
        return text
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text)


# Characters that draw nothing: Unicode's format characters (category Cf: zero-width space and
# joiners, bidi marks, embeddings, overrides and isolates, the BOM, interlinear annotation marks,
# tag characters) and the rest of its Default_Ignorable_Code_Point set (variation selectors,
# Hangul fillers, the combining grapheme joiner, unassigned ignorables).
_INVISIBLE = ("\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u115f\u1160\u17b4\u17b5"
              "\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0"
              "\ufff0-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
              "\U0001d173-\U0001d17a\U000e0000-\U000e0fff")
# In running text the joiners (U+200C/200D: Persian, Indic scripts, emoji sequences), the soft
# hyphen and the emoji variation selectors U+FE00-FE0F carry meaning: kept there, escaped in names.
_INVISIBLE_IN_TEXT = ("\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u115f\u1160\u17b4\u17b5"
                      "\u180b-\u180f\u200b\u200e\u200f\u202a-\u202e\u2060-\u206f\u3164\ufeff\uffa0"
                      "\ufff0-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
                      "\U0001d173-\U0001d17a\U000e0000-\U000e0fff")
_CONTROLS = re.compile(f"[\x00-\x1f\x7f-\x9f\u2028\u2029{_INVISIBLE}\ud800-\udfff]")
_CONTROLS_NOT_LINES = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029{_INVISIBLE_IN_TEXT}\ud800-\udfff]")
_NAMED_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape(m: re.Match[str]) -> str:
    c = m.group(0)
    if c in _NAMED_ESCAPES:
        return _NAMED_ESCAPES[c]
    cp = ord(c)
    return f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}" if cp < 0x10000 else f"\\U{cp:08x}"


def escape_controls(text: str, *, keep_lines: bool = False) -> str:
    """`text` as it may be shown to a person or an agent: every character that would move the
    cursor, end a line, clear a screen, reorder what follows or not encode is written as its
    escape, so a name or an answer cannot pose as two entries, hide or forge output. That is
    C0 controls (`\\n`, `\\t`, `\\r`, `\\x00`, `\\x1b`...), DEL and C1 (`\\x7f`, `\\x85`...),
    the line and paragraph separators U+2028/2029, every character that draws nothing (format
    characters such as the bidi overrides `\\u202e`, zero-width space `\\u200b`, the BOM, tag
    characters `\\U000e0061`, and the other default-ignorable ones such as variation selectors),
    so two names that differ only by one read differently, and lone surrogates (`\\udcff`). With
    `keep_lines`, newlines and tabs stay (multi-line text: tool output, a final message), and so
    do the characters that carry meaning in running text (the joiners U+200C/200D, the soft
    hyphen, the emoji variation selectors U+FE00-FE0F). A
    backslash is left as it is, so text without controls is unchanged. For display only: what
    is stored and `--json` keep the text itself."""
    pattern = _CONTROLS_NOT_LINES if keep_lines else _CONTROLS
    return pattern.sub(_escape, text) if pattern.search(text) else text


def escape_page_text(value: Any) -> Any:
    """A page template's `finalize` (the web app's pages, the HTML report): every text a page
    shows (`{{ ... }}`, after its filters) with its control, bidi and line-separator characters
    escaped (`escape_controls`, lines kept), as `assay show` prints it: a file name, an agent's
    name or an answer cannot hide, reorder or forge what the page shows. Markup the page's
    code built itself (not a plain str) is left as it is."""
    return escape_controls(value, keep_lines=True) if type(value) is str else value


def safe_json(value: Any) -> Any:
    """`safe_text` on every string of a JSON-like value (keys included)."""
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, dict):
        return {safe_text(k) if isinstance(k, str) else k: safe_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [safe_json(v) for v in value]
    return value


def json_text(obj: Any) -> str:
    """Compact JSON text of a value as the store keeps it; lone surrogates are escaped
    (`safe_json`). The walk over every string is only taken when the JSON has one (it cannot
    be encoded as UTF-8)."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=True)
    try:
        text.encode()
    except UnicodeEncodeError:
        return json.dumps(safe_json(obj), ensure_ascii=False, separators=(",", ":"), allow_nan=True)
    return text


def primary_kind(kinds: Sequence[str]) -> str:
    """The kind that scores a task or run: the first of scenario, contract, rubric it has."""
    for kind in SCORE_ORDER:
        if kind in kinds:
            return kind
    return kinds[0] if kinds else "contract"


class Usage(BaseModel):
    """Tokens of model calls (`input_tokens` are the non-cached ones)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def _summed(self, other: Usage) -> dict[str, int]:
        return {k: getattr(self, k) + getattr(other, k) for k in Usage.model_fields}

    def __add__(self, other: Usage) -> Usage:
        return Usage(**self._summed(other))

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_read_tokens + self.cache_write_tokens


class UsageCost(Usage):
    """Tokens and dollars of model calls; `cost_usd` None when a price is unknown."""

    cost_usd: float | None = 0.0

    def __add__(self, other: Usage) -> UsageCost:
        """Sums tokens; the cost stays unknown (None) once either side's is."""
        cost = other.cost_usd if isinstance(other, UsageCost) else 0.0
        return UsageCost(**self._summed(other),
                         cost_usd=None if self.cost_usd is None or cost is None else self.cost_usd + cost)

    def __radd__(self, other: int) -> UsageCost:  # sum(...) starts from 0
        return self if other == 0 else NotImplemented

    @classmethod
    def of(cls, usage: Usage, cost_usd: float | None) -> UsageCost:
        return cls(**usage.model_dump(), cost_usd=cost_usd)


# --------------------------------------------------------------------------- transcript events


class EventBase(BaseModel):
    """Fields every event has; the kind's own fields are the model's other fields."""

    model_config = ConfigDict(extra="allow")
    seq: int
    t: float  # seconds since run start

    def data(self) -> dict[str, Any]:
        """The kind's own fields (the wire form's `data`); fields left unset (None) are left out."""
        return {k: v for k, v in self.model_dump(exclude={"seq", "t", "kind"}).items() if v is not None}

    def wire(self) -> dict[str, Any]:
        """`{seq, t, kind, data}`: how the store and `assay show --json` hold an event."""
        return {"seq": self.seq, "t": self.t, "kind": getattr(self, "kind"), "data": self.data()}  # noqa: B009


class SystemEvent(EventBase):
    kind: Literal["system"] = "system"
    content: str = ""


class UserEvent(EventBase):
    kind: Literal["user"] = "user"
    content: str = ""
    images: int | None = None
    nudge: int | None = None


class AssistantEvent(EventBase):
    kind: Literal["assistant"] = "assistant"
    content: str = ""
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    usage: dict[str, Any] | None = None
    stop_reason: str | None = None
    citations: list[dict[str, Any]] = Field(default_factory=list)


class ToolCallEvent(EventBase):
    kind: Literal["tool_call"] = "tool_call"
    id: str = ""
    name: str = ""
    arguments: dict[str, Any] = Field(default_factory=dict)
    arguments_error: str | None = None


class ToolResultEvent(EventBase):
    kind: Literal["tool_result"] = "tool_result"
    id: str = ""
    name: str = ""
    output: str = ""
    images: int | None = None  # images attached to the result (read_file on an image)


class StakeholderEvent(EventBase):
    """One signed line of the stakeholder ledger (a message, a wait, an inbox read, a pilot day)."""

    kind: Literal["stakeholder"] = "stakeholder"
    to: str = ""
    question: str = ""
    at: str | None = None
    ts: float | None = None
    topics: list[str] = Field(default_factory=list)
    facts: list[str] = Field(default_factory=list)
    n_asked: int = 0
    cost: float = 0.0


class HarnessEvent(EventBase):
    kind: Literal["harness"] = "harness"
    note: str = ""
    files: list[str] = Field(default_factory=list)  # what a policy copied into the workspace


class ErrorEvent(EventBase):
    kind: Literal["error"] = "error"
    source: str = ""
    reason: str = ""
    status: int | None = None


Event = Annotated[
    SystemEvent | UserEvent | AssistantEvent | ToolCallEvent | ToolResultEvent | StakeholderEvent
    | HarnessEvent | ErrorEvent,
    Field(discriminator="kind"),
]
EventKind = Literal["system", "user", "assistant", "tool_call", "tool_result", "stakeholder", "harness", "error"]
EVENT: TypeAdapter[Event] = TypeAdapter(Event)


def event_from_wire(seq: int, t: float, kind: str, data: dict[str, Any]) -> Event:
    """An event from its stored form; unknown kinds (older stores) become harness notes."""
    if kind not in EventKind.__args__:  # type: ignore[attr-defined]
        rest = dict(data)
        own = rest.pop("note", None)
        return HarnessEvent(seq=seq, t=t, note=f"[{kind}]" + (f" {own}" if own else ""), **rest)
    return EVENT.validate_python({**data, "seq": seq, "t": t, "kind": kind})


# --------------------------------------------------------------------------- scenario stage records


class Discovery(BaseModel):
    """A scenario run's discovery record, read from the signed stakeholder ledger."""

    questions_asked: int = 0
    facts_obtained: list[str] = Field(default_factory=list)
    contact_cost: float = 0.0
    asked_by_person: dict[str, int] = Field(default_factory=dict)
    off_limits_contacts: list[str] = Field(default_factory=list)


class CaseGrade(BaseModel):
    """What grading a delivered system showed: the case grader's own answer (`result`), and
    what the harness kept outside the sandbox (ledger integrity, discovery, the hand-over)."""

    result: dict[str, Any]
    attempts: int = 1
    seconds: float = 0.0
    integrity: list[str] = Field(default_factory=list)
    discovery: Discovery = Field(default_factory=Discovery)
    handover: list[str] = Field(default_factory=list)  # the deliverables/ texts, read safely
    router: str = ""
    router_fallbacks: list[dict[str, str]] = Field(default_factory=list)  # routing a fallback decided
    router_fallback_count: int = 0
    variant: str = ""
    level: str | None = None
    llm: dict[str, Any] | None = None
    llm_cost_usd: float | None = None


# --------------------------------------------------------------------------- grades


def _optional() -> Any:
    """A field that is left out of the serialised grade while it is None."""
    return Field(default=None, exclude_if=lambda v: v is None)


class _GradePart(BaseModel):
    """A kind's grade fields; fields a grader passes through from task code are kept as extras."""

    model_config = ConfigDict(extra="allow")


class ItemGrade(_GradePart):
    id: str
    weight: float
    tag: str | None = None
    tags: list[str] = Field(default_factory=list)
    hit: bool | None = None
    na: bool = False
    check: bool = False
    reason: str = ""


class JudgeInfo(_GradePart):
    """How the judge decided a run's items: votes, agreement among them, NA items, errors."""

    agreement: float | None = None  # share of answered items on which every vote agreed
    agreed: int = 0
    answered: int = 0
    na: int = 0
    votes: int = 1
    calls: int = 0
    item_votes: dict[str, list[int]] = Field(default_factory=dict)  # item -> [met, not met]
    errors: list[str] = Field(default_factory=list)
    judges: list[str] = Field(default_factory=list)
    mode: str = "batched"
    repeats: int = 1


class RubricGrade(_GradePart):
    FIELDS: ClassVar[tuple[str, ...]] = ("expert_score", "scoring", "tags", "na", "items", "judge_info")
    expert_score: float | None = None
    scoring: str = "clipped"
    tags: dict[str, float | None] = Field(default_factory=dict)
    na: int = 0
    items: list[ItemGrade] = Field(default_factory=list)
    judge_info: JudgeInfo | None = _optional()


class ScenarioGrade(_GradePart):
    FIELDS: ClassVar[tuple[str, ...]] = (
        "kpi", "kpi_baseline", "kpi_reference", "uplift", "uplift_adj", "incidents", "contact_cost",
        "questions_asked", "asked_by_person", "off_limits_contacts", "key_fact_coverage", "facts_obtained",
        "gross", "net", "score", "solved", "router", "router_fallbacks", "router_fallback_count", "variant", "level",
        "grader", "framing", "probe_flags", "llm", "llm_cost_usd")
    # None: grading the delivered system failed (the fault is in `Grade.faults`, the run scores 0)
    kpi: float | None
    kpi_baseline: float | None
    kpi_reference: float | None
    uplift: float | None
    uplift_adj: float
    incidents: list[str] = Field(default_factory=list)
    contact_cost: float = 0.0
    questions_asked: int = 0
    asked_by_person: dict[str, int] = Field(default_factory=dict)
    off_limits_contacts: list[str] = Field(default_factory=list)
    key_fact_coverage: float | None = None
    facts_obtained: list[str] = Field(default_factory=list)
    gross: float = 0.0
    net: float = 0.0
    score: float = 0.0
    solved: bool = False
    router: str = ""
    router_fallbacks: list[dict[str, str]] = Field(default_factory=list)  # each routing decision a fallback made
    router_fallback_count: int = 0
    variant: str = ""
    level: str | None = None
    grader: dict[str, Any] = Field(default_factory=dict)
    framing: dict[str, bool] = Field(default_factory=dict)
    probe_flags: list[dict[str, str]] = Field(default_factory=list)
    llm: dict[str, Any] | None = _optional()
    llm_cost_usd: float | None = _optional()


class PredicateGrade(_GradePart):
    path: str
    ok: bool
    reason: str = ""
    predicate: str | None = _optional()
    required: bool = True


class ContractGrade(_GradePart):
    FIELDS: ClassVar[tuple[str, ...]] = ("sat", "predicates", "checks", "judge", "copy_refused", "workspace_capped")
    sat: bool = True
    predicates: list[PredicateGrade] = Field(default_factory=list)
    checks: dict[str, Any] = Field(default_factory=dict)
    judge: dict[str, Any] = Field(default_factory=dict)
    copy_refused: list[tuple[str, str]] = Field(default_factory=list, exclude_if=lambda v: not v)
    """Files of the workspace the checks' copy left out (path, reason): links out, special files,
    files too large."""
    # the ceilings (ASSAY_COPY_MAX_FILES / _DEPTH) the checks' copy of the workspace reached
    workspace_capped: list[str] | None = _optional()


class AuditFlag(_GradePart):
    rule: str
    reason: str
    severity: str | None = _optional()
    removed: bool = False
    meta_reason: str | None = _optional()


class Fault(BaseModel):
    """A part of the grade scored 0 because grading it failed on what the agent delivered (a
    check or grader that raised, timed out or ran out of memory on the agent's files, programs
    or answer; a non-finite, non-numeric, unparseable or oversized result)."""

    part: str  # "checks", "predicate:PATH", "kpi", "pilot", "run" (void too often)
    reason: str


class Audit(_GradePart):
    flags: list[AuditFlag] = Field(default_factory=list)
    removed: int = 0
    pre_audit_score: float | None = None
    audited: bool = False
    meta_judge: dict[str, Any] | None = _optional()
    screen: dict[str, Any] | None = _optional()  # the injection screen's answer (grade/injection_screen.py)
    # the ceilings the audit's walk of the workspace reached (entries, files, depth): it read the rest not
    workspace_capped: list[str] | None = _optional()


_PARTS: dict[str, type[_GradePart]] = {"rubric": RubricGrade, "scenario": ScenarioGrade, "contract": ContractGrade}


class Grade(BaseModel):
    """A run's grade, typed per kind; serialised as SPEC's one flat object (`flat()`)."""

    rubric: RubricGrade | None = None
    scenario: ScenarioGrade | None = None
    contract: ContractGrade | None = None
    audit: Audit | None = None
    faults: list[Fault] = Field(default_factory=list)
    grade_seconds: float | None = None

    def flat(self) -> dict[str, Any]:
        """SPEC's flat object: every kind's fields side by side, then `audit` and `faults`."""
        out: dict[str, Any] = {}
        for kind in KINDS:
            part = getattr(self, kind)
            if part is not None:
                out.update(part.model_dump(mode="json"))
        if self.audit is not None:
            out["audit"] = self.audit.model_dump(mode="json")
        if out or self.faults:  # SPEC: every grade lists its faults, none included
            out["faults"] = [f.model_dump(mode="json") for f in self.faults]
        if self.grade_seconds is not None:
            out["grade_seconds"] = self.grade_seconds
        return out

    @classmethod
    def from_flat(cls, flat: dict[str, Any], kinds: list[str]) -> Grade:
        """Split a stored flat grade into its kinds' parts (keys nobody claims go to the primary kind)."""
        if not flat:
            return cls()
        rest = dict(flat)
        audit = rest.pop("audit", None)
        faults = rest.pop("faults", None) or []
        seconds = rest.pop("grade_seconds", None)
        parts: dict[str, dict[str, Any]] = {}
        present = [k for k in KINDS if k in kinds]
        for kind in present:
            fields = _PARTS[kind].FIELDS  # type: ignore[attr-defined]
            parts[kind] = {k: rest.pop(k) for k in fields if k in rest}
        if rest and present:
            parts[primary_kind(present)].update(rest)
        built: dict[str, Any] = {k: _PARTS[k].model_validate(v) for k, v in parts.items() if v}
        return cls(**built, audit=Audit.model_validate(audit) if audit is not None else None,
                   faults=[Fault.model_validate(f) for f in faults], grade_seconds=seconds)

    @property
    def empty(self) -> bool:
        return (self.rubric is None and self.scenario is None and self.contract is None and self.audit is None
                and not self.faults)


# --------------------------------------------------------------------------- the run


def key_digest(key: dict[str, Any]) -> str:
    """The digest of a run key's fields (campaign, task_id, task_hash, agent, level, epoch,
    options_hash): what resume and claims match on (`RunKey.digest`)."""
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]


class RunKey(BaseModel):
    """Identity of a run in a campaign; `digest` is what resume matches on."""

    campaign: str
    task_id: str
    task_hash: str
    agent: str
    level: str | None
    epoch: int
    options_hash: str

    @property
    def digest(self) -> str:
        return key_digest(self.model_dump())

    @property
    def cache_salt(self) -> str:
        """The run's identity without its campaign (the response cache's share of its key):
        the same work under another campaign name finds the same replies."""
        return json.dumps(self.model_dump(exclude={"campaign"}), sort_keys=True)


class RunRecord(BaseModel):
    schema_version: int = 1
    run_id: str
    key: RunKey
    attempt: int = 1
    kinds: list[str]
    harness_version: str
    model: str | None = None
    prices: dict[str, float | None] | None = None
    sandbox: Literal["bwrap", "none"] = "bwrap"
    status: RunStatus
    end_reason: EndReason
    void_reason: str | None = None  # why the run has no score of its own: the harness fault, or why its task is broken
    void_attempts: int | None = None  # set when a key void this many times is stored as a failed run
    provider_status: int | None = None  # HTTP status of the provider failure that voided the run (api_error)
    score: float | None = None
    passed: bool | None = None
    value: dict[str, Any] | None = None
    usage: UsageCost = Field(default_factory=UsageCost)
    judge_usage: UsageCost = Field(default_factory=UsageCost)
    grade: Grade = Field(default_factory=Grade)
    final_message: str = ""
    turns: int = 0
    started_at: float = 0.0
    duration_s: float = 0.0
    options: dict[str, Any] = Field(default_factory=dict)
    task_meta: dict[str, Any] = Field(default_factory=dict)
    run_dir: str | None = None
    search: str | None = None  # the search backend offered (native, local, brave), None for none

    @model_validator(mode="before")
    @classmethod
    def _grade_from_flat(cls, data: Any) -> Any:
        """Stored records (and callers) give the grade as SPEC's flat object."""
        if isinstance(data, dict) and isinstance(data.get("grade"), dict):
            data = dict(data)
            data["grade"] = Grade.from_flat(data["grade"], list(data.get("kinds") or []))
        return data

    @model_serializer(mode="wrap")
    def _grade_flat(self, handler: Any) -> Any:
        out = handler(self)
        if isinstance(out, dict):
            out["grade"] = self.grade.flat()
        return out
