"""Exports of a report: the report JSON with its per-run rows streamed; one CSV row per run;
Markdown tables."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assay.errors import InputError
from assay.record import escape_controls

if TYPE_CHECKING:
    from assay.store import Store


def dumps_finite(value: Any, file: Path, where: str = "", **kw: Any) -> str:
    """`json.dumps(value)` for a file a person or program reads: JSON has no NaN or Infinity
    (Python would write them, and strict readers refuse the file), so a number that is not
    finite (a sum past a float's range) is an InputError naming the file and the field."""
    try:
        return json.dumps(value, ensure_ascii=False, default=str, allow_nan=False, **kw)
    except ValueError:
        from assay.task.validation import non_finite

        bad = non_finite(value, where)
        if bad is None:
            raise  # not a number's fault (a circular reference): a bug, not input
        raise InputError(file, bad, "not a finite number (a sum past a float's range?); JSON has no Infinity or "
                                    "NaN, so the file is not written") from None


def _dumps(value: Any, file: Path, where: str = "") -> str:
    return dumps_finite(value, file, where, indent=2)


LINE_ROWS = ("runs", "tasks")
"""The report's lists of rows written one row per line."""


def write_json(report: dict[str, Any], path: Path, rows: Iterable[dict[str, Any]] | None = None) -> None:
    """The report JSON, as `json.dumps(report, indent=2)` writes it but for the rows of its
    `runs` and `tasks`, one line each (a row on one line is encoded by json's C encoder;
    indenting is Python's, several times slower). With `rows` given, those are its `runs`,
    written one at a time as they come, so a report over 100,000 runs never holds every row
    (`runs.stream_whole`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("{")
            for i, (key, value) in enumerate(report.items()):
                f.write("," if i else "")
                if key in LINE_ROWS:
                    f.write(f"\n  {_dumps(key, path)}: [")
                    n = 0
                    for row in rows if key == "runs" and rows is not None else value:
                        f.write(("," if n else "") + "\n    " + dumps_finite(row, path, f"{key}[{n}]"))
                        n += 1
                    f.write("\n  ]" if n else "]")
                else:  # the key's line as the whole dump has it: {key: value} without its braces
                    f.write(_dumps({key: value}, path)[1:-2])
            f.write("\n}" if report else "}")
    except BaseException:
        tmp.unlink(missing_ok=True)  # no half-written file left beside the report
        raise
    tmp.replace(path)

COLUMNS = ["run_id", "task_id", "task_hash", "kinds", "agent", "level", "epoch", "status", "end_reason", "sandbox",
           "score", "passed", "value_amount", "value_currency", "input_tokens", "output_tokens",
           "cache_read_tokens", "cache_write_tokens", "cost_usd", "judge_cost_usd",
           "task_title", "domain", "language", "modality", "execution", "model", "turns", "duration_s", "search"]


def write_csv(rows: Iterable[dict[str, Any]], path: Path) -> None:
    """One row per run of `rows` (the report's `runs`, `build.run_row`'s keys), written as they come."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for r in rows:
            v = r.get("value") or {}
            u = r["usage"]
            w.writerow([r["run_id"], r["task_id"], r["task_hash"], ";".join(r["kinds"]), r["agent"], r["level"] or "",
                        r["epoch"], r["status"], r["end_reason"], r["sandbox"],
                        "" if r["score"] is None else repr(r["score"]), "" if r["passed"] is None else r["passed"],
                        v.get("amount", ""), v.get("currency", ""), u["input_tokens"], u["output_tokens"],
                        u["cache_read_tokens"], u["cache_write_tokens"],
                        "" if u["cost_usd"] is None else u["cost_usd"], r["judge_usage"].get("cost_usd") or 0,
                        *(r["task"].get(k) or "" for k in ("title", "domain", "language", "modality", "execution")),
                        r.get("model") or "", r.get("turns", 0), r.get("duration_s", 0.0), r.get("search") or ""])
    tmp.replace(path)


def _md_text(text: str) -> str:
    """Text as Markdown shows it as text: its controls escaped as every view of assay shows
    them (`record.escape_controls`: line breaks, ESC, bidi overrides, zero-width characters)
    and `&`, `<`, `>` as HTML entities, so a name such as `<img src=x onerror=...>` is read,
    never rendered, by a viewer that renders raw HTML (GitHub, most Markdown previews)."""
    return escape_controls(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _md_cell(v: Any) -> str:
    """A Markdown table cell: text as `_md_text` writes it with its pipes escaped, numbers to
    four significant digits."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list | tuple) and len(v) == 2 and all(isinstance(x, int | float) for x in v):
        return f"[{v[0]:.4g}, {v[1]:.4g}]"
    return _md_text(str(v)).replace("|", "\\|")


def _md_table(head: list[str], rows: list[list[Any]]) -> list[str]:
    return ["| " + " | ".join(_md_cell(h) for h in head) + " |", "|" + "---|" * len(head),
            *("| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows), ""]


KIND_BLOCKS: dict[str, list[str]] = {
    "rubric": ["expert_score", "ci95", "pass_rate", "na"],
    "scenario": ["mean_s", "ci95", "solved", "uplift_gross", "contact_cost"],
    "contract": ["accuracy", "ci95", "sat_rate", "audit_removed"],
}
"""The columns of each kind's block in the Markdown export (the JSON holds every field)."""

COST_COLUMNS = ["tokens_per_task", "cost_per_task", "score_per_1k_tokens", "score_per_usd"]
"""Each kind's reliability and cost table: these, pass@k / pass^k at k = 1 and the largest k,
and the per-run cost distribution."""


def _curve(c: dict[str, float]) -> str:
    if not c:
        return "-"
    kmax = max(c, key=int)
    return f"{c['1']:.4g}" + ("" if kmax == "1" else f" (k={kmax}: {c[kmax]:.4g})")


def _dist(d: Any) -> str:
    return "-" if d is None else " / ".join(f"{getattr(d, k):.4g}" for k in ("min", "median", "p90", "max"))


def write_markdown(report: dict[str, Any], path: Path) -> None:
    """The report as Markdown for papers and pull requests: the agents, one block per kind
    (each ranked by its own score), and the runs; the same numbers as the JSON, read through
    the report's models (`model.summary_model`), the runs from its rows."""
    from assay.report.model import summary_model

    m = summary_model(report)
    agents = m.agents
    lines = [f"# assay report · campaign {_md_text(m.campaign or '(all)')}", ""]
    lines += _md_table(["agent", "runs", "void", "pass rate", "cost (USD)", "tokens"],
                       [[a.agent, a.runs, a.void, a.pass_rate, a.cost_usd, a.tokens] for a in agents])
    for kind, cols in KIND_BLOCKS.items():
        having = [(a, b) for a in agents if (b := getattr(a, kind)) is not None]
        if not having:
            continue
        head = cols[0]
        having.sort(key=lambda ab: (-(h if (h := getattr(ab[1], head)) is not None else float("-inf")), ab[0].agent))
        lines += [f"## {kind}", ""]
        lines += _md_table(["agent", *cols], [[a.agent, *(getattr(b, c) for c in cols)] for a, b in having])
        lines += [f"### {kind} · reliability and cost", ""]
        lines += _md_table(["agent", "pass@1 (pass@k)", "pass^1 (pass^k)", *COST_COLUMNS,
                            "cost/run min / median / p90 / max"],
                           [[a.agent, _curve(b.pass_at_k), _curve(b.pass_hat_k), *(getattr(b, c) for c in COST_COLUMNS),
                             _dist(b.cost_distribution)] for a, b in having])
        if kind == "rubric" and any(b.value for _a, b in having):
            lines += ["### rubric · value earned vs available", ""]
            lines += _md_table(["agent", "currency", "value earned", "value available"],
                               [[a.agent, cur, v.earned, v.available] for a, b in having for cur, v in b.value.items()])
        if kind == "scenario" and any(b.families for _a, b in having):
            lines += ["### scenario · families", ""]
            lines += _md_table(["agent", "family", "mean S", "variants", "spread"],
                               [[a.agent, fam, f.mean_s, len(f.variants), f.spread]
                                for a, b in having for fam, f in b.families.items()])
        if kind == "rubric":
            tags = sorted({t for _a, b in having for t, v in b.tags.items() if v is not None})
            if tags:
                lines += _md_table(["agent", *tags], [[a.agent, *(b.tags.get(t) for t in tags)] for a, b in having])
        if kind == "contract":
            cells = sorted({c for _a, b in having for c in b.cells})
            if cells:
                lines += _md_table(["agent", *cells], [[a.agent, *(b.cells.get(c) for c in cells)] for a, b in having])
        baseline = m.human_baseline.get(kind, {})
        if baseline:
            lines += [f"### {kind} · human expert baseline per task family", ""]
            lines += _md_table(["family", "people", "runs", "human mean", "95% CI", "agents on the same tasks"],
                               [[fam, ", ".join(bl.people), bl.runs, bl.mean, bl.ci95,
                                 "; ".join(f"{ag} {v.mean:.4g} ({v.runs} runs)" for ag, v in bl.agents.items())]
                                for fam, bl in baseline.items()])
    fm = m.failure_modes
    if fm is not None:
        lines += [f"## failure modes (judge {_md_text(fm.judge)})", ""]
        lines += _md_table(["agent", "failed", "category", "runs", "share"],
                           [[agent, a.failed, c, n, a.shares[c]] for agent, a in fm.agents.items()
                            for c, n in a.counts.items()])
        lines += _md_table(["run", "agent", "task", "category", "reason"],
                           [[f.run_id, f.agent, f.task_id, f.category, f.reason] for f in fm.runs])
    lines += ["## runs", ""]
    lines += _md_table(["run", "task", "agent", "level", "epoch", "status", "end", "score", "passed"],
                       [[r["run_id"], r["task_id"], r["agent"], r["level"], r["epoch"], r["status"], r["end_reason"],
                         r["score"], r["passed"]] for r in report["runs"]])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("\n".join(lines), encoding="utf-8")
    tmp.replace(path)


def write_files(store: Store, report: dict[str, Any], *, json_out: Path | None = None, csv_out: Path | None = None,
                md_out: Path | None = None, html: Path | None = None) -> None:
    """The report files of one campaign's report (`build.stored_report` with `listing`: its
    runs as table rows): --json and --csv with each run's whole row, streamed from the store's
    records in the report's order (`runs.stream_whole`); --md and --html from the report."""
    from assay.report.build import run_row
    from assay.report.runs import stream_whole

    ids = [r["run_id"] for r in report.get("runs", [])]

    def rows() -> Iterator[dict[str, Any]]:
        return (run_row(r) for r in stream_whole(store, ids))

    if json_out is not None:
        write_json(report, json_out, rows())
    if csv_out is not None:
        write_csv(rows(), csv_out)
    if md_out is not None:
        write_markdown(report, md_out)
    if html is not None:
        from assay.report.html import write_html

        write_html(report, html)
