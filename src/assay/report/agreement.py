"""Judge agreement: between repeated judge votes, and between the judge and people.

A person's label describes one answer, so judge-human agreement in a report compares the
judge's verdict on an item of a run with a person's verdict on that same run's answer. Those
labels come from a labels file (`load_labels`) whose rows name the run they were given for
(`run_id`, or an unambiguous prefix of it, as `assay show` takes). Labels stored in task
files describe the answers stored beside them (OneMillion-Bench `response_<i>`, a native
task's reference answer), not assay's runs: `assay calibrate` compares the judge with those
(`assay.grade.calibration`). Only items the judge graded count (not machine checks, not NA).

Per domain the report gives `n` (pairs), `raw_agreement` (share of pairs where the judge and
the person agree on met / not met) and `pearson_r`, `p_value`: Pearson's r, two-sided p,
over the points each side awards per pair (the item's weight when met, 0 when not), as
OneMillion-Bench compares auto and human scores; null when r is undefined (fewer than 3
pairs, or one side constant). Where two or more people labelled the same item of the same
run, `inter_rater` gives how often two of them agree (`n` pairs of people, `raw_agreement`):
the ceiling a judge can be expected to reach.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from assay import metrics
from assay.errors import InputError
from assay.report.runs import ReportJudgeInfo, ReportRun
from assay.task.formats.jsonio import loads_json, loads_jsonl_line
from assay.task.formats.yamlio import read_text

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
    `{"run_id", "task_id", "item_id", "met", "labeller"?}`.

    `met` is a boolean, yes/no, or a number (non-zero = met, as OneMillion-Bench scores).
    `run_id` (or a prefix of at least 6 characters) names the run whose answer was labelled.
    Read as task files are (`assay.task.formats`): a regular file, UTF-8, within the JSON
    readers' limits of size, depth and digits; every refusal an InputError naming the file.
    """
    path = Path(path)
    text = read_text(path)
    rows: list[Any]
    if text.lstrip().startswith("["):
        rows = loads_json(text, path)
    else:
        rows = [loads_jsonl_line(ln, path, n) for n, ln in enumerate(text.splitlines(), start=1) if ln.strip()]
    if not isinstance(rows, list):
        raise InputError(path, None, "a labels file is JSON lines or one JSON array")
    out: list[dict[str, Any]] = []
    for i, row in enumerate(rows):
        where = f"[{i}]"
        if not isinstance(row, dict):
            raise InputError(path, where, "each label must be an object")
        for key in ("task_id", "item_id", "met"):
            if key not in row:
                raise InputError(path, f"{where}.{key}", f"missing {key}")
        run_id = row.get("run_id")
        if not isinstance(run_id, str) or len(run_id.strip()) < 6:
            raise InputError(path, f"{where}.run_id", "a label must name the run whose answer it judged (run_id, "
                                                      "at least 6 characters): agreement is measured on the same "
                                                      "answers only; labels of answers stored in task files are "
                                                      "for `assay calibrate`")
        out.append({"task_id": str(row["task_id"]), "item_id": str(row["item_id"]),
                    "met": _bool(row["met"], path, f"{where}.met"),
                    "labeller": str(row.get("labeller", f"file_{i}")), "run_id": run_id.strip()})
    return out


def _labels_run(lab: dict[str, Any], r: ReportRun) -> bool:
    """Whether a label was given to this run's answer (its task, its run id or a prefix of it)."""
    return bool(lab["task_id"] == r.key.task_id and r.run_id.startswith(lab["run_id"]))


def _file_labels(r: ReportRun, labels: list[dict[str, Any]]) -> dict[str, dict[str, bool]]:
    """item -> labeller -> met, for the labels given to this run's answer."""
    got: dict[str, dict[str, bool]] = defaultdict(dict)
    for lab in labels:
        if _labels_run(lab, r):
            got[lab["item_id"]][lab["labeller"]] = lab["met"]
    return got


def labelled(runs: Iterable[ReportRun], labels: list[dict[str, Any]]) -> list[ReportRun]:
    """The runs some label was given to (`_labels_run`), in order; labels are looked up by task."""
    by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for lab in labels:
        by_task[lab["task_id"]].append(lab)
    return [r for r in runs if any(_labels_run(lab, r) for lab in by_task.get(r.key.task_id, ()))]


def human_pairs(runs: Iterable[ReportRun], labels: list[dict[str, Any]]) -> dict[str, list[tuple[bool, bool, float]]]:
    """(judge met, human met, weight) per pair, by domain."""
    out: dict[str, list[tuple[bool, bool, float]]] = defaultdict(list)
    for r in runs:
        if r.status != "done" or r.grade.rubric is None:
            continue
        human = _file_labels(r, labels)
        if not human:
            continue
        domain = str(r.task_meta.get("domain") or "unknown")
        for it in r.grade.rubric.items:
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


def rater_pairs(runs: Iterable[ReportRun], labels: list[dict[str, Any]]) -> dict[str, list[bool]]:
    """Whether two people agree, per pair of people who labelled the same judged item of the
    same run, by domain: the human ceiling a judge is held to."""
    out: dict[str, list[bool]] = defaultdict(list)
    for r in runs:
        if r.status != "done" or r.grade.rubric is None:
            continue
        human = _file_labels(r, labels)
        domain = str(r.task_meta.get("domain") or "unknown")
        for it in r.grade.rubric.items:
            if it.check or it.na or it.hit is None or len(human.get(it.id, {})) < 2:
                continue
            verdicts = list(human[it.id].values())
            out[domain] += [a == b for i, a in enumerate(verdicts) for b in verdicts[i + 1:]]
    return dict(out)


def human_agreement(runs: Iterable[ReportRun], labels: list[dict[str, Any]] | None = None
                    ) -> dict[str, dict[str, Any]]:
    """`{domain: {pearson_r, p_value, raw_agreement, n[, inter_rater: {n, raw_agreement}]}}`,
    only domains with labelled pairs; `inter_rater` when two or more people labelled an item."""
    if not labels:
        return {}
    runs = list(runs)
    out = {d: agreement_stats(p) for d, p in sorted(human_pairs(runs, labels).items()) if p}
    for d, agree in rater_pairs(runs, labels).items():
        if d in out and agree:
            out[d]["inter_rater"] = {"n": len(agree), "raw_agreement": sum(agree) / len(agree)}
    return out


def judge_summary(infos: list[ReportJudgeInfo]) -> dict[str, Any] | None:
    """Agreement among repeated votes, NA items and voters over an agent's judged runs: the
    judge infos of its done runs a judge graded (`AgentRuns.judge_infos`)."""
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
