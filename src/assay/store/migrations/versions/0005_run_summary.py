"""The run's summary beside its record: the stored record without its transcript-sized
fields (the final message, the rubric's items), so a report over 100,000 runs reads and
parses kilobytes per run, not the whole answer (issue 11).

On SQLite the summaries of the runs already stored are computed here, in SQL; on PostgreSQL
they stay null and reads fall back to the whole record for those rows.

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
    op.add_column("runs", sa.Column("summary", sa.Text(), nullable=True))
    # Records SQLite cannot parse (a NaN) keep no summary; without JSON functions none has one.
    if op.get_bind().dialect.name == "sqlite" and sqlite3.sqlite_version_info >= (3, 38, 0):
        op.execute("UPDATE runs SET summary = json_remove(record, '$.final_message', '$.grade.items') "
                   "WHERE json_valid(record)")


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("summary")
