"""The run view of the reports that read runs one by one: the fields of a stored run that a
report's per-run rows and judge-human agreement read, as light slotted objects built from plain
JSON, not one validated pydantic `RunRecord` per run.

A report's numbers are SQL over the current runs (`assay.store.report_queries`); runs are
still read one by one where an output lists them or a statistic needs their items:
- `stream_whole`: the per-run rows of `--json`, `--csv` and the web app, each from its whole
  record (`ReportRun.from_dict`), one at a time;
- `labelled_runs`: the runs human labels name, from their current rows
  (`ReportRun.from_current`) with their rubric items, for judge-human agreement;
- `ReportRun.from_record`: a `RunRecord` in memory (`run_row` of a run just made).

`ReportRun` holds those fields under the same names `RunRecord` uses (`key.task_id`,
`usage.cost_usd`, `grade.rubric.tags`, ...), so the code reads either the same way. The
grade's parts follow `Grade.from_flat`: a kind's part exists when the run has the kind and its
flat grade has that part's always-dumped field (`scoring` for rubric, `uplift_adj` for
scenario, `sat` for contract); the defaults below are `assay.record`'s.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import select

from assay.record import RunRecord, key_digest, primary_kind
from assay.store import Store, current
from assay.store.models import runs_t

TASK_FACETS = ("domain", "modality", "execution")
"""The keys of a task's meta a leaderboard reads (human agreement per domain, DAREBench's
modality x execution cells and Pareto fronts): the current runs keep them as columns."""


class ReportUsage:
    __slots__ = ("cache_read_tokens", "cache_write_tokens", "cost_usd", "input_tokens", "output_tokens", "tokens")

    def __init__(self, input_tokens: int, output_tokens: int, cache_read_tokens: int, cache_write_tokens: int,
                 cost_usd: float | None) -> None:
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.cache_read_tokens = cache_read_tokens
        self.cache_write_tokens = cache_write_tokens
        self.cost_usd = cost_usd
        self.tokens: int = input_tokens + output_tokens + cache_read_tokens + cache_write_tokens

    @classmethod
    def from_raw(cls, raw: dict[str, Any] | None) -> ReportUsage:
        get = (raw or {}).get
        return cls(get("input_tokens", 0), get("output_tokens", 0), get("cache_read_tokens", 0),
                   get("cache_write_tokens", 0), get("cost_usd", 0.0))

    def model_dump(self) -> dict[str, Any]:
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "cache_read_tokens": self.cache_read_tokens, "cache_write_tokens": self.cache_write_tokens,
                "cost_usd": self.cost_usd}


class ReportItem:
    __slots__ = ("check", "hit", "id", "na", "weight")

    def __init__(self, raw: dict[str, Any]) -> None:
        self.id: str = raw["id"]
        self.weight: float = raw["weight"]
        self.hit: bool | None = raw.get("hit")
        self.na: bool = raw.get("na", False)
        self.check: bool = raw.get("check", False)


class ReportJudgeInfo:
    __slots__ = ("agreed", "answered", "judges", "mode", "na", "votes")

    def __init__(self, raw: dict[str, Any]) -> None:
        self.agreed: int = raw.get("agreed", 0)
        self.answered: int = raw.get("answered", 0)
        self.na: int = raw.get("na", 0)
        self.votes: int = raw.get("votes", 1)
        self.mode: str = raw.get("mode", "batched")
        self.judges: list[str] = list(raw.get("judges") or [])


class ReportRubric:
    __slots__ = ("items", "judge_info", "na", "scoring", "tags")

    def __init__(self, scoring: str | None, tags: dict[str, float | None] | None, na: int | None,
                 judge_info: dict[str, Any] | None, items: list[dict[str, Any]] | None) -> None:
        """Each argument as the flat grade holds it (None: absent, the default)."""
        self.scoring: str = "clipped" if scoring is None else scoring
        self.tags: dict[str, float | None] = tags or {}
        self.na: int = 0 if na is None else na
        self.judge_info: ReportJudgeInfo | None = ReportJudgeInfo(judge_info) if judge_info is not None else None
        self.items: list[ReportItem] = [ReportItem(it) for it in items or []]


class ReportScenario:
    __slots__ = ("contact_cost", "router_fallback_count", "solved", "uplift_adj")

    def __init__(self, uplift_adj: float, contact_cost: float | None, solved: bool | None,
                 router_fallback_count: int | None) -> None:
        self.uplift_adj = uplift_adj
        self.contact_cost: float = 0.0 if contact_cost is None else contact_cost
        self.solved: bool = bool(solved)
        self.router_fallback_count: int = 0 if router_fallback_count is None else router_fallback_count


class ReportPredicate:
    __slots__ = ("required",)

    def __init__(self, raw: dict[str, Any]) -> None:
        self.required: bool = raw.get("required", True)


class ReportContract:
    __slots__ = ("predicates", "sat")

    def __init__(self, sat: bool, predicates: list[dict[str, Any]] | None) -> None:
        self.sat = bool(sat)
        self.predicates: list[ReportPredicate] = [ReportPredicate(p) for p in predicates or []]


class ReportAudit:
    __slots__ = ("removed",)

    def __init__(self, raw: dict[str, Any]) -> None:
        self.removed: int = raw.get("removed", 0)


class ReportGrade:
    """A run's grade as reports read it; `flat()` is SPEC's flat object as stored (only when
    the whole record was read)."""

    __slots__ = ("_flat", "audit", "contract", "rubric", "scenario")

    def __init__(self, flat: dict[str, Any] | None, rubric: ReportRubric | None, scenario: ReportScenario | None,
                 contract: ReportContract | None, audit: dict[str, Any] | None) -> None:
        self._flat = flat
        self.rubric = rubric
        self.scenario = scenario
        self.contract = contract
        self.audit = ReportAudit(audit) if audit is not None else None

    @classmethod
    def from_flat(cls, flat: dict[str, Any], kinds: list[str]) -> ReportGrade:
        """From the whole flat grade (`Grade.from_flat`'s parts; see the module docstring)."""
        get = flat.get
        return cls(
            flat,
            ReportRubric(get("scoring"), get("tags"), get("na"), get("judge_info"), get("items"))
            if "rubric" in kinds and get("scoring") is not None else None,
            ReportScenario(flat["uplift_adj"], get("contact_cost"), get("solved"), get("router_fallback_count"))
            if "scenario" in kinds and get("uplift_adj") is not None else None,
            ReportContract(flat["sat"], get("predicates")) if "contract" in kinds and get("sat") is not None else None,
            get("audit"))

    def flat(self) -> dict[str, Any]:
        if self._flat is None:
            raise ValueError("the grade was read as a projection: read the whole record for per-run rows")
        return dict(self._flat)


class ReportKey:
    __slots__ = ("agent", "campaign", "epoch", "level", "options_hash", "task_hash", "task_id")

    def __init__(self, campaign: str, task_id: str, task_hash: str, agent: str, level: str | None, epoch: int,
                 options_hash: str) -> None:
        self.campaign = campaign
        self.task_id = task_id
        self.task_hash = task_hash
        self.agent = agent
        self.level = level
        self.epoch = epoch
        self.options_hash = options_hash

    @property
    def digest(self) -> str:
        """`RunKey.digest` of the same key."""
        return key_digest({n: getattr(self, n) for n in self.__slots__})


class ReportRun:
    """One stored run as a report reads it (see the module docstring)."""

    __slots__ = ("attempt", "duration_s", "end_reason", "grade", "harness_version", "judge_usage", "key", "kind",
                 "kinds", "model", "options", "passed", "run_id", "sandbox", "score", "search", "status",
                 "task_meta", "turns", "usage", "value", "void_reason")

    def __init__(self, cols: Sequence[Any], kinds: list[str] | None, value: dict[str, Any] | None,
                 options: dict[str, Any] | None, task_meta: dict[str, Any] | None, void_reason: str | None,
                 turns: int | None, duration_s: float | None, search: str | None, usage: ReportUsage,
                 judge_usage: ReportUsage, grade: ReportGrade) -> None:
        """`cols`: the store's columns in `Store.REPORT_COLUMNS` order (run_id, campaign,
        task_id, task_hash, agent, level, epoch, options_hash, attempt, status, end_reason,
        score, passed, harness_version, model, sandbox); the rest the record's values (None:
        absent or null, the default)."""
        (self.run_id, campaign, task_id, task_hash, agent, level, epoch, options_hash, self.attempt, self.status,
         self.end_reason, self.score, passed, self.harness_version, self.model, self.sandbox) = cols
        self.key = ReportKey(campaign, task_id, task_hash, agent, level, epoch, options_hash)
        self.passed: bool | None = None if passed is None else bool(passed)
        self.kinds: list[str] = list(kinds or [])
        self.kind: str = primary_kind(self.kinds)
        self.value: dict[str, Any] | None = value
        self.usage = usage
        self.judge_usage = judge_usage
        self.options: dict[str, Any] = options or {}
        self.task_meta: dict[str, Any] = task_meta or {}
        self.void_reason: str | None = void_reason
        self.turns: int = 0 if turns is None else turns
        self.duration_s: float = 0.0 if duration_s is None else duration_s
        self.search: str | None = search
        self.grade = grade

    @classmethod
    def from_dict(cls, cols: Sequence[Any], rec: dict[str, Any]) -> ReportRun:
        """From the store's columns and a record's whole JSON object."""
        kinds = list(rec.get("kinds") or [])
        get = rec.get
        return cls(cols, kinds, get("value"), get("options"), get("task_meta"), get("void_reason"), get("turns"),
                   get("duration_s"), get("search"), ReportUsage.from_raw(get("usage")),
                   ReportUsage.from_raw(get("judge_usage")), ReportGrade.from_flat(get("grade") or {}, kinds))

    @classmethod
    def from_current(cls, row: Sequence[Any], shared: dict[Any, Any]) -> ReportRun:
        """From a row of the store's current runs (`ReportQuery.current_rows`: `current.READ`'s
        columns). Its task meta is the task's facets (`TASK_FACETS`), its options the search
        mode, its judge usage the cost. `shared` (one dict per read) keeps one object per
        distinct grade, usage of the judge and facets: runs graded alike share them (read them,
        never change them: `labelled_runs` gives a labelled run a grade of its own)."""
        (run_id, campaign, task_id, task_hash, agent, level, epoch, options_hash, attempt, status, end_reason, score,
         passed, harness, model, sandbox, kinds_text, void_reason, _started, search_mode, search, domain, modality,
         execution, u_in, u_out, u_cr, u_cw, u_cost, j_cost, v_amount, v_currency, removed, scoring, na, tags,
         j_agreed, j_answered, j_na, j_votes, j_mode, judges, uplift_adj, contact_cost, solved, router_fallbacks,
         sat, sat_required) = row
        kinds = shared.get(kinds_text)
        if kinds is None:
            kinds = shared[kinds_text] = kinds_text.split(",") if kinds_text else []
        judge = shared.get(("judge", j_cost))
        if judge is None:
            judge = shared[("judge", j_cost)] = ReportUsage(0, 0, 0, 0, j_cost)
        facets_key = ("facets", domain, modality, execution)
        meta = shared.get(facets_key)
        if meta is None:
            meta = shared[facets_key] = {k: v for k, v in zip(TASK_FACETS, (domain, modality, execution), strict=True)
                                         if v is not None}
        grade_key = (kinds_text, removed, scoring, na, tags, j_agreed, j_answered, j_na, j_votes, j_mode, judges,
                     uplift_adj, contact_cost, solved, router_fallbacks, sat, sat_required)
        graded = shared.get(grade_key)
        if graded is None:
            info = None if j_agreed is None else {"agreed": j_agreed, "answered": j_answered, "na": j_na,
                                                   "votes": j_votes, "mode": j_mode,
                                                   "judges": json.loads(judges) if judges else []}
            graded = shared[grade_key] = ReportGrade(
                None,
                ReportRubric(scoring, json.loads(tags) if tags else None, na, info, None)
                if scoring is not None else None,
                ReportScenario(uplift_adj, contact_cost, solved, router_fallbacks) if uplift_adj is not None else None,
                ReportContract(sat, [{"required": bool(sat_required)}]) if sat is not None else None,
                {"removed": removed})
        options = {} if search_mode == "off" else {"search": search_mode}
        value = None if v_amount is None else {"amount": v_amount, "currency": v_currency}
        return cls((run_id, campaign, task_id, task_hash, agent, level, epoch, options_hash, attempt, status,
                    end_reason, score, passed, harness, model, sandbox), kinds, value, options, meta, void_reason,
                   None, None, search, ReportUsage(u_in, u_out, u_cr, u_cw, u_cost), judge, graded)

    @classmethod
    def from_record(cls, r: RunRecord) -> ReportRun:
        """From a record in memory (its JSON dump: the same values the store holds)."""
        rec = r.model_dump(mode="json")
        k = rec["key"]
        cols = {"run_id": r.run_id, "campaign": k["campaign"], "task_id": k["task_id"], "task_hash": k["task_hash"],
                "agent": k["agent"], "level": k["level"], "epoch": k["epoch"], "options_hash": k["options_hash"],
                "attempt": r.attempt, "status": r.status, "end_reason": r.end_reason, "score": r.score,
                "passed": r.passed, "harness_version": r.harness_version, "model": r.model, "sandbox": r.sandbox}
        return cls.from_dict([cols[n] for n in Store.REPORT_COLUMNS], rec)


LABEL_TASKS_PER_READ = 500
"""Tasks named in one statement (an IN list) when the labelled runs are read."""


def labelled_runs(q: Any, labels: list[dict[str, Any]]) -> dict[str, list[ReportRun]]:
    """Per agent, the counted runs of a report query (`ReportQuery`) that some human label
    names (`agreement.labelled`), each with its rubric items (`ReportQuery.grade_items`): what
    judge-human agreement compares, read for those runs only."""
    from assay.report.agreement import labelled

    shared: dict[Any, Any] = {}
    tasks = sorted({str(lab["task_id"]) for lab in labels if lab.get("task_id") is not None})
    read = [ReportRun.from_current(row, shared) for i in range(0, len(tasks), LABEL_TASKS_PER_READ)
            for row in q.current_rows(tasks[i:i + LABEL_TASKS_PER_READ])]
    runs = labelled(read, labels)
    named = [(r, rg) for r in runs if (rg := r.grade.rubric) is not None]
    items = q.grade_items([r.run_id for r, _rg in named])
    out: dict[str, list[ReportRun]] = {}
    for r, rg in named:  # its own grade: runs graded alike share theirs
        grade, rubric = copy.copy(r.grade), copy.copy(rg)
        rubric.items = [ReportItem(it) for it in items.get(r.run_id, [])]
        grade.rubric = rubric
        r.grade = grade
    for r in runs:
        out.setdefault(r.key.agent, []).append(r)
    return out


STREAM_BATCH = 500
"""Whole records fetched at a time by `stream_whole` (memory stays flat however many runs)."""


def stream_whole(store: Store, run_ids: Sequence[str]) -> Iterator[ReportRun]:
    """The current runs of these ids (in this order: the report's), each built from its whole
    record, one at a time: the per-run rows of `--json` and `--csv` are written as they come,
    never all held. Records are fetched `STREAM_BATCH` at a time by run id, so nothing sorts
    the records themselves (`ReportRun.from_dict`)."""
    c = current.current_t.c
    stmt = (select(*[c[n] for n in Store.REPORT_COLUMNS], runs_t.c.record)
            .join(runs_t, runs_t.c.run_id == c.run_id))
    n = len(Store.REPORT_COLUMNS)
    with store.engine.connect() as conn:
        for start in range(0, len(run_ids), STREAM_BATCH):
            chunk = run_ids[start:start + STREAM_BATCH]
            rows = {row[0]: row for row in conn.execute(stmt.where(c.run_id.in_(chunk)))}
            for rid in chunk:
                row = rows.pop(rid, None)
                if row is not None:
                    yield ReportRun.from_dict(row[:n], json.loads(row[n]))
