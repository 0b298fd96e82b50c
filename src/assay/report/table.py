"""Terminal tables: the leaderboard, runs, tasks, admission anchors, curation.

Text that comes from tasks, models or users is passed as `rich.text.Text`, never as markup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from assay.report.curate import CurationResult


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _money(econ: dict[str, float]) -> str:
    sym = {"USD": "$", "CNY": "¥", "EUR": "€", "GBP": "£", "JPY": "¥"}
    return " / ".join(f"{sym.get(c, c + ' ')}{v:,.0f}" for c, v in sorted(econ.items())) or "-"


def leaderboard(report: dict[str, Any]) -> Table:
    table = Table(title=f"assay leaderboard · campaign {report.get('campaign') or '(all)'}")
    for col in ("agent", "runs", "void", "pass rate", "mean score", "value earned", "cost", "tokens"):
        table.add_column(col, justify="left" if col == "agent" else "right")
    agents = sorted(report["agents"], key=lambda a: (-(a.get("mean_score") or -9), a["agent"]))
    for a in agents:
        cost = "-" if a["cost_usd"] is None else f"${a['cost_usd']:.4f}"
        ms = a.get("mean_score")
        table.add_row(a["agent"], str(a["runs"]), str(a["void"]), _pct(a["pass_rate"]),
                      "-" if ms is None else f"{ms:.3f}", _money(a["economic_value"]), cost, f"{a['tokens']:,}")
    return table


def runs_table(report: dict[str, Any], limit: int = 200) -> Table:
    table = Table(title="runs")
    for col in ("run", "task", "agent", "level", "ep", "status", "end", "score", "passed"):
        table.add_column(col)
    for r in report["runs"][:limit]:
        score = "-" if r["score"] is None else f"{r['score']:.3f}"
        table.add_row(r["run_id"][:10], r["task_id"], r["agent"], r["level"] or "-", str(r["epoch"]),
                      r["status"], r["end_reason"], score, "-" if r["passed"] is None else ("yes" if r["passed"] else "no"))
    return table


def tasks_table(rows: list[dict[str, Any]]) -> Table:
    """`assay tasks`: one row per task found."""
    table = Table(title=f"{len(rows)} tasks")
    for col in ("id", "kinds", "domain", "lang", "levels", "cell", "value"):
        table.add_column(col)
    for r in rows:
        v = r["value"]
        table.add_row(Text(r["id"]), ",".join(r["kinds"]), Text(r["domain"] or "-"), r["language"],
                      ",".join(r["levels"]) or "-", f"{r['modality']}/{r['execution']}",
                      f"{v['amount']:,.0f} {v['currency']}" if v else "-")
    return table


def curation_tables(result: CurationResult, zero_eps: float) -> list[Table]:
    """`assay curate`: the rules' effect, the dropped and reviewed tasks, the balance."""
    summary = Table(title=f"assay curate · campaign {result.campaign}")
    summary.add_column("rule")
    summary.add_column("tasks", justify="right")
    diff = result.rules["difficulty"]
    summary.add_row("tasks in campaign", str(result.tasks_total))
    summary.add_row(f"dropped: difficulty ({diff['small_agent']}, k={diff['k']})" if diff["applied"]
                    else "dropped: difficulty (skipped)", str(sum(d.rule == "difficulty" for d in result.dropped)))
    summary.add_row("dropped: every agent passed", str(sum(d.rule == "upper_truncation" for d in result.dropped)))
    summary.add_row(f"kept, for review: every agent <= {zero_eps:g}", str(len(result.review)))
    summary.add_row(Text("kept", style="bold"), Text(str(len(result.kept)), style="bold"))
    tables = [summary]
    if result.dropped or result.review:
        verdicts = Table(title="dropped and review")
        for col in ("task", "verdict", "reason"):
            verdicts.add_column(col)
        for d in result.dropped:
            verdicts.add_row(Text(d.task_id), "dropped", Text(d.reason))
        for r in result.review:
            verdicts.add_row(Text(r.task_id), "review", Text(r.reason))
        tables.append(verdicts)
    bal = Table(title="balance (tasks before → after)")
    for col in ("by", "group", "before", "after"):
        bal.add_column(col, justify="right" if col in ("before", "after") else "left")
    for axis, groups in result.balance.items():
        for name, c in groups.items():
            bal.add_row(axis, Text(name), str(c.before), str(c.after))
    tables.append(bal)
    return tables
