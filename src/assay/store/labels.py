"""Experts' labels of rubric items, given on a run's page in the web app.

One row per (run, item, labeller): an expert who labels an item again replaces their label.
`stored_labels` returns them in the shape of a labels file (`assay.report.agreement.load_labels`),
so the report's judge-human agreement takes both the same way.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel
from sqlalchemy import select

from assay.store.db import Store
from assay.store.models import expert_labels_t

__all__ = ["MAX_NOTE_CHARS", "ItemLabel", "labels_of_run", "save_labels", "stored_labels"]

MAX_NOTE_CHARS = 4000


class ItemLabel(BaseModel):
    item_id: str
    met: bool
    note: str = ""
    labeller: str = ""
    created_at: float = 0.0


def save_labels(store: Store, run_id: str, task_id: str, labeller: str, items: list[ItemLabel]) -> None:
    """Store `labeller`'s labels of these items of the run (replacing their earlier ones), at once."""
    now = time.time()
    t = expert_labels_t
    with store.transaction() as conn:
        for it in items:
            conn.execute(t.delete().where(t.c.run_id == run_id, t.c.item_id == it.item_id, t.c.labeller == labeller))
            conn.execute(t.insert().values(run_id=run_id, item_id=it.item_id, labeller=labeller, task_id=task_id,
                                           met=it.met, note=it.note[:MAX_NOTE_CHARS], created_at=now))


def labels_of_run(store: Store, run_id: str) -> list[ItemLabel]:
    t = expert_labels_t
    with store.engine.connect() as conn:
        rows = conn.execute(select(t.c.item_id, t.c.met, t.c.note, t.c.labeller, t.c.created_at)
                            .where(t.c.run_id == run_id).order_by(t.c.item_id, t.c.labeller)).all()
    return [ItemLabel(item_id=i, met=bool(m), note=n, labeller=who, created_at=c) for i, m, n, who, c in rows]


def stored_labels(store: Store) -> list[dict[str, Any]]:
    """Every stored label as a labels-file row: run_id, task_id, item_id, met, labeller (+ note, created_at)."""
    t = expert_labels_t
    with store.engine.connect() as conn:
        rows = conn.execute(select(t.c.run_id, t.c.task_id, t.c.item_id, t.c.met, t.c.labeller, t.c.note,
                                   t.c.created_at).order_by(t.c.run_id, t.c.item_id, t.c.labeller)).all()
    return [{"run_id": r, "task_id": task, "item_id": i, "met": bool(m), "labeller": f"expert:{who}", "note": n,
             "created_at": c} for r, task, i, m, who, n, c in rows]
