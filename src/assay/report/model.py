"""The report JSON's models (SPEC.md "Report JSON", schema `assay.report/1`): the report, its
agent summaries, each kind's block, the per-run and per-task rows, and what the top level
holds across agents; and `assay compare`'s (`Compare`, `assay.compare/1`). The terminal
tables read them (`assay.report.table`). Their JSON Schemas ship in docs/schemas/
(`assay.campaign.schemas`).

Every model forbids keys it does not name, so a key the report gains without its model fails
the tests. A key that only some reports hold (a kind's block, `judge`, `human_agreement`, a
scenario block's `levels`, the top level's `failure_modes`) is optional: absent, not null.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA = "assay.report/1"

Curve = dict[str, float]
"""pass@k or pass^k: k ("1", "2", ...) -> the value."""
Ci = list[float] | None
"""A 95% bootstrap confidence interval [low, high]; null without values."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Usage(_Model):
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost_usd: float | None = Field(description="null: a price is unknown")


class RunRow(_Model):
    """One run (the current attempt of its key) of the report's `runs`."""

    run_id: str
    task_id: str
    task_hash: str
    kinds: list[str]
    agent: str
    level: str | None
    epoch: int
    attempt: int
    status: Literal["done", "void", "broken"]
    end_reason: str
    void_reason: str | None
    sandbox: str
    score: float | None
    passed: bool | None
    value: dict[str, Any] | None = Field(description="the task's value {amount, currency}; null: none")
    usage: Usage
    judge_usage: Usage
    grade: dict[str, Any] = Field(description="SPEC's flat grade: the fields of every kind the task has")
    model: str | None
    harness_version: str
    turns: int
    duration_s: float
    task: dict[str, Any] = Field(description="the task's meta")
    options: dict[str, Any]
    search: str | None


class TableCost(_Model):
    cost_usd: float | None


class TableRow(_Model):
    """A run as the HTML report's runs table shows it (`build.table_row`)."""

    run_id: str
    task_id: str
    agent: str
    level: str | None
    epoch: int
    status: Literal["done", "void", "broken"]
    end_reason: str
    score: float | None
    passed: bool | None
    usage: TableCost


class TaskRow(_Model):
    """pass@k and pass^k of one (agent, task, level, options)."""

    agent: str
    task_id: str
    level: str | None
    search: str
    epochs: int
    passes: int
    mean_score: float | None
    pass_at_k: Curve
    pass_hat_k: Curve


class CostDistribution(_Model):
    min: float
    median: float
    p90: float
    max: float
    runs: int
    unknown: int


class KindEconomics(_Model):
    """What a kind's block cost and its pass@k curves (`build.kind_economics`)."""

    cost_usd: float | None
    tokens: int
    tokens_per_task: float
    cost_per_task: float | None
    score_per_1k_tokens: float | None
    score_per_usd: float | None
    cost_distribution: CostDistribution | None
    pass_at_k: Curve
    pass_hat_k: Curve


class Earned(_Model):
    earned: float
    available: float


class _Rubric(_Model):
    expert_score: float | None
    ci95: Ci
    pass_rate: float
    tags: dict[str, float | None]
    na: int
    audit_removed: int
    tasks: list[str]
    value: dict[str, Earned] = Field(description="currency -> value earned of value available")


class RubricBlock(KindEconomics, _Rubric):
    """The rubric block of an agent summary (fields of `_Rubric`, then the economics)."""


class Level(_Model):
    mean_s: float
    runs: int


class Family(_Model):
    mean_s: float
    variants: dict[str, float]
    spread: float
    runs: int


class _Scenario(_Model):
    mean_s: float
    ci95: Ci
    solved: int
    uplift_gross: float
    contact_cost: float | None
    router_fallbacks: int
    runs_with_router_fallbacks: int
    tasks: list[str]
    below_no_op: float | None
    levels: dict[str, Level] | None = None
    drop_L0_L1: float | None = None
    drop_L1_L3: float | None = None
    families: dict[str, Family]


class ScenarioBlock(KindEconomics, _Scenario):
    """The scenario block of an agent summary."""


class _Contract(_Model):
    accuracy: float | None
    ci95: Ci
    sat_rate: float | None = Field(description="over runs of tasks with a required artifact; null: none")
    cells: dict[str, float | None]
    modalities: dict[str, float | None]
    audit_removed: int
    tasks: list[str]


class ContractBlock(KindEconomics, _Contract):
    """The contract block of an agent summary."""


class JudgeSummary(_Model):
    agreement: float | None
    na: int
    votes: int
    runs: int
    items: int
    mode: list[str]
    judges: list[str]


class InterRater(_Model):
    n: int
    raw_agreement: float


class DomainAgreement(_Model):
    pearson_r: float | None
    p_value: float | None
    raw_agreement: float | None
    n: int
    inter_rater: InterRater | None = None


