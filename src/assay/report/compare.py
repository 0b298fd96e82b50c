"""`assay compare`: is agent B better than agent A on the same work, and how sure is that?

Runs are paired by run key without the agent: the same task, level and epoch (B's runs from
another campaign when `against` is given, e.g. the same model with and without search). Only
keys both sides finished (status `done`) are paired; keys one side finished and the other
did not are listed (`only_a`, `only_b`). Scores are the report's (`averaged`: audited, a
scenario's S floored at -1). Per kind (the task's scoring kind) and overall: `n`, `mean_a`,
`mean_b`, `diff` (B - A), `ci95` (paired bootstrap of the mean difference, seed 0), `p_value`
(two-sided paired sign-flip permutation test, `metrics.paired_permutation_p`), `wins`,
`losses`, `ties` (B above, below, equal to A).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from assay import metrics
from assay.record import RunRecord, primary_kind
from assay.report.build import averaged

__all__ = ["SCHEMA", "compare_runs", "paired_stats"]

SCHEMA = "assay.compare/1"
Key = tuple[str, str | None, int]


def _key(r: RunRecord) -> Key:
    return (r.key.task_id, r.key.level, r.key.epoch)


def _order(k: Key) -> tuple[str, str, int]:
    return (k[0], k[1] or "", k[2])


def _key_json(k: Key) -> dict[str, Any]:
    return {"task_id": k[0], "level": k[1], "epoch": k[2]}


def _finished(runs: Iterable[RunRecord], agent: str) -> dict[Key, RunRecord]:
    """The agent's finished run per key (the latest when one campaign ran a key under several options)."""
    out: dict[Key, RunRecord] = {}
    for r in runs:
        if r.key.agent == agent and r.status == "done" and r.score is not None:
            k = _key(r)
            if k not in out or (r.started_at or 0) >= (out[k].started_at or 0):
                out[k] = r
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


def compare_runs(a: str, b: str, runs_a: Iterable[RunRecord], runs_b: Iterable[RunRecord], *,
                 campaign: str | None = None, against: str | None = None) -> dict[str, Any]:
    """The `assay.compare/1` JSON for agent `b` against agent `a`."""
    side_a, side_b = _finished(runs_a, a), _finished(runs_b, b)
    shared = sorted(set(side_a) & set(side_b), key=_order)
    by_kind: dict[str, list[tuple[float, float]]] = defaultdict(list)
    pairs: list[tuple[float, float]] = []
    for k in shared:
        ra, rb = side_a[k], side_b[k]
        pair = (averaged(ra), averaged(rb))
        pairs.append(pair)
        by_kind[primary_kind(ra.kinds)].append(pair)
    return {
        "schema": SCHEMA, "a": a, "b": b, "campaign": campaign, "against_campaign": against,
        "kinds": {kind: paired_stats(ps) for kind, ps in sorted(by_kind.items())},
        "overall": paired_stats(pairs),
        "only_a": [_key_json(k) for k in sorted(set(side_a) - set(side_b), key=_order)],
        "only_b": [_key_json(k) for k in sorted(set(side_b) - set(side_a), key=_order)],
    }
