"""Reading a store: campaigns, finished keys, attempts, whole runs, a run's events and grade items.

What resume (`finished_digests`, `done_run`, `attempts`), `assay show` (`get_run` by id or a
unique prefix of at least MIN_PREFIX characters, `events`), the web app and the reports that
list whole runs (`runs`, `all_attempts`) read, and what a campaign's attempts cost, summed by
the database (`attempt_costs`). Reports aggregate the current runs instead
(`assay.store.report_queries`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, NamedTuple

from sqlalchemy import Connection, case, func, literal, select

from assay.errors import InputError
from assay.record import Event, RunRecord, event_from_wire
from assay.store.current import rank
from assay.store.finished import finished
from assay.store.models import REPORT_COLUMNS, campaigns_t, current_t, events_t, runs_t
from assay.store.saves import FINAL_MESSAGE_REF, final_message_of
from assay.store.transactions import StoreBase

__all__ = ["MIN_PREFIX", "AttemptCosts", "Reads"]

MIN_PREFIX = 6


def _sort_key(r: RunRecord) -> tuple[Any, ...]:
    """Every attempt's order: task, agent, level (none first), epoch, campaign, attempt."""
    k = r.key
    return (k.task_id, k.agent, k.level is not None, k.level or "", k.epoch, k.campaign, r.attempt)


class AttemptCosts(NamedTuple):
    """What a campaign's stored attempts (void ones too: they were paid for) cost."""

    attempts: int
    unknown: int  # attempts whose agent cost is unknown (no price)
    usd: float  # agents and judges, unknown prices counted 0

