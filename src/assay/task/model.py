"""The task model: one pydantic model that every on-disk format is read into.

A task's kinds (rubric, scenario, contract) are features of this one model, not separate
classes: a scenario may also carry a rubric, any task may carry a value.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from assay import metrics
from assay.record import primary_kind

LEVELS = ("L0", "L1", "L2", "L3")
MODALITIES = ("text", "multimodal")
EXECUTIONS = ("single-step", "multi-step", "multi-step-with-tools")
TOOL_NAMES = ("run_command", "read_file", "write_file", "edit_file", "list_files")
"""The built-in workspace tools: what a task that names none is offered (by its execution), and
what every scenario and DareBench task takes. Fixed: a task's hash covers the names in its
`tools`, so a new tool (built-in or a plugin's, `assay.tools`) is offered only to a task that
names it, and no stored result loses its task."""
CURRENCIES = ("USD", "CNY", "EUR", "GBP", "JPY")

Modality = Literal["text", "multimodal"]
Execution = Literal["single-step", "multi-step", "multi-step-with-tools"]
GradingType = Literal["automated", "judge", "hybrid"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


MAX_VALUE_AMOUNT = 1e12
"""Most a task's value may be, in its currency (validation refuses more): upstream values are
thousands (OneMillion-Bench's are about 6,000 USD or CNY a task), and a report sums values, so an
amount near the float limit (1.7e308 is finite) makes the sum of two infinite."""


class Value(_Strict):
    """Economic value of a task: an amount, or expert hours x wage x benefits multiplier."""

    amount: float | None = None
    currency: str = "USD"
    hours: float | None = None
    wage: float | None = None
    benefits_multiplier: float = 1.0
    wage_source: str | None = None

    @model_validator(mode="after")
    def _derive(self) -> Value:
        if self.currency not in CURRENCIES:
            raise ValueError(f"unknown currency {self.currency!r} (known: {', '.join(CURRENCIES)})")
        if self.amount is None:
            if self.hours is None or self.wage is None:
                raise ValueError("give either amount, or hours and wage")
            if self.hours < 0 or self.wage < 0 or self.benefits_multiplier <= 0:
                raise ValueError("hours, wage and benefits_multiplier must not be negative")
            self.amount = self.hours * self.wage * self.benefits_multiplier
        if self.amount < 0:
            raise ValueError(f"negative amount {self.amount}")
        return self


class Budget(_Strict):
    """The task's own limits; the smaller of these and the run's options wins."""

    minutes: float | None = None
    turns: int | None = None
    usd: float | None = None

    @model_validator(mode="after")
    def _non_negative(self) -> Budget:
        for name in ("minutes", "turns", "usd"):
            v = getattr(self, name)
            if v is not None and v < 0:
                raise ValueError(f"{name} must not be negative (got {v})")
        return self


class WorkspaceFile(_Strict):
    """One entry of the initial workspace: copied from `source` or written from `content`."""

    path: str
    source: Path | None = None
    content: str | None = None


PredicateName = Literal["exists", "non_empty", "regex", "json", "csv", "number", "image", "python"]


class Predicate(_Strict):
    """One (path, validity predicate) pair of an artifact contract."""

    path: str
    predicate: PredicateName = "exists"
    pattern: str | None = None
    flags: str | None = None
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    value: float | None = None
    tolerance: float = 0.0
    relative: bool = False
    columns: list[str] | None = None
    min_rows: int | None = None
    max_rows: int | None = None
    format: str | None = None
    min_width: int | None = None
    max_width: int | None = None
    min_height: int | None = None
    max_height: int | None = None
    function: str | None = None
    required: bool = True

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class MachineCheck(_Strict):
    """A deterministic test of an answer; `met` when every given condition holds."""

    regex: str | list[str] | None = None
    not_regex: str | list[str] | None = None
    number: float | None = None
    tolerance: float = 0.0
    relative: bool = False
    number_pattern: str | None = None
    headings: list[str] | None = None
    min_chars: int | None = None
    max_chars: int | None = None
    min_words: int | None = None
    max_words: int | None = None
    ignore_case: bool = True


class RubricItem(_Strict):
    """An atomic rubric item: a weight (negative = penalty when `met`), a tag, maybe a check."""

    id: str
    text: str
    weight: float
    tag: str | None = None
    tags: list[str] = Field(default_factory=list)
    check: MachineCheck | None = None
    human_labels: dict[str, bool] = Field(default_factory=dict)


class Rubric(_Strict):
    items: list[RubricItem]
    scoring: Literal["clipped", "unclipped_mean"] = "clipped"


class GradingSpec(_Strict):
    """How a contract task's work is scored beyond its artifact contract."""

    type: GradingType = "automated"
    weight_automated: float = 0.5
    weight_judge: float = 0.5
    checks_file: Path | None = None
    checks_code: str | None = None
    checks_style: Literal["native", "darebench"] = "native"
    judge_rubric: str | None = None
    expected_behavior: str | None = None
    criteria: list[str] = Field(default_factory=list)


class PolicySpec(_Strict):
    """A deterministic policy shipped with a task: an answer, artifacts to copy, or a script."""

    answer: str | None = None
    artifacts: Path | None = None
    script: Path | None = None
    root: Path | None = None  # folder bound read-only for the script (an FDE-Gym case folder)


class ServiceSpec(_Strict):
    """A customer service the scenario starts (`engagement.services`): a script in the case folder."""

    name: str
    script: str


class FramingRule(_Strict):
    """truth.json `framing`: the hand-over names the real problem when any pattern matches."""

    id: str
    any: list[str] = Field(default_factory=list)


class Engagement(_Strict):
    """The engagement's rules and what the world offers: rules text, company LLM, services."""

    rules: str = "v1"
    rules_extra: str = ""
    llm: bool = False
    services: list[ServiceSpec] = Field(default_factory=list)
    budgets: dict[str, float] = Field(default_factory=dict)


CASE_FILES: dict[str, str | None] = {"build": "build_world.py", "grader": "grader.py", "npcs": "npcs.json",
                                     "pilot": "pilot.py", "reference": "solutions/oracle.py"}
"""An FDE-Gym case folder's fixed layout; a native scenario names its own files."""


class ScenarioSpec(_Strict):
    """One variant of a scenario (an FDE-Gym case folder or a native scenario), as run and graded.

    The variant's `params` reach case code only through the environment of processes the
    harness starts outside the sandbox, never the workspace."""

    format: Literal["fdegym", "native"]
    case: Path
    variant: str = "base"
    params: dict[str, Any] = Field(default_factory=dict)
    right_here: bool = False
    kpi_baseline: float | None = None
    kpi_oracle: float | None = None
    baseline: float | str | None = None  # native: the declared baseline, a number or "compute"
    engagement: Engagement = Field(default_factory=Engagement)
    key_facts: list[str] = Field(default_factory=list)
    framing: list[FramingRule] = Field(default_factory=list)
    has_pilot: bool = False
    matcher: str = "regex"
    files: dict[str, str | None] = Field(default_factory=lambda: dict(CASE_FILES))
    held_out: str | None = None  # native: the held-out data, relative to the case folder

    @property
    def services(self) -> list[str]:
        return [s.name for s in self.engagement.services]

    def case_file(self, key: str) -> Path | None:
        rel = self.files.get(key)
        return self.case / rel if rel else None


class Task(BaseModel):
    """A task in any format, normalised. `content_hash` identifies its exact content."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    schema_version: int = 1
    id: str
    title: str = ""
    domain: str | None = None
    subdomain: str | None = None
    subset: str | None = None
    language: str = "en"
    source: str = "native"
    origin: str = ""
    prompt: str | None = None
    briefs: dict[str, str] = Field(default_factory=dict)
    system_prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    images: list[Path] = Field(default_factory=list)
    workspace: list[WorkspaceFile] = Field(default_factory=list)
    tools: list[str] = Field(default_factory=list)
    search: Literal["none", "corpus", "live"] = "none"
    corpus: Path | None = None
    answer_path: str | None = None
    contract: list[Predicate] = Field(default_factory=list)
    rubric: Rubric | None = None
    grading: GradingSpec | None = None
    scenario: ScenarioSpec | None = None
    budget: Budget = Field(default_factory=Budget)
    value: Value | None = None
    modality: Modality = "text"
    execution: Execution = "multi-step-with-tools"
    threshold: float | None = None
    policies: dict[str, PolicySpec] = Field(default_factory=dict)
    requirements: list[str] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    responses: dict[str, str] = Field(default_factory=dict)
    """Answers stored in the task file (OneMillion-Bench `model_response`, by `response_<i>`),
    which people scored item by item: what `assay calibrate` grades. Not part of the task's
    content: left out of its hash and never shown to an agent."""
    content_hash: str = ""

    @property
    def kinds(self) -> list[str]:
        kinds: list[str] = []
        if self.rubric is not None:
            kinds.append("rubric")
        if self.scenario is not None:
            kinds.append("scenario")
        if self.contract or self.grading is not None:
            kinds.append("contract")
        return kinds

    @property
    def primary_kind(self) -> str:
        """The kind that scores the task: the first of scenario, contract, rubric it has."""
        return primary_kind(self.kinds)

    @property
    def levels(self) -> list[str]:
        return [lv for lv in LEVELS if lv in self.briefs]

    @property
    def agentic(self) -> bool:
        return bool(self.tools)

    def meta(self) -> dict[str, Any]:
        """What a run record keeps of its task (`RunRecord.task_meta`): reports group, filter and
        label runs by it without loading the task."""
        return {"domain": self.domain, "subset": self.subset, "language": self.language, "modality": self.modality,
                "execution": self.execution, "source": self.source, "title": self.title}

    def brief(self, level: str | None) -> str:
        if level is not None:
            return self.briefs[level]
        return self.prompt or ""

    def prompt_text(self, level: str | None) -> str:
        """What the agent is asked: the brief at `level`, else the task's messages as
        `role: content` paragraphs (the runner's prompt, and an exported Inspect sample's)."""
        text = self.brief(level)
        if self.messages and not text:
            text = "\n\n".join(f"{m.get('role', 'user')}: {m.get('content', '')}" for m in self.messages)
        return text

    def pass_threshold(self) -> float:
        """The task's own threshold, else the kind's pass line (`assay.metrics`)."""
        if self.threshold is not None:
            return self.threshold
        return metrics.SOLVED_THRESHOLD if self.primary_kind == "scenario" else metrics.PASS_THRESHOLD
