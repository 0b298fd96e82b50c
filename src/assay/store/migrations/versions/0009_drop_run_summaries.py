"""The run summaries (`run_summaries`, migrations 0005-0007) dropped: no report reads them since
the report is a query over the current runs (migration 0008, `assay.store.current`).

Downgrading brings 0007's table back, every run's summary recomputed from its record
(`migrations.summaries_0007.rebuild_summaries`, on SQLite and PostgreSQL alike).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04
"""

from __future__ import annotations

from alembic import op

from assay.store.migrations.summaries_0007 import rebuild_summaries

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.drop_table("run_summaries")


def downgrade() -> None:
    rebuild_summaries(op.get_bind())
