"""Migration 0007's run summaries (table `run_summaries`), kept for the migrations that build
them (0006, 0007) and for 0009's downgrade, which brings them back: the store no longer writes
or reads them (issue 26: a report is a query over `current_runs`, `assay.store.current`).

What 0007 kept of each run: the run's columns a report selected, ordered by or found different
in each run (copied); the values that mostly repeat from run to run as one JSON array
(`RECURRING`); small JSON values as text; token counts and costs as numbers; of its grade the
fields the leaderboard read (`GRADE_KEYS`). The table is defined here, as 0007 created it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Float,
    ForeignKey,
    MetaData,
    String,
    Table,
    Text,
    select,
)

from assay.record import json_text
from assay.store.models import NAMING, REPORT_COLUMNS, runs_t

SUMMARY_RUN_COLUMNS = ("key_digest", "created_at", "campaign", "task_id", "task_hash", "agent", "level", "epoch",
                       "attempt", "score", "passed")
"""The `runs` columns a summary repeats as columns (its run id is its key)."""

_metadata = MetaData(naming_convention=NAMING)
_runs_ref = Table("runs", _metadata, Column("run_id", String(64), primary_key=True))
summaries_t: Table = Table(
    "run_summaries",
    _metadata,
    Column("run_id", String(64), ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True),
    *[Column(n, runs_t.c[n].type, nullable=runs_t.c[n].nullable, index=n == "campaign") for n in SUMMARY_RUN_COLUMNS],
    Column("recurring", Text, nullable=False),  # JSON array: `RECURRING`' values
    Column("value", Text, nullable=True),
    Column("task_meta", Text, nullable=True),
    Column("input_tokens", BigInteger, nullable=False),
    Column("output_tokens", BigInteger, nullable=False),
    Column("cache_read_tokens", BigInteger, nullable=False),
    Column("cache_write_tokens", BigInteger, nullable=False),
    Column("cost_usd", Float, nullable=True),
    Column("judge_cost_usd", Float, nullable=True),
    Column("tags", Text, nullable=True),
    Column("grade", Text, nullable=False),  # JSON array: `GRADE_KEYS`' values
)

TASK_FACETS = ("domain", "modality", "execution")
"""The keys of a task's meta a leaderboard reads (human agreement per domain, DAREBench's
modality x execution cells and Pareto fronts): kept among a run's recurring values, so a
leaderboard reads no task's whole meta."""

RECURRING = ("campaign", "agent", "level", "options_hash", "status", "end_reason", "harness_version", "model",
             "sandbox", "kinds", "options", "facets")
"""The run's values kept as one JSON array (`recurring`): most runs of a campaign share them.
`facets` is the task meta's `TASK_FACETS` keys (those it has); `kinds` and `options` are the
record's values (null: absent or null)."""
_RUN_RECURRING = RECURRING[:-3]
"""The recurring values that are the run's columns."""

JSON_VALUES = ("value", "task_meta")
"""The record's top-level values a summary keeps as JSON text (NULL: absent or null)."""

USAGE_KEYS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")

GRADE_KEYS = ("scoring", "na", "judge_info", "uplift_adj", "contact_cost", "solved", "router_fallback_count", "sat",
              "predicates", "audit")
"""The flat grade's fields a summary keeps (one JSON array, null for absent): what the
leaderboard reads of a grade besides its tags (kept apart: they differ from run to run while
these mostly repeat, so a reader parses this text once per distinct grade shape)."""



def summary_row(run: Mapping[str, Any], rec: Mapping[str, Any]) -> dict[str, Any]:
    """The `run_summaries` row of a run: `run` its `runs` row (`REPORT_COLUMNS`, `key_digest`,
    `created_at`), `rec` its record's JSON object. A cost absent from the record is 0 (the
    record's default), a null one unknown; absent token counts are 0."""
    usage, judge, grade = rec.get("usage") or {}, rec.get("judge_usage") or {}, rec.get("grade") or {}
    row = {n: run[n] for n in ("run_id", *SUMMARY_RUN_COLUMNS)}
    meta = rec.get("task_meta") or {}
    facets = {k: meta[k] for k in TASK_FACETS if k in meta}
    row["recurring"] = json_text([run[n] for n in _RUN_RECURRING] + [rec.get("kinds"), rec.get("options"), facets])
    for n in JSON_VALUES:
        v = rec.get(n)
        row[n] = None if v is None else json_text(v)
    for n in USAGE_KEYS:
        row[n] = usage.get(n) or 0
    row["cost_usd"] = usage.get("cost_usd", 0.0)
    row["judge_cost_usd"] = judge.get("cost_usd", 0.0)
    tags = grade.get("tags")
    row["tags"] = None if tags is None else json_text(tags)
    row["grade"] = json_text([grade.get(k) for k in GRADE_KEYS])
    return row


REBUILD_BATCH = 1000


def rebuild_summaries(conn: Connection) -> int:
    """Recompute every run's summary from its stored record (the table dropped and created
    as `models.summaries_t` defines it, so table and rows always agree); the runs summarised.
    Runs are read in batches by run id, so memory stays flat however many there are."""
    summaries_t.drop(conn, checkfirst=True)
    summaries_t.create(conn)
    c = runs_t.c
    stmt = select(c.key_digest, c.created_at, *[c[n] for n in REPORT_COLUMNS], c.record).order_by(c.run_id)
    names = ("key_digest", "created_at", *REPORT_COLUMNS)
    last: str | None = None
    done = 0
    while True:
        page = conn.execute((stmt if last is None else stmt.where(c.run_id > last)).limit(REBUILD_BATCH)).all()
        if not page:
            return done
        conn.execute(summaries_t.insert(), [summary_row(dict(zip(names, row[:-1], strict=True)), json.loads(row[-1]))
                                            for row in page])
        done += len(page)
        last = page[-1].run_id
