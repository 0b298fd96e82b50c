"""Run summaries as plain columns: the run's own columns, its small JSON values as text, its
token counts and costs as numbers, the grade fields a leaderboard reads (`assay.store.summaries`),
in place of 0005's one JSON summary per run: a report over 100,000 runs then parses no record
and reads no path out of one (issue 11).

Every run's summary is recomputed from its record, on SQLite and PostgreSQL alike (0005 gave
PostgreSQL's older runs none), by `summaries.rebuild_summaries`, which creates the table as the
models define it: a later change to the summary's columns comes with a migration that calls
it again.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlite3

import sqlalchemy as sa
from alembic import op

from assay.store.migrations.summaries_0007 import rebuild_summaries

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    rebuild_summaries(op.get_bind())


def downgrade() -> None:
    """Back to 0005's table (one JSON summary per run: the record without its final message
    and rubric items), computed in SQL on SQLite as 0005 did; PostgreSQL's runs get none."""
    op.drop_table("run_summaries")
    op.create_table(
        "run_summaries",
        sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True),
        sa.Column("summary", sa.Text(), nullable=False),
    )
    if op.get_bind().dialect.name == "sqlite" and sqlite3.sqlite_version_info >= (3, 38, 0):
        op.execute("INSERT INTO run_summaries (run_id, summary) SELECT run_id, "
                   "json_remove(record, '$.final_message', '$.grade.items') FROM runs WHERE json_valid(record)")
