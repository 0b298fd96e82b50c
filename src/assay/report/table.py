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


HEADLINES = (("rubric", "expert_score", "rubric score"), ("scenario", "mean_s", "scenario S"),
             ("contract", "accuracy", "contract acc"))
"""Each kind's own headline, in its own column: scores of different kinds are never averaged."""


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def leaderboard(report: dict[str, Any]) -> Table:
    table = Table(title=Text(f"assay leaderboard · campaign {report.get('campaign') or '(all)'}"))
    kinds = [(k, f, label) for k, f, label in HEADLINES if any(k in a for a in report["agents"])]
    cols = ["agent", "runs", "void", "pass rate", *(label for _k, _f, label in kinds), "value earned", "cost",
            "tokens"]
    for col in cols:
        table.add_column(col, justify="left" if col == "agent" else "right", overflow="fold")

    def rank(a: dict[str, Any]) -> tuple[Any, ...]:  # by each kind's headline, in the order above
        return (*(-(a[k][f] if k in a and a[k][f] is not None else -1e9) for k, f, _l in kinds), a["agent"])

    for a in sorted(report["agents"], key=rank):
        cost = "-" if a["cost_usd"] is None else f"${a['cost_usd']:.4f}"
        heads = [_num(a[k][f]) if k in a else "-" for k, f, _l in kinds]
        table.add_row(Text(a["agent"]), str(a["runs"]), str(a["void"]), _pct(a["pass_rate"]), *heads,
                      _money(a["economic_value"]), cost, f"{a['tokens']:,}")
    return table


def runs_table(report: dict[str, Any], limit: int = 200) -> Table:
    table = Table(title="runs")
    for col in ("run", "task", "agent", "level", "ep", "status", "end", "score", "passed"):
        table.add_column(col, overflow="fold")
    for r in report["runs"][:limit]:
        score = "-" if r["score"] is None else f"{r['score']:.3f}"
        table.add_row(r["run_id"][:10], r["task_id"], r["agent"], r["level"] or "-", str(r["epoch"]),
                      r["status"], r["end_reason"], score, "-" if r["passed"] is None else ("yes" if r["passed"] else "no"))
    return table


def tasks_table(rows: list[dict[str, Any]]) -> Table:
    """`assay tasks`: one row per task found."""
    table = Table(title=f"{len(rows)} tasks")
    for col in ("id", "kinds", "domain", "lang", "levels", "cell", "value"):
        table.add_column(col, overflow="fold")
    for r in rows:
        v = r["value"]
        table.add_row(Text(r["id"]), ",".join(r["kinds"]), Text(r["domain"] or "-"), r["language"],
                      ",".join(r["levels"]) or "-", f"{r['modality']}/{r['execution']}",
                      f"{v['amount']:,.0f} {v['currency']}" if v else "-")
    return table


def curation_tables(result: CurationResult, zero_eps: float) -> list[Table]:
    """`assay curate`: the rules' effect, the dropped and reviewed tasks, the balance."""
    summary = Table(title=f"assay curate · campaign {result.campaign}")
    summary.add_column("rule", overflow="fold")
    summary.add_column("tasks", justify="right", overflow="fold")
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
            verdicts.add_column(col, overflow="fold")
        for d in result.dropped:
            verdicts.add_row(Text(d.task_id), "dropped", Text(d.reason))
        for r in result.review:
            verdicts.add_row(Text(r.task_id), "review", Text(r.reason))
        tables.append(verdicts)
    bal = Table(title="balance (tasks before → after)")
    for col in ("by", "group", "before", "after"):
        bal.add_column(col, justify="right" if col in ("before", "after") else "left", overflow="fold")
    for axis, groups in result.balance.items():
        for name, c in groups.items():
            bal.add_row(axis, Text(name), str(c.before), str(c.after))
    tables.append(bal)
    return tables


def calibration_table(cal: dict[str, Any]) -> Table:
    """`assay calibrate`: per judge, overall and per domain, the judge against the people."""
    table = Table(title=Text(f"assay calibrate · {cal['answers']} answers people scored"))
    for col in ("judge", "domain", "answers", "items", "agreement", "pearson r", "p", "NA"):
        table.add_column(col, justify="right" if col not in ("judge", "domain") else "left", overflow="fold")
    for j in cal["judges"]:
        rows = [("overall", j["overall"]), *sorted(j["domains"].items())]
        for i, (domain, a) in enumerate(rows):
            table.add_row(Text(j["judge"] if i == 0 else ""), Text(domain), str(a["n_responses"]), str(a["n_items"]),
                          _pct(a["item_agreement"]), _num(a["pearson_r"]),
                          "-" if a["p_value"] is None else f"{a['p_value']:.3g}", str(a["na"]))
    return table


def compare_table(cmp: dict[str, Any]) -> Table:
    """`assay compare`: B against A per kind and overall."""
    title = f"assay compare · {cmp['b']} against {cmp['a']}"
    if cmp.get("against_campaign"):
        title += f" (B from campaign {cmp['against_campaign']})"
    table = Table(title=Text(title))
    for col in ("kind", "pairs", "mean A", "mean B", "diff B-A", "95% CI", "p", "wins", "losses", "ties"):
        table.add_column(col, justify="left" if col == "kind" else "right", overflow="fold")
    for kind, st in [*cmp["kinds"].items(), ("overall", cmp["overall"])]:
        ci = "-" if st["ci95"] is None else f"[{st['ci95'][0]:+.3f}, {st['ci95'][1]:+.3f}]"
        diff = "-" if st["diff"] is None else f"{st['diff']:+.3f}"
        p = "-" if st["p_value"] is None else f"{st['p_value']:.3g}"
        table.add_row(Text(kind), str(st["n"]), _num(st["mean_a"]), _num(st["mean_b"]), diff, ci, p,
                      str(st["wins"]), str(st["losses"]), str(st["ties"]))
    return table


def dry_run_table(rows: list[dict[str, Any]], campaign: str) -> Table:
    """`assay run --dry-run`: per agent, the runs left and done and what the ones left may cost."""
    table = Table(title=Text(f"assay run --dry-run · campaign {campaign} · no model called"))
    for col in ("agent", "to do", "done", "est. input tokens", "est. output tokens", "est. cost", "basis"):
        table.add_column(col, justify="right" if col not in ("agent", "basis") else "left", overflow="fold")
    for r in rows:
        cost = "unknown" if r["cost_usd"] is None else f"${r['cost_usd']:.4f}"
        table.add_row(Text(r["agent"]), str(r["to_do"]), str(r["done"]), f"{r['input_tokens']:,}",
                      f"{r['output_tokens']:,}", cost, Text("; ".join(r["basis"]) or "-"))
    return table
