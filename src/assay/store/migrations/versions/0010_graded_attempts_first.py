"""A key's current attempt ranks a graded attempt above a void one (`assay.store.current.rank`):
a worker whose lease lapsed may store its graded attempt after the attempt that took its key
over ended void, and that void one must not stay current. The current rows are computed again
from the stored records with the new rank, on SQLite and PostgreSQL alike.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-07
"""

from __future__ import annotations

from alembic import op

from assay.store.current import rebuild_current

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    rebuild_current(op.get_bind())


def downgrade() -> None:
    """The rows computed with the rank before it (highest attempt first) are not kept: the
    table stays, a report reads it as it is."""
