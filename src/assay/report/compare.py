"""`assay compare`: is agent B better than agent A on the same work, and how sure is that?

Runs are paired by run key without the agent: the same task, level and epoch (B's runs from
another campaign when `against` is given, e.g. the same model with and without search). Only
keys both sides finished (status `done`) are paired; keys one side finished and the other
did not are listed (`only_a`, `only_b`). Scores are the report's (`averaged`: audited, a
scenario's S floored at -1), read from the store's current runs. Per kind (the task's scoring kind) and overall: `n`, `mean_a`,
`mean_b`, `diff` (B - A), `ci95` (paired bootstrap of the mean difference, seed 0), `p_value`
(two-sided paired sign-flip permutation test, `metrics.paired_permutation_p`), `wins`,
`losses`, `ties` (B above, below, equal to A).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, NamedTuple

from sqlalchemy import select

from assay import metrics
from assay.store import Store, current
from assay.store.models import current_t

__all__ = ["SCHEMA", "agents", "compare_sides", "finished", "paired_stats"]

SCHEMA = "assay.compare/1"
Key = tuple[str, str | None, int]
class Finished(NamedTuple):
    """One finished run as a comparison reads it."""

    score: float  # as the report averages it
    kind: str  # the run's primary kind
    passed: bool  # by its kind's own rule, as graded (a scenario's solved, a rubric's 0.7 line)


Side = dict[Key, Finished]
"""One agent's finished runs by key."""


def _order(k: Key) -> tuple[str, str, int]:
    return (k[0], k[1] or "", k[2])


def _key_json(k: Key) -> dict[str, Any]:
    return {"task_id": k[0], "level": k[1], "epoch": k[2]}


def agents(store: Store, campaign: str) -> list[str]:
    """The agents with runs in `campaign` (sorted)."""
    c = current_t.c
    with store.engine.connect() as conn:
        return sorted(a for (a,) in conn.execute(select(c.agent).distinct().where(c.campaign == campaign)))


def finished(store: Store, campaign: str, agent: str) -> Side:
    """The agent's finished (done, scored) current run per key, read from the store's current
    runs (`assay.store.current`): no record is read. When one campaign ran a key under several
    options, the run started last (the later in report order of those started together)."""
    c = current_t.c
    stmt = (select(c.task_id, c.level, c.epoch, c.averaged, c.kind, c.passed, c.started_at)
            .where(c.campaign == campaign, c.agent == agent, c.status == "done", c.score.is_not(None))
            .order_by(*current.report_order(store.engine.dialect.name)))
    out: Side = {}
    started: dict[Key, float] = {}
    with store.engine.connect() as conn:
        for task_id, level, epoch, averaged, kind, passed, started_at in conn.execute(stmt):
            k = (task_id, level, epoch)
            at = started_at or 0.0
            if k not in out or at >= started[k]:
                # No kinds: `record.primary_kind`'s default.
                out[k] = Finished(averaged, kind or "contract", bool(passed))
                started[k] = at
    return out


def paired_stats(pairs: list[tuple[float, float]]) -> dict[str, Any]:
    """`n, mean_a, mean_b, diff, ci95, p_value, wins, losses, ties` of (a, b) score pairs."""
    n = len(pairs)
    if not n:
        return {"n": 0, "mean_a": None, "mean_b": None, "diff": None, "ci95": None, "p_value": None,
                "wins": 0, "losses": 0, "ties": 0}
    diffs = [b - a for a, b in pairs]
    lo, hi = metrics.bootstrap_ci(diffs, seed=0)
    return {
        "n": n,
        "mean_a": metrics.mean(a for a, _ in pairs),
        "mean_b": metrics.mean(b for _, b in pairs),
        "diff": metrics.mean(diffs),
        "ci95": [lo, hi],
        "p_value": metrics.paired_permutation_p(diffs, seed=0),
        "wins": sum(1 for d in diffs if d > 0),
        "losses": sum(1 for d in diffs if d < 0),
        "ties": sum(1 for d in diffs if d == 0),
    }


def compare_sides(a: str, b: str, side_a: Side, side_b: Side, *, campaign: str | None = None,
                  against: str | None = None) -> dict[str, Any]:
    """The `assay.compare/1` JSON for agent `b` against agent `a` (their `finished` runs)."""
    shared = sorted(set(side_a) & set(side_b), key=_order)
    by_kind: dict[str, list[tuple[float, float]]] = defaultdict(list)
    pairs: list[tuple[float, float]] = []
    for k in shared:
        sa, sb = side_a[k].score, side_b[k].score
        pairs.append((sa, sb))
        by_kind[side_a[k].kind].append((sa, sb))
    return {
        "schema": SCHEMA, "a": a, "b": b, "campaign": campaign, "against_campaign": against,
        "kinds": {kind: paired_stats(ps) for kind, ps in sorted(by_kind.items())},
        "overall": paired_stats(pairs),
        "only_a": [_key_json(k) for k in sorted(set(side_a) - set(side_b), key=_order)],
        "only_b": [_key_json(k) for k in sorted(set(side_b) - set(side_a), key=_order)],
    }
