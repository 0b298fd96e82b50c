"""The current attempt of every run key (`models.current_t`, table `current_runs`): what a
report aggregates, as typed columns, one row per (campaign, key digest).

`Store.save_runs` writes it in the same transaction as the runs (`upsert`): a saved attempt
replaces the key's row when it ranks higher (a graded attempt above a void one, then attempt,
created_at and run id: the attempt `Store.runs` gives as the key's current one), so the table
always holds exactly the runs a report reads. Migration 0008 fills it from the stored records
(`rebuild_current`), 0010 again with the graded-first rank.

The values follow the record's defaults as the report reads them (`assay.report.runs`): an
absent token count is 0, an absent cost 0.0, a null cost unknown (NULL); a grade's part is
there when the run has its kind and its flat grade the part's always-dumped field (`scoring`
for rubric, `uplift_adj` for scenario, `sat` for contract), as `Grade.from_flat` reads it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, and_, func, or_, select

from assay import metrics
from assay.record import json_text, primary_kind
from assay.store.models import REPORT_COLUMNS, current_t, runs_t

USAGE_KEYS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
_RUN_COLUMNS = tuple(n for n in REPORT_COLUMNS if n != "run_id")
_KEY = ("campaign", "key_digest")


def current_row(run: Mapping[str, Any], rec: Mapping[str, Any]) -> dict[str, Any]:
    """The `current_runs` row of a run: `run` its `runs` row (`REPORT_COLUMNS`, `key_digest`,
    `created_at`), `rec` its record's JSON object."""
    row = {n: run[n] for n in ("run_id", "key_digest", "created_at", *_RUN_COLUMNS)}
    kinds = list(rec.get("kinds") or [])
    get = rec.get
    usage, judge, grade = get("usage") or {}, get("judge_usage") or {}, get("grade") or {}
    meta, options, value = get("task_meta") or {}, get("options") or {}, get("value")
    row["kinds"] = ",".join(kinds)
    row["kind"] = primary_kind(kinds) if kinds else None
    row["void_reason"] = get("void_reason")
    row["started_at"] = get("started_at")
    row["search_mode"] = str(options.get("search", "off"))
    row["search"] = get("search")
    for facet in ("domain", "modality", "execution"):
        v = meta.get(facet)
        row[facet] = None if v is None else str(v)
    for n in USAGE_KEYS:
        row[n] = usage.get(n) or 0
    row["tokens"] = sum(row[n] for n in USAGE_KEYS)
    row["cost_usd"] = usage.get("cost_usd", 0.0)
    row["judge_cost_usd"] = judge.get("cost_usd", 0.0)
    # A task's value is {amount, currency} (`task.model.Value`); another shape is no value.
    value = value if isinstance(value, dict) else {}
    priced = value.get("amount") is not None and value.get("currency") is not None
    row["value_amount"] = float(value["amount"]) if priced else None
    row["value_currency"] = str(value["currency"]) if priced else None
    audit = grade.get("audit")
    row["audit_removed"] = int((audit or {}).get("removed", 0))
    rubric = "rubric" in kinds and grade.get("scoring") is not None
    info = grade.get("judge_info") if rubric else None
    tags = grade.get("tags") if rubric else None
    row.update(scoring=grade["scoring"] if rubric else None, rubric_na=(grade.get("na") or 0) if rubric else None,
               tags=json_text(tags) if tags else None,
               judge_agreed=None if info is None else info.get("agreed", 0),
               judge_answered=None if info is None else info.get("answered", 0),
               judge_na=None if info is None else info.get("na", 0),
               judge_votes=None if info is None else info.get("votes", 1),
               judge_mode=None if info is None else info.get("mode", "batched"),
               judges=None if info is None else json_text(list(info.get("judges") or [])))
    scenario = "scenario" in kinds and grade.get("uplift_adj") is not None
    contact = grade.get("contact_cost")
    row.update(uplift_adj=grade["uplift_adj"] if scenario else None,
               contact_cost=(0.0 if contact is None else contact) if scenario else None,
               solved=bool(grade.get("solved")) if scenario else None,
               router_fallbacks=(grade.get("router_fallback_count") or 0) if scenario else None)
    contract = "contract" in kinds and grade.get("sat") is not None
    row.update(sat=bool(grade["sat"]) if contract else None,
               sat_required=any(p.get("required", True) for p in grade.get("predicates") or []) if contract else None)
    score = row["score"]
    row["averaged"] = (None if score is None else
                       metrics.floored_score(row["uplift_adj"], row["contact_cost"])
                       if scenario and row["kind"] == "scenario" else score)
    return row


def rank(status: str, attempt: int, created_at: float, run_id: str) -> tuple[bool, int, float, str]:
    """How a key's attempts rank (the highest is its current one): a graded attempt above a
    void one whatever their numbers, then attempt, created_at and run id. A void attempt that
    was re-run is replaced by its re-run; a void attempt never hides a graded one, as when a
    worker whose lease lapsed stores its graded attempt after the one that took its key over
    ended void (that key is finished: it would never be run again, its failure left out)."""
    return (status != "void", attempt, created_at, run_id)


