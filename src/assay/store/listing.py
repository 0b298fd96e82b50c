"""The stored runs as `assay runs` lists them: the current attempt of each run key (the row a
report counts), newest first, filtered in SQL, so finding a run id for `assay show` never
means reading the database by hand or loading every record."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel
from sqlalchemy import select

from assay.store.models import current_t

if TYPE_CHECKING:
    from assay.store.db import Store

__all__ = ["RunRow", "list_runs"]


class RunRow(BaseModel):
    """One listed run (`assay runs --json` prints a list of these)."""

    run_id: str
    campaign: str
    task_id: str
    agent: str
    level: str | None
    epoch: int
    attempt: int
    status: str
    score: float | None
    passed: bool | None
    cost_usd: float | None
    created_at: float


def list_runs(store: Store, *, campaign: str | None = None, agents: Sequence[str] = (),
              tasks: Sequence[str] = (), statuses: Sequence[str] = (), limit: int | None = 50) -> list[RunRow]:
    """The current runs matching every filter given (each a set of exact values), newest
    first, at most `limit` (None: all)."""
    cols = [current_t.c[name] for name in RunRow.model_fields]
    stmt = select(*cols)
    for column, wanted in (("campaign", [campaign] if campaign else []), ("agent", agents), ("task_id", tasks),
                           ("status", statuses)):
        if wanted:
            stmt = stmt.where(current_t.c[column].in_(list(wanted)))
    stmt = stmt.order_by(current_t.c.created_at.desc(), current_t.c.run_id)
    if limit is not None:
        stmt = stmt.limit(limit)
    with store.engine.connect() as conn:
        return [RunRow.model_validate(dict(row._mapping)) for row in conn.execute(stmt)]
