"""Leases: the run keys claimed by a worker, with its heartbeat.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "leases",
        sa.Column("campaign", sa.String(200), primary_key=True),
        sa.Column("key_digest", sa.String(64), primary_key=True),
        sa.Column("holder", sa.String(200), nullable=False),
        sa.Column("heartbeat_at", sa.Float(), nullable=False),
        sa.Column("ttl_s", sa.Float(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("claimed_at", sa.Float(), nullable=False),
    )
    op.create_index("ix_leases_holder", "leases", ["holder"])


def downgrade() -> None:
    op.drop_index("ix_leases_holder", table_name="leases")
    op.drop_table("leases")