class Reads(StoreBase):
    """A store's reads (a part of `Store`)."""

    def campaigns(self) -> list[str]:
        """Campaign names in creation order."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(campaigns_t.c.name).order_by(campaigns_t.c.created_at, campaigns_t.c.id)
            )
            return [r[0] for r in rows]

    def finished_digests(self, campaign: str, *, retry_void: bool = False) -> set[str]:
        """Key digests of the campaign that are finished: a ``done`` or ``broken`` run, or a
        key void too often and stored as failed (not with `retry_void`: those run again)."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(runs_t.c.key_digest)
                .where(runs_t.c.campaign == campaign, finished(retry_void))
                .distinct()
            )
            return {r[0] for r in rows}

    def done_run(self, campaign: str, digest: str) -> RunRecord | None:
        """The finished (``done`` or ``broken``) attempt of one run key, if it has one (the latest when several)."""
        with self.engine.connect() as conn:
            row = conn.execute(
                select(runs_t.c.record)
                .where(runs_t.c.campaign == campaign, runs_t.c.key_digest == digest, finished())
                .order_by(runs_t.c.attempt.desc(), runs_t.c.created_at.desc())
                .limit(1)
            ).first()
        return RunRecord.model_validate_json(row[0]) if row is not None else None

    def attempts(self, campaign: str) -> dict[str, int]:
        """Highest stored attempt number per key digest of the campaign."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(runs_t.c.key_digest, func.max(runs_t.c.attempt))
                .where(runs_t.c.campaign == campaign)
                .group_by(runs_t.c.key_digest)
            )
            return {d: int(a) for d, a in rows}

    def attempt_counts(self, campaign: str) -> dict[str, tuple[int, int]]:
        """Per agent of the campaign: (stored attempts, void ones), every attempt counted."""
        void = func.sum(case((runs_t.c.status == "void", 1), else_=0))
        with self.engine.connect() as conn:
            rows = conn.execute(select(runs_t.c.agent, func.count(), void)
                                .where(runs_t.c.campaign == campaign).group_by(runs_t.c.agent))
            return {agent: (int(n), int(v or 0)) for agent, n, v in rows}

    def attempt_costs(self, campaign: str) -> AttemptCosts:
        """What the campaign's stored attempts cost (`AttemptCosts`): the current attempts'
        costs summed from their columns (`current_runs`), the records of the attempts they
        replaced (void ones re-run: few) read one by one."""
        c = current_t.c
        totals = select(func.count(), func.sum(case((c.cost_usd.is_(None), 1), else_=0)),
                        func.sum(func.coalesce(c.cost_usd, 0.0) + func.coalesce(c.judge_cost_usd, 0.0))
                        ).where(c.campaign == campaign)
        current = select(literal(1)).where(c.run_id == runs_t.c.run_id).exists()
        replaced = select(runs_t.c.record).where(runs_t.c.campaign == campaign, ~current)
        stored = select(func.count()).select_from(runs_t).where(runs_t.c.campaign == campaign)
        with self.engine.connect() as conn:
            n, unknown, usd = conn.execute(totals).one()
            n, unknown, usd = int(n), int(unknown or 0), float(usd or 0.0)
            if conn.execute(stored).scalar_one() == n:  # no attempt was replaced
                return AttemptCosts(attempts=n, unknown=unknown, usd=usd)
            for (text,) in conn.execute(replaced):
                rec = RunRecord.model_validate_json(text)
                n += 1
                unknown += rec.usage.cost_usd is None
                usd += (rec.usage.cost_usd or 0.0) + (rec.judge_usage.cost_usd or 0.0)
        return AttemptCosts(attempts=n, unknown=unknown, usd=usd)

    def campaign_cost(self, campaign: str) -> float:
        """USD spent on the campaign's stored attempts, agents and judges (unknown prices count 0)."""
        return self.attempt_costs(campaign).usd

    def last_epoch(self, campaign: str, task_id: str, agent: str, level: str | None) -> int:
        """The highest epoch stored of (task, agent, level) in `campaign` (0: none): one indexed
        aggregate, never the campaign's records."""
        c = runs_t.c
        same_level = c.level.is_(None) if level is None else c.level == level
        stmt = select(func.max(c.epoch)).where(c.campaign == campaign, c.task_id == task_id, c.agent == agent,
                                              same_level)
        with self.engine.connect() as conn:
            return int(conn.execute(stmt).scalar() or 0)

    def all_attempts(self, campaign: str | None = None) -> list[RunRecord]:
        """Every stored attempt, ordered by task_id, agent, level, epoch, then attempt."""
        stmt = select(runs_t.c.record)
        if campaign is not None:
            stmt = stmt.where(runs_t.c.campaign == campaign)
        with self.engine.connect() as conn:
            records = [RunRecord.model_validate_json(r[0]) for r in conn.execute(stmt)]
        records.sort(key=_sort_key)
        return records

    def runs(self, campaign: str | None = None) -> list[RunRecord]:
        """The current attempt per key digest, ordered by task_id, agent, level, epoch (then
        campaign and key digest: `_report_order`).

        "Current" is the highest ranked (`current.rank`): a graded attempt above a void one,
        then the highest attempt number (then the most recently saved), so a void attempt that
        was re-run is replaced by its re-run and never hides a graded one.
        """
        stmt = select(
            runs_t.c.key_digest, runs_t.c.status, runs_t.c.attempt, runs_t.c.created_at, runs_t.c.run_id,
            runs_t.c.record
        )
        if campaign is not None:
            stmt = stmt.where(runs_t.c.campaign == campaign)
        latest: dict[str, tuple[tuple[bool, int, float, str], str]] = {}
        with self.engine.connect() as conn:
            for digest, status, attempt, created, run_id, raw in conn.execute(stmt):
                ranked = rank(status, attempt, created, run_id)
                cur = latest.get(digest)
                if cur is None or ranked > cur[0]:
                    latest[digest] = (ranked, raw)
        records = [(RunRecord.model_validate_json(raw), digest) for digest, (_rank, raw) in latest.items()]
        records.sort(key=lambda rd: (*_sort_key(rd[0])[:-1], rd[1]))  # `_report_order`
        return [r for r, _digest in records]

    # The columns a report reads of each run (`models.REPORT_COLUMNS`).
    REPORT_COLUMNS = REPORT_COLUMNS

    def _resolve(self, conn: Connection, run_id: str) -> str | None:
        exact = conn.execute(select(runs_t.c.run_id).where(runs_t.c.run_id == run_id)).first()
        if exact is not None:
            return run_id
        if len(run_id) < MIN_PREFIX:
            return None
        found = [
            r[0]
            for r in conn.execute(
                select(runs_t.c.run_id).where(runs_t.c.run_id.startswith(run_id, autoescape=True)).limit(11)
            )
        ]
        if len(found) > 1:
            shown = ", ".join(found[:10]) + (", ..." if len(found) > 10 else "")
            raise InputError(None, "RUN_ID", f"run id prefix {run_id!r} is ambiguous: {shown}")
        return found[0] if found else None

    def get_run(self, run_id: str) -> RunRecord | None:
        """A run by id, or by a unique prefix of at least 6 characters.

        ``None`` when nothing matches; ``ValueError`` when the prefix matches several runs.
        """
        with self.engine.connect() as conn:
            rid = self._resolve(conn, run_id)
            if rid is None:
                return None
            raw = conn.execute(select(runs_t.c.record).where(runs_t.c.run_id == rid)).scalar_one()
        return RunRecord.model_validate_json(raw)

    def events(self, run_id: str) -> list[Event]:
        """The run's events in ``seq`` order (a unique id prefix is accepted too)."""
        return list(self.iter_events(run_id))

    def iter_events(self, run_id: str, batch: int = 64, max_bytes: int = 1 << 20) -> Iterator[Event]:
        """The run's events in ``seq`` order, read a page at a time: at most `batch` events and
        `max_bytes` of stored text (at least one event), so a long transcript is never held
        whole; a unique id prefix is accepted too."""
        with self.engine.connect() as conn:
            rid = self._resolve(conn, run_id)
        if rid is None:
            return
        c = events_t.c
        final: str | None = None
        last = -1
        while True:
            with self.engine.connect() as conn:
                sizes = conn.execute(select(c.seq, func.length(c.data)).where(c.run_id == rid, c.seq > last)
                                     .order_by(c.seq).limit(batch)).all()
                if not sizes:
                    return
                page: list[int] = []
                total = 0
                for seq, size in sizes:
                    if page and total + (size or 0) > max_bytes:
                        break
                    page.append(seq)
                    total += size or 0
                rows = [(s, t, k, json.loads(d)) for s, t, k, d in conn.execute(
                    select(c.seq, c.t, c.kind, c.data).where(c.run_id == rid, c.seq >= page[0], c.seq <= page[-1])
                    .order_by(c.seq))]
                if final is None and any(FINAL_MESSAGE_REF in d for _s, _t, _k, d in rows):
                    final = final_message_of(conn, rid)
            for s, t, k, d in rows:
                if d.pop(FINAL_MESSAGE_REF, None) is not None:
                    d["content"] = final
                yield event_from_wire(s, t, k, d)
            last = page[-1]
