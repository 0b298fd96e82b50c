"""Run summaries: each stored record without its transcript-sized fields (the final message,
the rubric's items), in a table of its own, so a report over 100,000 runs reads and parses
about a kilobyte per run, not the whole answer (issue 11).

On SQLite the summaries of the runs already stored are computed here, in SQL; on PostgreSQL
those runs get none and reads fall back to their whole record.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlite3

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "run_summaries",
        sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True),
        sa.Column("summary", sa.Text(), nullable=False),
    )
    # Records SQLite cannot parse (a NaN) get no summary; without JSON functions none does.
    if op.get_bind().dialect.name == "sqlite" and sqlite3.sqlite_version_info >= (3, 38, 0):
        op.execute("INSERT INTO run_summaries (run_id, summary) SELECT run_id, "
                   "json_remove(record, '$.final_message', '$.grade.items') FROM runs WHERE json_valid(record)")


def downgrade() -> None:
    op.drop_table("run_summaries")
