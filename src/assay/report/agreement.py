"""Judge agreement: between repeated judge votes, and between the judge and people.

Judge-human agreement pairs the judge's verdict on an item of a run with a person's verdict
on the same item. Human verdicts come from the task (`RubricItem.human_labels`:
OneMillion-Bench `scores` fields, native `human_labels`), which the judge copies into the
run's `grade.judge_info.human_labels`, or from a labels file (`load_labels`). Only items the
judge graded count (not machine checks, not NA items).

Per domain the report gives `n` (pairs), `raw_agreement` (share of pairs where the judge and
the person agree on met / not met) and `pearson_r`, `p_value`: Pearson's r, two-sided p,
over the points each side awards per pair (the item's weight when met, 0 when not), as
OneMillion-Bench compares auto and human scores; null when r is undefined (fewer than 3
pairs, or one side constant).

A label describes one answer. Labels in a task file were given to the answer their source
labelled (for OneMillion-Bench, the upstream `response_<i>`), so the comparison is like for
like when the run gives that answer (e.g. a script agent replaying it); labels in a labels
file can name the agent, epoch or run they were given for.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from assay import metrics
from assay.errors import InputError
from assay.record import RunRecord

YES = {"true", "yes", "y", "met", "1", "是", "命中"}
NO = {"false", "no", "n", "not met", "0", "否", "未命中"}


def _bool(v: Any, file: Path, where: str) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return v != 0
    if isinstance(v, str) and v.strip().lower() in YES | NO:
        return v.strip().lower() in YES
    raise InputError(file, where, f"label {v!r} is not true/false (or a number: non-zero = met)")


def load_labels(path: Path) -> list[dict[str, Any]]:
    """A labels file: JSON lines (or one JSON array) of
    `{"task_id", "item_id", "met", "labeller"?, "agent"?, "epoch"?, "run_id"?}`.

    `met` is a boolean, yes/no, or a number (non-zero = met, as OneMillion-Bench scores).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(path, None, f"cannot read labels file: {e}") from None
    rows: list[Any]
    stripped = text.lstrip()
    try:
        if stripped.startswith("["):
            rows = json.loads(text)
        else:
            rows = [json.loads(ln) for ln in text.splitlines() if ln.strip()]
    except json.JSONDecodeError as e:
        raise InputError(path, None, f"not JSON lines: {e.msg}", line=e.lineno, column=e.colno) from None
    out: list[dict[str, Any]] = []
    for i, row in enumerate(rows):
        where = f"[{i}]"
        if not isinstance(row, dict):
            raise InputError(path, where, "each label must be an object")
        for key in ("task_id", "item_id", "met"):
            if key not in row:
                raise InputError(path, f"{where}.{key}", f"missing {key}")
        out.append({"task_id": str(row["task_id"]), "item_id": str(row["item_id"]),
                    "met": _bool(row["met"], path, f"{where}.met"),
                    "labeller": str(row.get("labeller", f"file_{i}")),
                    "agent": row.get("agent"), "epoch": row.get("epoch"), "run_id": row.get("run_id")})
    return out


def _file_labels(r: RunRecord, labels: list[dict[str, Any]]) -> dict[str, dict[str, bool]]:
    got: dict[str, dict[str, bool]] = defaultdict(dict)
    for lab in labels:
        if lab["task_id"] != r.key.task_id:
            continue
        if lab.get("agent") not in (None, r.key.agent):
            continue
        if lab.get("epoch") not in (None, r.key.epoch):
            continue
        if lab.get("run_id") not in (None, r.run_id) and not r.run_id.startswith(str(lab["run_id"])):
            continue
        got[lab["item_id"]][lab["labeller"]] = lab["met"]
    return got


def human_pairs(runs: Iterable[RunRecord], labels: list[dict[str, Any]] | None = None
                ) -> dict[str, list[tuple[bool, bool, float]]]:
    """(judge met, human met, weight) per pair, by domain."""
    out: dict[str, list[tuple[bool, bool, float]]] = defaultdict(list)
    for r in runs:
        if r.status != "done":
            continue
        rubric = r.grade.rubric
        if rubric is None:
            continue
        info = rubric.judge_info
        human: dict[str, dict[str, bool]] = {k: dict(v) for k, v in (info.human_labels if info else {}).items()}
        if labels:
            for item_id, by in _file_labels(r, labels).items():
                human.setdefault(item_id, {}).update(by)
        if not human:
            continue
        domain = str(r.task_meta.get("domain") or "unknown")
        for it in rubric.items:
            if it.check or it.na or it.hit is None or it.id not in human:
                continue
            for met in human[it.id].values():
                out[domain].append((it.hit, bool(met), it.weight))
    return dict(out)


def agreement_stats(pairs: list[tuple[bool, bool, float]]) -> dict[str, Any]:
    n = len(pairs)
    raw = sum(1 for j, h, _ in pairs if j == h) / n if n else None
    r = p = None
    if n:
        xs = [w if j else 0.0 for j, _, w in pairs]
        ys = [w if h else 0.0 for _, h, w in pairs]
        try:
            r, p = metrics.pearson(xs, ys)
        except ValueError:
            r = p = None
    return {"pearson_r": r, "p_value": p, "raw_agreement": raw, "n": n}


def human_agreement(runs: Iterable[RunRecord], labels: list[dict[str, Any]] | None = None
                    ) -> dict[str, dict[str, Any]]:
    """`{domain: {pearson_r, p_value, raw_agreement, n}}`, only domains with labelled pairs."""
    return {d: agreement_stats(p) for d, p in sorted(human_pairs(runs, labels).items()) if p}


def judge_summary(runs: Iterable[RunRecord]) -> dict[str, Any] | None:
    """Agreement among repeated votes, NA items and voters over an agent's judged runs."""
    infos = [r.grade.rubric.judge_info for r in runs
             if r.status == "done" and r.grade.rubric is not None and r.grade.rubric.judge_info is not None]
    if not infos:
        return None
    agreed = sum(i.agreed for i in infos)
    answered = sum(i.answered for i in infos)
    return {
        "agreement": agreed / answered if answered else None,
        "na": sum(i.na for i in infos),
        "votes": max(i.votes for i in infos),
        "runs": len(infos),
        "items": answered + sum(i.na for i in infos),
        "mode": sorted({i.mode for i in infos if i.mode}),
        "judges": sorted({j for i in infos for j in i.judges}),
    }