def _rank(row: Mapping[str, Any]) -> tuple[bool, int, float, str]:
    return rank(row["status"], row["attempt"], row["created_at"], row["run_id"])


def _newer(new: Any, old: Any) -> Any:
    """SQL: the attempt `new` ranks above `old` (`rank`)."""
    new_graded, old_graded = new.status != "void", old.status != "void"
    later = or_(new.attempt > old.attempt,
                and_(new.attempt == old.attempt, or_(new.created_at > old.created_at,
                                                     and_(new.created_at == old.created_at, new.run_id > old.run_id))))
    return or_(and_(new_graded, ~old_graded), and_(new_graded == old_graded, later))


@functools.cache
def _upsert(backend: str) -> Any:
    """The backend's insert that replaces a key's row only with a higher-ranked attempt (None:
    a backend without ON CONFLICT)."""
    stmt: Any
    if backend == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        stmt = sqlite_insert(current_t)
    elif backend == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        stmt = pg_insert(current_t)
    else:
        return None
    return stmt.on_conflict_do_update(index_elements=list(_KEY),
                                      set_={c.name: stmt.excluded[c.name] for c in current_t.c if c.name not in _KEY},
                                      where=_newer(stmt.excluded, current_t.c))


def upsert(conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
    """Make each row its key's current attempt unless the stored one ranks higher (in the
    caller's transaction: `Store.save_runs`' own). The rows are written in (campaign, key
    digest) order, the store's one lock order: two saves of the same keys, whose lease rows
    are gone (nothing locked them first), queue on the first shared row, never cross."""
    best: dict[tuple[str, str], Mapping[str, Any]] = {}
    for row in rows:  # one row per key: a statement may change a row once only (PostgreSQL)
        k = (row["campaign"], row["key_digest"])
        if k not in best or _rank(row) > _rank(best[k]):
            best[k] = row
    if not best:
        return
    ordered = [best[k] for k in sorted(best)]
    stmt = _upsert(conn.dialect.name)
    if stmt is not None:
        conn.execute(stmt, ordered)
        return
    c = current_t.c
    for row in ordered:
        old = conn.execute(select(c.status, c.attempt, c.created_at, c.run_id).where(
            c.campaign == row["campaign"], c.key_digest == row["key_digest"])).first()
        if old is not None and rank(*old) >= _rank(row):
            continue
        conn.execute(current_t.delete().where(c.campaign == row["campaign"], c.key_digest == row["key_digest"]))
        conn.execute(current_t.insert(), [dict(row)])


REBUILD_BATCH = 1000


def rebuild_current(conn: Connection) -> int:
    """Recompute every key's current row from the stored records (the table dropped and created
    as `models.current_t` defines it); the attempts read. Read in batches by run id, so memory
    stays flat however many runs there are."""
    current_t.drop(conn, checkfirst=True)
    current_t.create(conn)
    c = runs_t.c
    names = ("key_digest", "created_at", *REPORT_COLUMNS)
    stmt = select(*[c[n] for n in names], c.record).order_by(c.run_id)
    last: str | None = None
    done = 0
    while True:
        page = conn.execute((stmt if last is None else stmt.where(c.run_id > last)).limit(REBUILD_BATCH)).all()
        if not page:
            return done
        upsert(conn, [current_row(dict(zip(names, row[:-1], strict=True)), json.loads(row[-1])) for row in page])
        done += len(page)
        last = page[-1].run_id


READ = (*REPORT_COLUMNS, "kinds", "void_reason", "started_at", "search_mode", "search", "domain", "modality",
        "execution", *USAGE_KEYS, "cost_usd", "judge_cost_usd", "value_amount", "value_currency", "audit_removed",
        "scoring", "rubric_na", "tags", "judge_agreed", "judge_answered", "judge_na", "judge_votes", "judge_mode",
        "judges", "uplift_adj", "contact_cost", "solved", "router_fallbacks", "sat", "sat_required")
"""The columns a run's current row gives a report that reads it whole (`ReportQuery.current_rows`,
`ReportRun.from_current`), in this order: `REPORT_COLUMNS` first."""


def code_point_order(col: Any, backend: str) -> Any:
    """A text column ordered as Python orders `str` (by code point): SQLite's binary collation
    does; PostgreSQL's "C" collation does (bytes of UTF-8, in code point order)."""
    return col.collate("C") if backend == "postgresql" else col


def report_order(backend: str) -> list[Any]:
    """`Store.runs`' order of the current runs: task, agent, level (none first), epoch,
    campaign, key digest."""
    c = current_t.c
    return [code_point_order(c.task_id, backend), code_point_order(c.agent, backend), c.level.is_not(None),
            code_point_order(func.coalesce(c.level, ""), backend), c.epoch, code_point_order(c.campaign, backend),
            code_point_order(c.key_digest, backend)]
