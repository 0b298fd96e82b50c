"""Human play that survives a server restart: the play sessions (owner, task, level,
campaign, epoch, the actions taken so far, timestamps, state) and the web app's sign-ins
(the SHA-256 of the session cookie, never the cookie itself).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "play_sessions",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("owner", sa.String(64), nullable=True),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("task_id", sa.String(300), nullable=False),
        sa.Column("level", sa.String(100), nullable=True),
        sa.Column("campaign", sa.String(200), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("actions", sa.Text(), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
    )
    op.create_index("ix_play_sessions_state", "play_sessions", ["state"])
    op.create_table(
        "web_signins",
        sa.Column("sid_sha256", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("csrf", sa.String(64), nullable=False),
        sa.Column("account", sa.Boolean(), nullable=False),
        sa.Column("expires", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("web_signins")
    op.drop_index("ix_play_sessions_state", table_name="play_sessions")
    op.drop_table("play_sessions")
