"""The campaign page's run filter: agent, task, status and a score range from the query
string (`/campaigns/NAME?agent=A&task=T&status=done&min_score=0.5&max_score=1`).

`agent` and `status` match exactly, `task` as a case-insensitive substring of the task id;
`min_score` / `max_score` are inclusive and drop runs without a score (void runs). A bad
value is a ValueError naming the parameter and the reason (the page answers 400)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, get_args

from pydantic import BaseModel

from assay.record import RunStatus

STATUSES: tuple[str, ...] = get_args(RunStatus)


class RunFilter(BaseModel):
    agent: str = ""
    task: str = ""
    status: str = ""
    min_score: float | None = None
    max_score: float | None = None

    @classmethod
    def from_query(cls, q: Mapping[str, str]) -> RunFilter:
        def score(name: str) -> float | None:
            raw = (q.get(name) or "").strip()
            if not raw:
                return None
            try:
                v = float(raw)
            except ValueError:
                raise ValueError(f"{name}: {raw[:40]!r} is not a number") from None
            if not math.isfinite(v):
                raise ValueError(f"{name}: must be a finite number")
            return v

        status = (q.get("status") or "").strip()
        if status and status not in STATUSES:
            raise ValueError(f"status: {status[:40]!r} is not one of {', '.join(STATUSES)}")
        return cls(agent=(q.get("agent") or "").strip(), task=(q.get("task") or "").strip(), status=status,
                   min_score=score("min_score"), max_score=score("max_score"))

    @property
    def active(self) -> bool:
        return bool(self.agent or self.task or self.status) or self.min_score is not None or self.max_score is not None

    def apply(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The report's run rows that pass the filter."""
        task = self.task.lower()
        out = []
        for r in rows:
            if (self.agent and r["agent"] != self.agent) or (self.status and r["status"] != self.status) \
                    or (task and task not in str(r["task_id"]).lower()):
                continue
            s = r["score"]
            if (self.min_score is not None or self.max_score is not None) and s is None:
                continue
            if (self.min_score is not None and s < self.min_score) or (self.max_score is not None and s > self.max_score):
                continue
            out.append(r)
        return out
