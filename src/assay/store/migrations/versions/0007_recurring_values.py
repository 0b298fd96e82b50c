"""Run summaries with the values most runs share in one JSON array (`recurring`: campaign,
agent, level, options hash, status, end reason, harness version, model, sandbox, kinds,
options and the task's facets) in place of a column each, and without the columns no report
reads: a leaderboard over 100,000 runs on SQLite reads 18 values per run instead of 29, and
SQLite's sort carries each (issue 11).

The summaries are derived data: `summaries.rebuild_summaries` recomputes every run's from its
record, on SQLite and PostgreSQL alike; downgrading rebuilds 0006's table the same way.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from alembic import op

from assay.record import json_text
from assay.store.migrations.summaries_0007 import GRADE_KEYS, USAGE_KEYS, rebuild_summaries

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    rebuild_summaries(op.get_bind())


_COPIED_0006: dict[str, sa.types.TypeEngine[Any]] = {"key_digest": sa.String(64), "created_at": sa.Float(), "campaign": sa.String(200),
                "task_id": sa.String(300), "task_hash": sa.String(128), "agent": sa.String(200),
                "level": sa.String(100), "epoch": sa.Integer(), "options_hash": sa.String(128),
                "attempt": sa.Integer(), "status": sa.String(16), "end_reason": sa.String(32), "score": sa.Float(),
                "passed": sa.Boolean(), "harness_version": sa.String(100), "model": sa.String(200),
                "sandbox": sa.String(16)}
"""0006's copies of the `runs` columns, typed as there."""
_NULLABLE = ("level", "score", "passed", "model")
_JSON_0006 = ("kinds", "value", "options", "task_meta")
_BATCH = 1000


def _row_0006(row: Any) -> dict[str, Any]:
    rec = json.loads(row.record)
    usage, judge, grade = rec.get("usage") or {}, rec.get("judge_usage") or {}, rec.get("grade") or {}
    out: dict[str, Any] = {n: getattr(row, n) for n in ("run_id", *_COPIED_0006)}
    for n in _JSON_0006:
        out[n] = None if rec.get(n) is None else json_text(rec[n])
    out.update({n: usage.get(n) or 0 for n in USAGE_KEYS})
    out["cost_usd"] = usage.get("cost_usd", 0.0)
    out["judge_cost_usd"] = judge.get("cost_usd", 0.0)
    out["tags"] = None if grade.get("tags") is None else json_text(grade["tags"])
    out["grade"] = json_text([grade.get(k) for k in GRADE_KEYS])
    return out


def downgrade() -> None:
    """Back to 0006's table (a column per run value, kinds and options as JSON text), its rows
    recomputed from the records in batches by run id."""
    op.drop_table("run_summaries")
    table = op.create_table(
        "run_summaries",
        sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True),
        *[sa.Column(n, t, nullable=n in _NULLABLE, index=n == "campaign") for n, t in _COPIED_0006.items()],
        *[sa.Column(n, sa.Text(), nullable=True) for n in _JSON_0006],
        *[sa.Column(n, sa.BigInteger(), nullable=False) for n in USAGE_KEYS],
        sa.Column("cost_usd", sa.Float(), nullable=True),
        sa.Column("judge_cost_usd", sa.Float(), nullable=True),
        sa.Column("tags", sa.Text(), nullable=True),
        sa.Column("grade", sa.Text(), nullable=False),
    )
    runs = sa.table("runs", sa.column("run_id"), *[sa.column(n) for n in _COPIED_0006], sa.column("record"))
    stmt = sa.select(runs).order_by(runs.c.run_id)
    conn, last = op.get_bind(), None
    while page := conn.execute((stmt if last is None else stmt.where(runs.c.run_id > last)).limit(_BATCH)).all():
        conn.execute(table.insert(), [_row_0006(row) for row in page])
        last = page[-1].run_id
