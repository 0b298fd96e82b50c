"""Accounts of the web app: users (name, SHA-256 of the secret token, role), and the
experts' labels of rubric items of stored runs (expert_labels: who, when, met, note).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("token_sha256", sa.String(64), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.UniqueConstraint("token_sha256", name="uq_users_token_sha256"),
    )
    op.create_table(
        "expert_labels",
        sa.Column(
            "run_id",
            sa.String(64),
            sa.ForeignKey("runs.run_id", name="fk_expert_labels_run_id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("item_id", sa.String(300), primary_key=True),
        sa.Column("labeller", sa.String(64), primary_key=True),
        sa.Column("task_id", sa.String(300), nullable=False),
        sa.Column("met", sa.Boolean(), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("expert_labels")
    op.drop_table("users")
