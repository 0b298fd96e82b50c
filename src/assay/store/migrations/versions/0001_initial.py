"""Initial schema: campaigns, runs, events, grades, judge_cache.

Revision ID: 0001
Revises:
Create Date: 2025-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "campaigns",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.UniqueConstraint("name", name="uq_campaigns_name"),
    )
    op.create_table(
        "runs",
        sa.Column("run_id", sa.String(64), primary_key=True),
        sa.Column(
            "campaign",
            sa.String(200),
            sa.ForeignKey("campaigns.name", name="fk_runs_campaign"),
            nullable=False,
        ),
        sa.Column("key_digest", sa.String(64), nullable=False),
        sa.Column("task_id", sa.String(300), nullable=False),
        sa.Column("task_hash", sa.String(128), nullable=False),
        sa.Column("agent", sa.String(200), nullable=False),
        sa.Column("level", sa.String(100), nullable=True),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("options_hash", sa.String(128), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("end_reason", sa.String(32), nullable=False),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column("passed", sa.Boolean(), nullable=True),
        sa.Column("harness_version", sa.String(100), nullable=False),
        sa.Column("model", sa.String(200), nullable=True),
        sa.Column("sandbox", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("record", sa.Text(), nullable=False),
    )
    op.create_index("ix_runs_campaign", "runs", ["campaign"])
    op.create_index("ix_runs_key_digest", "runs", ["key_digest"])
    op.create_index("ix_runs_campaign_digest_attempt", "runs", ["campaign", "key_digest", "attempt"])
    op.create_table(
        "events",
        sa.Column(
            "run_id",
            sa.String(64),
            sa.ForeignKey("runs.run_id", name="fk_events_run_id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("seq", sa.Integer(), primary_key=True),
        sa.Column("t", sa.Float(), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
    )
    op.create_table(
        "grades",
        sa.Column(
            "run_id",
            sa.String(64),
            sa.ForeignKey("runs.run_id", name="fk_grades_run_id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("grade", sa.Text(), nullable=False),
        sa.Column("audit", sa.Text(), nullable=True),
    )
    op.create_table(
        "judge_cache",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("judge_cache")
    op.drop_table("grades")
    op.drop_table("events")
    op.drop_index("ix_runs_campaign_digest_attempt", table_name="runs")
    op.drop_index("ix_runs_key_digest", table_name="runs")
    op.drop_index("ix_runs_campaign", table_name="runs")
    op.drop_table("runs")
    op.drop_table("campaigns")