class AgentSummary(_Model):
    """One agent's entry of the report's `agents`."""

    agent: str
    runs: int
    void: int
    void_rate: float | None
    void_outlier: bool | None
    pass_rate: float | None
    economic_value: dict[str, float]
    cost_usd: float | None
    judge_cost_usd: float | None
    tokens: int
    pass_at_k: Curve
    pass_hat_k: Curve
    end_reasons: dict[str, int]
    rubric: RubricBlock | None = None
    judge: JudgeSummary | None = None
    human_agreement: dict[str, DomainAgreement] | None = None
    contract: ContractBlock | None = None
    scenario: ScenarioBlock | None = None
    mean_score: float | None = Field(description="the headline when the agent's runs are of one kind; else null")


class SearchDelta(_Model):
    delta: float
    tasks: int
    with_: float = Field(alias="with")
    without: float


class ParetoPoint(_Model):
    agent: str
    cost_usd: float
    mean_score: float


class TaskSet(_Model):
    shared: list[str]
    agents: dict[str, int]
    differ: bool
    missing: dict[str, list[str]]


class AgentMean(_Model):
    mean: float
    runs: int


class Baseline(_Model):
    mean: float
    ci95: Ci
    runs: int
    people: list[str]
    tasks: list[str]
    agents: dict[str, AgentMean]


class BrokenTask(_Model):
    task_id: str
    task_hash: str
    reason: str


class Skipped(_Model):
    file: str | None
    field: str | None
    reason: str
    line: int | None = None
    column: int | None = None


class EvidenceInterval(_Model):
    """One agent's anytime-valid interval of one kind's mean score (`--until-ci`)."""

    agent: str
    kind: str
    n: int
    mean: float | None
    lo: float
    hi: float
    half_width: float


class EvidencePaired(_Model):
    """The anytime-valid paired test of B against A on the keys both finished, round by round."""

    a: str
    b: str
    n: int = Field(description="pairs")
    mean_diff: float | None = Field(description="B - A, on scores scaled to [0, 1] per kind")
    sd: float | None = Field(description="standard deviation of the per-key differences")
    e_value: float
    p_value: float = Field(description="anytime-valid: 1 / the largest e-value so far")
    ci: list[float] = Field(description="confidence sequence of the mean difference")
    margin: float | None
    decision: Literal["b_better", "a_better", "equivalent"] | None
    decided_at: int | None = Field(description="the round of the decision")
    mde80: float | None = Field(description="minimum detectable difference of a fixed design of n pairs at 80% power")
    fixed_pairs: int | None = Field(description="pairs a fixed design needs for the observed difference at 80% power")
    runs: int | None = Field(default=None, description="runs of the paired keys, both agents (assay compare)")
    cost_usd: float | None = Field(default=None, description="their cost at the campaign's mean cost per run; None: a price unknown")
    fixed_runs: int | None = Field(default=None, description="runs of that fixed design, both agents (assay compare)")
    fixed_usd: float | None = Field(default=None, description="their cost at the same mean cost per run")


class Power(_Model):
    """What a fixed design of these pairs can detect, and what detecting `detect` would need."""

    n: int
    sd: float
    sd_basis: str
    alpha: float
    mde80: float | None
    detect: float | None = None
    n_detect: int | None = None
    runs_detect: int | None = None
    usd_detect: float | None = None


StopCode = Literal["ci", "decided", "max_epochs", "budget", "pool", "interrupted", "agent_stopped"]
"""Why rounds stopped: SPEC's five, and an interruption or an agent stopped (its key refused, its budget spent)."""


class Evidence(_Model):
    """`assay run --until-ci` / `--until-decided`: the rounds, why they stopped, and what was spent."""

    rule: Literal["until-ci", "until-decided"]
    interval: str = Field(description="which interval is shown")
    alpha: float
    width: float | None
    margin: float | None
    pool: bool
    seed: int | None
    rounds: int = Field(description="rounds run")
    rounds_max: int = Field(description="rounds the epochs or the pool allow")
    stopped: str = Field(description="why it stopped, in words")
    stopped_because: StopCode
    runs: int = Field(description="runs in the rounds run (the store holds these)")
    cost_usd: float
    fixed_runs: int | None = Field(description="runs a fixed design of the same power or width would need")
    intervals: list[EvidenceInterval]
    paired: EvidencePaired | None = None


