"""The current attempt of every run key with what reports aggregate as typed columns (table
`current_runs`, `assay.store.current`): a report is a query over it (issue 26). Filled here
from the stored records, on SQLite and PostgreSQL alike; from now on `Store.save_runs` writes
it in the same transaction as each save.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04
"""

from __future__ import annotations

from alembic import op

from assay.store.current import rebuild_current

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    rebuild_current(op.get_bind())


def downgrade() -> None:
    op.drop_table("current_runs")
