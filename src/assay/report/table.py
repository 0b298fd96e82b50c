"""The leaderboard as a rich table."""

from __future__ import annotations

from typing import Any

from rich.table import Table


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