class Adaptive(_Model):
    """The run report's `adaptive` object as SPEC writes it: the rounds' outcome in brief
    (`sequential` holds the whole `Evidence`)."""

    mode: Literal["until-ci", "until-decided"]
    decision: Literal["b_better", "a_better", "equivalent", "undecided"] | None = Field(
        description="None for --until-ci")
    stopped_because: StopCode
    rounds: int
    runs: int
    usd: float
    half_width: dict[str, dict[str, float]] = Field(description="agent -> kind -> half-width of its interval")
    fixed_design_runs: int | None

    @classmethod
    def of(cls, ev: Evidence) -> Adaptive:
        decision = None if ev.rule == "until-ci" else \
            (ev.paired.decision if ev.paired is not None and ev.paired.decision is not None else "undecided")
        widths: dict[str, dict[str, float]] = {}
        for iv in ev.intervals:
            widths.setdefault(iv.agent, {})[iv.kind] = iv.half_width
        return cls(mode=ev.rule, decision=decision, stopped_because=ev.stopped_because, rounds=ev.rounds,
                   runs=ev.runs, usd=ev.cost_usd, half_width=widths, fixed_design_runs=ev.fixed_runs)


class NoiseTask(_Model):
    """A task whose outcome flips across one agent's epochs (`assay noise`)."""

    task_id: str
    level: str | None
    epochs: int
    passes: int
    flakiness: float = Field(description="min(passes, fails) / epochs")


class NoiseAgent(_Model):
    """One agent's harness noise over its epochs."""

    agent: str
    runs: int = Field(description="finished (done, scored) current runs")
    epochs: int
    attempts: int = Field(description="stored attempts, void ones included")
    void_rate: float | None = Field(description="void attempts / attempts")
    epoch_means: list[float] = Field(description="mean score of each epoch, over the tasks scored in every epoch")
    between_epoch_var: float | None = Field(description="sample variance of the epoch means (None: one epoch)")
    within_task_var: float | None = Field(description="mean over tasks of the sample variance of a task's scores")
    flaky_tasks: int = Field(description="tasks whose outcome flips at all")
    flagged: list[NoiseTask] = Field(description="tasks whose flakiness exceeds the threshold")


class Noise(_Model):
    """`assay noise --json` (`assay.noise/1`)."""

    schema_: Literal["assay.noise/1"] = Field(default="assay.noise/1", alias="schema")
    campaign: str
    threshold: float
    agents: list[NoiseAgent]


class FailureModeRow(_Model):
    """One failed run's category and the judge's one-line reason."""

    run_id: str
    agent: str
    task_id: str
    category: str
    reason: str


class FailureAgent(_Model):
    failed: int
    counts: dict[str, int] = Field(description="category -> failed runs")
    shares: dict[str, float] = Field(description="category -> share of the agent's failed runs")


class FailureModes(_Model):
    """`assay report --failure-modes`: the judge, one row per failed run, per agent the counts."""

    judge: str
    categories: dict[str, str] = Field(description="category -> what it means")
    runs: list[FailureModeRow]
    agents: dict[str, FailureAgent]


class Report(_Model):
    """The report (`assay report --json`, `assay run --json`)."""

    schema_: Literal["assay.report/1"] = Field(alias="schema")
    campaign: str | None
    skipped: list[Skipped]
    runs: list[RunRow | TableRow]
    agents: list[AgentSummary]
    tasks: list[TaskRow]
    search_delta: dict[str, float]
    search_deltas: dict[str, dict[str, SearchDelta]]
    pareto: dict[str, list[ParetoPoint]]
    pareto_points: dict[str, list[ParetoPoint]]
    shared_tasks: bool
    task_sets: dict[str, TaskSet]
    human_baseline: dict[str, dict[str, Baseline]]
    broken_tasks: list[BrokenTask]
    warnings: list[str]
    failure_modes: FailureModes | None = None
    sequential: Evidence | None = None
    adaptive: Adaptive | None = None


def summary_model(report: dict[str, Any]) -> Report:
    """The report's numbers as a `Report`, without its per-run and per-task rows (`runs` and
    `tasks` empty: whoever lists them reads the rows themselves, never all validated at once;
    `tasks` may be an iterator that only `export.write_json` takes)."""
    return Report.model_validate({**report, "runs": [], "tasks": []})


class PairedStats(_Model):
    """`assay compare`'s statistics of one kind's pairs (or all of them)."""

    n: int
    mean_a: float | None
    mean_b: float | None
    diff: float | None = Field(description="B - A")
    ci95: Ci
    p_value: float | None
    wins: int
    losses: int
    ties: int


class KeyRef(_Model):
    task_id: str
    level: str | None
    epoch: int


class Compare(_Model):
    """`assay compare --json` (`assay.compare/1`)."""

    schema_: Literal["assay.compare/1"] = Field(alias="schema")
    a: str
    b: str
    campaign: str | None
    against_campaign: str | None
    kinds: dict[str, PairedStats]
    overall: PairedStats
    only_a: list[KeyRef]
    only_b: list[KeyRef]
    sequential: EvidencePaired | None = None
    power: Power | None = None
