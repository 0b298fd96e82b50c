"""The run view a report is built from: the fields of a stored run that reports read, as
light slotted objects built from plain JSON, not one validated pydantic `RunRecord` per run.

A report over 100,000 runs spends most of its time validating full records it reads a dozen
fields of (issue 11). `ReportRun` holds those fields under the same names `RunRecord` uses
(`key.task_id`, `usage.cost_usd`, `grade.rubric.tags`, ...), so the report code reads either
the same way. Two sources build it:
- `ReportRun.from_record`: a `RunRecord` already in memory (a campaign that just ran, the web
  app) through its JSON dump;
- `Store.report_runs` (`assay.store.db`): the stored record's JSON, whole (`full=True`: what
  the per-run rows of `--json`, `--csv`, `--md`, `--html` need) or as the projection
  `PROJECTED` names (the terminal report), which SQLite extracts in C without parsing the
  transcript-sized fields (final message, rubric items).

The grade's parts follow `Grade.from_flat`: a kind's part exists when the run has the kind
and its flat grade has that part's always-dumped field (`scoring` for rubric, `uplift_adj`
for scenario, `sat` for contract); the defaults below are `assay.record`'s.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import Any

from assay.record import RunRecord, primary_kind
from assay.store import Store

# The flat grade's keys the terminal report reads (the rubric's `items` only with human labels).
GRADE_KEYS = ("scoring", "tags", "na", "judge_info", "uplift_adj", "contact_cost", "solved",
              "router_fallback_count", "sat", "predicates", "audit", "grade_seconds")
# The record's keys the terminal report reads besides the store's columns (`grade` as above).
RECORD_KEYS = ("kinds", "value", "usage", "judge_usage", "options", "task_meta", "void_reason", "turns",
               "duration_s", "search")


class ReportUsage:
    __slots__ = ("cache_read_tokens", "cache_write_tokens", "cost_usd", "input_tokens", "output_tokens", "tokens")

    def __init__(self, raw: dict[str, Any] | None) -> None:
        get = (raw or {}).get
        self.input_tokens: int = get("input_tokens", 0)
        self.output_tokens: int = get("output_tokens", 0)
        self.cache_read_tokens: int = get("cache_read_tokens", 0)
        self.cache_write_tokens: int = get("cache_write_tokens", 0)
        self.cost_usd: float | None = get("cost_usd", 0.0)
        self.tokens: int = self.input_tokens + self.output_tokens + self.cache_read_tokens + self.cache_write_tokens

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

    def __init__(self, flat: dict[str, Any]) -> None:
        self.scoring: str = flat.get("scoring", "clipped")
        self.tags: dict[str, float | None] = flat.get("tags") or {}
        self.na: int = flat.get("na", 0)
        ji = flat.get("judge_info")
        self.judge_info: ReportJudgeInfo | None = ReportJudgeInfo(ji) if ji is not None else None
        self.items: list[ReportItem] = [ReportItem(it) for it in flat.get("items") or []]


class ReportScenario:
    __slots__ = ("contact_cost", "router_fallback_count", "solved", "uplift_adj")

    def __init__(self, flat: dict[str, Any]) -> None:
        self.uplift_adj: float = flat["uplift_adj"]
        self.contact_cost: float = flat.get("contact_cost", 0.0)
        self.solved: bool = flat.get("solved", False)
        self.router_fallback_count: int = flat.get("router_fallback_count", 0)


class ReportPredicate:
    __slots__ = ("required",)

    def __init__(self, raw: dict[str, Any]) -> None:
        self.required: bool = raw.get("required", True)


class ReportContract:
    __slots__ = ("predicates", "sat")

    def __init__(self, flat: dict[str, Any]) -> None:
        self.sat: bool = flat.get("sat", True)
        self.predicates: list[ReportPredicate] = [ReportPredicate(p) for p in flat.get("predicates") or []]


class ReportAudit:
    __slots__ = ("removed",)

    def __init__(self, raw: dict[str, Any]) -> None:
        self.removed: int = raw.get("removed", 0)


class ReportGrade:
    """A run's grade as reports read it; `flat()` is SPEC's flat object as stored (only when
    the whole record was read)."""

    __slots__ = ("_flat", "audit", "contract", "rubric", "scenario")

    def __init__(self, flat: dict[str, Any], kinds: list[str], whole: bool) -> None:
        self._flat = flat if whole else None
        self.rubric = ReportRubric(flat) if "rubric" in kinds and "scoring" in flat else None
        self.scenario = ReportScenario(flat) if "scenario" in kinds and "uplift_adj" in flat else None
        self.contract = ReportContract(flat) if "contract" in kinds and "sat" in flat else None
        audit = flat.get("audit")
        self.audit = ReportAudit(audit) if audit is not None else None

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


class ReportRun:
    """One stored run as a report reads it (see the module docstring)."""

    __slots__ = ("attempt", "duration_s", "end_reason", "grade", "harness_version", "judge_usage", "key", "kind",
                 "kinds", "model", "options", "passed", "run_id", "sandbox", "score", "search", "status",
                 "task_meta", "turns", "usage", "value", "void_reason")

    def __init__(self, cols: dict[str, Any], rec: dict[str, Any], grade: dict[str, Any], whole: bool) -> None:
        """`cols`: the store's columns (run_id, campaign, task_id, task_hash, agent, level, epoch,
        options_hash, attempt, status, end_reason, score, passed, harness_version, model,
        sandbox); `rec`: the record's JSON keys of `RECORD_KEYS` (or all of them); `grade`:
        the flat grade (or its `GRADE_KEYS`); `whole`: `grade` is the whole flat grade."""
        self.run_id: str = cols["run_id"]
        self.key = ReportKey(cols["campaign"], cols["task_id"], cols["task_hash"], cols["agent"], cols["level"],
                             cols["epoch"], cols["options_hash"])
        self.attempt: int = cols["attempt"]
        self.status: str = cols["status"]
        self.end_reason: str = cols["end_reason"]
        self.score: float | None = cols["score"]
        passed = cols["passed"]
        self.passed: bool | None = None if passed is None else bool(passed)
        self.harness_version: str = cols["harness_version"]
        self.model: str | None = cols["model"]
        self.sandbox: str = cols["sandbox"]
        self.kinds: list[str] = list(rec.get("kinds") or [])
        self.kind: str = primary_kind(self.kinds)
        self.value: dict[str, Any] | None = rec.get("value")
        self.usage = ReportUsage(rec.get("usage"))
        self.judge_usage = ReportUsage(rec.get("judge_usage"))
        self.options: dict[str, Any] = rec.get("options") or {}
        self.task_meta: dict[str, Any] = rec.get("task_meta") or {}
        self.void_reason: str | None = rec.get("void_reason")
        self.turns: int = rec.get("turns", 0)
        self.duration_s: float = rec.get("duration_s", 0.0)
        self.search: str | None = rec.get("search")
        self.grade = ReportGrade(grade or {}, self.kinds, whole)

    @classmethod
    def from_dict(cls, cols: dict[str, Any], rec: dict[str, Any], whole: bool) -> ReportRun:
        """From a record's JSON object (`rec`, whole or the projection) and the store's columns."""
        return cls(cols, rec, rec.get("grade") or {}, whole)

    @classmethod
    def from_record(cls, r: RunRecord) -> ReportRun:
        """From a record in memory (its JSON dump: the same values the store holds)."""
        rec = r.model_dump(mode="json")
        k = rec["key"]
        cols = {"run_id": r.run_id, "campaign": k["campaign"], "task_id": k["task_id"], "task_hash": k["task_hash"],
                "agent": k["agent"], "level": k["level"], "epoch": k["epoch"], "options_hash": k["options_hash"],
                "attempt": r.attempt, "status": r.status, "end_reason": r.end_reason, "score": r.score,
                "passed": r.passed, "harness_version": r.harness_version, "model": r.model, "sandbox": r.sandbox}
        return cls.from_dict(cols, rec, whole=True)


def as_report_runs(runs: Any) -> list[ReportRun]:
    """Runs as `ReportRun`s: `RunRecord`s are converted, `ReportRun`s kept."""
    return [r if isinstance(r, ReportRun) else ReportRun.from_record(r) for r in runs]


def read_runs(store: Store, campaign: str | None, *, whole: bool, items: bool = False) -> list[ReportRun]:
    """The latest attempt per run key of `campaign` as `ReportRun`s, in `Store.runs` order:
    `whole` reads every record whole (the per-run rows of a report file need it), else only
    the projection a leaderboard reads (`items`: with the rubric's items, for human labels)."""
    with no_gc():
        if whole:
            rows = store.report_rows(campaign)
        else:
            rows = store.report_rows(campaign, RECORD_KEYS, (*GRADE_KEYS, "items") if items else GRADE_KEYS)
        return [ReportRun.from_dict(cols, rec, whole) for cols, rec in rows]


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """Garbage collection off for a block that allocates many small objects per run (reading
    and building a report): collections would rescan them all (20-50% of the time)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
