"""Which stored attempts finish their run key: the one definition saves, claims and reads share.

A key is finished by a graded attempt (``done``, or its task ``broken``), and, unless void
runs are retried, by one void too often and stored as failed (SPEC `void_attempts`).
"""

from __future__ import annotations

from sqlalchemy import ColumnElement, and_, bindparam, select

from assay.record import VOID_REASONS
from assay.store.models import runs_t

__all__ = ["GRADED_KEYS", "finished", "graded"]

def graded() -> ColumnElement[bool]:
    """A stored attempt that finished its key by being graded: done (or its task broken), not
    a key void too often and stored as failed (SPEC `void_attempts`: its end reason says void)."""
    return and_(runs_t.c.status.in_(("done", "broken")), runs_t.c.end_reason.not_in(sorted(VOID_REASONS)))


def finished(retry_void: bool = False) -> ColumnElement[bool]:
    """An attempt that finishes its key: graded, or (unless `retry_void`) void too often."""
    return graded() if retry_void else runs_t.c.status.in_(("done", "broken"))


GRADED_KEYS = select(runs_t.c.key_digest).distinct().where(
    runs_t.c.campaign == bindparam("c"), runs_t.c.key_digest.in_(bindparam("ds", expanding=True)), graded())
