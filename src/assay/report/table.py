"""Terminal tables: the leaderboard, runs, tasks, admission anchors, curation.

Text that comes from tasks, models, stores or users is passed as `rich.text.Text`, never as
markup, with its control, bidi and other invisible characters escaped (`_text`,
`record.escape_controls`): a name cannot clear the screen, set the window title or reverse
what follows it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text

from assay.record import escape_controls

if TYPE_CHECKING:
    from assay.report.curate import CurationResult
    from assay.report.model import AgentSummary, Compare, FailureModes, Report
    from assay.store.listing import RunRow


def _text(text: str) -> Text:
    """Text from a task, a model, a store or a person as a table shows it: never markup, its
    controls escaped (`record.escape_controls`)."""
    return Text(escape_controls(text))


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


def _block(a: AgentSummary, kind: str) -> Any:
    """The agent's block of `kind` (None: it ran no such task)."""
    return getattr(a, kind)


def _head(a: AgentSummary, kind: str, field: str) -> float | None:
    block = _block(a, kind)
    return None if block is None else getattr(block, field)


def leaderboard(report: Report) -> Table:
    table = Table(title=_text(f"assay leaderboard · campaign {report.campaign or '(all)'}"))
    kinds = [(k, f, label) for k, f, label in HEADLINES if any(_block(a, k) is not None for a in report.agents)]
    cols = ["agent", "runs", "void", "pass rate", *(label for _k, _f, label in kinds), "value earned", "cost",
            "tokens"]
    for col in cols:
        table.add_column(col, justify="left" if col == "agent" else "right", overflow="fold")

    def rank(a: AgentSummary) -> tuple[Any, ...]:  # by each kind's headline, in the order above
        return (*(-(h if (h := _head(a, k, f)) is not None else -1e9) for k, f, _l in kinds), a.agent)

    for a in sorted(report.agents, key=rank):
        cost = "-" if a.cost_usd is None else f"${a.cost_usd:.4f}"
        heads = [_num(_head(a, k, f)) if _block(a, k) is not None else "-" for k, f, _l in kinds]
        table.add_row(_text(a.agent), str(a.runs), _void(a), _pct(a.pass_rate), *heads,
                      _money(a.economic_value), cost, f"{a.tokens:,}")
    return table


def _void(a: AgentSummary) -> Text:
    """Void runs and their rate; marked when out of line with the other agents' (SPEC `void_outlier`)."""
    rate = a.void_rate
    text = f"{a.void}" + (f" ({rate:.0%})" if a.void and rate is not None else "")
    if a.void_outlier:
        return Text(text + " !", style="bold red")
    return Text(text)


def _ci_text(ci: list[float] | None) -> str:
    return "-" if ci is None else f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def _usd(v: float | None) -> str:
    return "-" if v is None else f"${v:.4g}"


def _per(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def _dist(d: Any) -> str:
    return "-" if d is None else " / ".join(f"{getattr(d, k):.4g}" for k in ("min", "median", "p90", "max"))


def _curve_end(curve: dict[str, float]) -> str:
    """pass@k at k = 1 and at the largest k: `0.500 · k=4 0.875`."""
    if not curve:
        return "-"
    kmax = max(curve, key=int)
    return f"{curve['1']:.3f}" + ("" if kmax == "1" else f" · k={kmax} {curve[kmax]:.3f}")


def _value_text(v: dict[str, Any]) -> str:
    return " / ".join(f"{c} {x.earned:,.0f} of {x.available:,.0f}" for c, x in v.items()) or "-"


KIND_COLUMNS: dict[str, list[tuple[str, Any]]] = {
    "rubric": [("score", lambda b: _num(b.expert_score)), ("95% CI", lambda b: _ci_text(b.ci95)),
               ("pass rate", lambda b: _pct(b.pass_rate)), ("NA", lambda b: str(b.na)),
               ("value earned of available", lambda b: _value_text(b.value))],
    "scenario": [("mean S", lambda b: _num(b.mean_s)), ("95% CI", lambda b: _ci_text(b.ci95)),
                 ("solved", lambda b: str(b.solved)), ("uplift (gross)", lambda b: _num(b.uplift_gross)),
                 ("contact cost", lambda b: _num(b.contact_cost)), ("below no-op", lambda b: _pct(b.below_no_op)),
                 ("L0→L1 drop", lambda b: _num(b.drop_L0_L1)), ("L1→L3 drop", lambda b: _num(b.drop_L1_L3))],
    "contract": [("accuracy", lambda b: _num(b.accuracy)), ("95% CI", lambda b: _ci_text(b.ci95)),
                 ("Sat rate", lambda b: _pct(b.sat_rate)),
                 ("text", lambda b: _num(b.modalities.get("text"))),
                 ("multimodal", lambda b: _num(b.modalities.get("multimodal"))),
                 ("audit removed", lambda b: str(b.audit_removed))],
}
"""Each kind's own columns in the terminal (over its block, `model.RubricBlock`...); the
reliability and cost columns follow them."""

COMMON_COLUMNS: list[tuple[str, Any]] = [
    ("pass@k", lambda b: _curve_end(b.pass_at_k)), ("pass^k", lambda b: _curve_end(b.pass_hat_k)),
    ("tokens/task", lambda b: f"{b.tokens_per_task:,.0f}"),
    ("cost/task", lambda b: _usd(b.cost_per_task)), ("score/1k tok", lambda b: _per(b.score_per_1k_tokens)),
    ("score/$", lambda b: _per(b.score_per_usd)),
    ("cost/run min / median / p90 / max", lambda b: _dist(b.cost_distribution)),
]


def _grid(title: str, head: list[str], rows: list[list[str | Text]], left: int = 1) -> Table:
    """A table whose first `left` columns are text (left-aligned), the rest numbers."""
    table = Table(title=_text(title))
    for i, col in enumerate(head):
        table.add_column(_text(col), justify="left" if i < left else "right", overflow="fold")
    for row in rows:
        table.add_row(*row)
    return table


def _block_title(report: Report, kind: str, head: str) -> str:
    ts = report.task_sets.get(kind)
    if report.shared_tasks:
        return f"{kind} · ranked by {head} · the {len(ts.shared) if ts else 0} tasks every agent finished"
    if ts is not None and ts.differ:
        return f"{kind} · ranked by {head} · agents finished different task sets (--shared-tasks compares the shared ones)"
    return f"{kind} · ranked by {head}"


def _detail_tables(kind: str, having: list[AgentSummary]) -> list[Table]:
    """Rubric tags, contract cells, scenario families."""
    if kind == "rubric":
        tags = sorted({t for a in having if a.rubric for t, v in a.rubric.tags.items() if v is not None})
        return [_grid("rubric tags", ["agent", *tags],
                      [[_text(a.agent), *(_num(a.rubric.tags.get(t)) for t in tags)] for a in having if a.rubric])] \
            if tags else []
    if kind == "contract":
        cells = sorted({c for a in having if a.contract for c in a.contract.cells})
        return [_grid("contract accuracy per cell (modality/execution)", ["agent", *cells],
                      [[_text(a.agent), *(_num(a.contract.cells.get(c)) for c in cells)]
                       for a in having if a.contract])] if cells else []
    rows: list[list[str | Text]] = [[_text(a.agent), _text(fam), _num(f.mean_s), str(len(f.variants)),
                                     _num(f.spread), str(f.runs)]
                                    for a in having if a.scenario for fam, f in a.scenario.families.items()]
    return [_grid("scenario families (spread: best minus worst variant)",
                  ["agent", "family", "mean S", "variants", "spread", "runs"], rows, left=2)] if rows else []


def kind_tables(report: Report) -> list[Table]:
    """Per kind present, ranked by its own headline (None last): its block, its reliability
    and cost table, then the rubric tags, the contract cells or the scenario families."""
    tables: list[Table] = []
    for kind, head, _label in HEADLINES:
        having = [a for a in report.agents if _block(a, kind) is not None]
        if not having:
            continue
        having.sort(key=lambda a: (_head(a, kind, head) is None, -(_head(a, kind, head) or 0.0), a.agent))
        for title, columns in ((_block_title(report, kind, head), KIND_COLUMNS[kind]),
                               (f"{kind} · reliability and cost", COMMON_COLUMNS)):
            tables.append(_grid(title, ["agent", "tasks", *(n for n, _f in columns)],
                                [[_text(a.agent), str(len(_block(a, kind).tasks)),
                                  *(f(_block(a, kind)) for _n, f in columns)] for a in having]))
        tables += _detail_tables(kind, having)
        baseline = report.human_baseline.get(kind, {})
        if baseline:
            tables.append(_grid(f"{kind} · human expert baseline per task family (people's runs pooled)",
                                ["family", "people", "runs", "human mean", "95% CI", "agents on the same tasks"],
                                [[_text(fam), _text(", ".join(b.people)), str(b.runs), _num(b.mean),
                                  _ci_text(b.ci95),
                                  _text("; ".join(f"{a} {_num(v.mean)} ({v.runs} runs)"
                                                  for a, v in b.agents.items()) or "-")]
                                 for fam, b in baseline.items()], left=2))
    return tables


def runs_table(report: dict[str, Any], limit: int = 200) -> Table:
    table = Table(title="runs")
    for col in ("run", "task", "agent", "level", "ep", "status", "end", "score", "passed"):
        table.add_column(col, overflow="fold")
    for r in report["runs"][:limit]:
        score = "-" if r["score"] is None else f"{r['score']:.3f}"
        table.add_row(_text(r["run_id"][:10]), _text(r["task_id"]), _text(r["agent"]), _text(r["level"] or "-"),
                      str(r["epoch"]), _text(r["status"]), _text(r["end_reason"]), score, "-" if r["passed"] is None else ("yes" if r["passed"] else "no"))
    return table


def tasks_table(rows: list[dict[str, Any]]) -> Table:
    """`assay tasks`: one row per task found."""
    table = Table(title=f"{len(rows)} tasks")
    for col in ("id", "kinds", "domain", "lang", "levels", "cell", "value"):
        table.add_column(col, overflow="fold")
    for r in rows:
        v = r["value"]
        table.add_row(_text(r["id"]), ",".join(r["kinds"]), _text(r["domain"] or "-"), _text(r["language"]),
                      _text(",".join(r["levels"]) or "-"), f"{r['modality']}/{r['execution']}",
                      f"{v['amount']:,.0f} {v['currency']}" if v else "-")
    return table


def curation_tables(result: CurationResult, zero_eps: float) -> list[Table]:
    """`assay curate`: the rules' effect, the dropped and reviewed tasks, the balance."""
    summary = Table(title=_text(f"assay curate · campaign {result.campaign}"))
    summary.add_column("rule", overflow="fold")
    summary.add_column("tasks", justify="right", overflow="fold")
    diff = result.rules["difficulty"]
    summary.add_row("tasks in campaign", str(result.tasks_total))
    summary.add_row(_text(f"dropped: difficulty ({diff['small_agent']}, k={diff['k']})") if diff["applied"]
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
            verdicts.add_row(_text(d.task_id), "dropped", _text(d.reason))
        for r in result.review:
            verdicts.add_row(_text(r.task_id), "review", _text(r.reason))
        tables.append(verdicts)
    bal = Table(title="balance (tasks before → after)")
    for col in ("by", "group", "before", "after"):
        bal.add_column(col, justify="right" if col in ("before", "after") else "left", overflow="fold")
    for axis, groups in result.balance.items():
        for name, c in groups.items():
            bal.add_row(_text(axis), _text(name), str(c.before), str(c.after))
    tables.append(bal)
    return tables


def calibration_table(cal: dict[str, Any]) -> Table:
    """`assay calibrate`: per judge, overall and per domain, the judge against the people."""
    table = Table(title=_text(f"assay calibrate · {cal['answers']} answers people scored"))
    for col in ("judge", "domain", "answers", "items", "agreement", "pearson r", "p", "NA"):
        table.add_column(col, justify="right" if col not in ("judge", "domain") else "left", overflow="fold")
    for j in cal["judges"]:
        rows = [("overall", j["overall"]), *sorted(j["domains"].items())]
        for i, (domain, a) in enumerate(rows):
            table.add_row(_text(j["judge"] if i == 0 else ""), _text(domain), str(a["n_responses"]), str(a["n_items"]),
                          _pct(a["item_agreement"]), _num(a["pearson_r"]),
                          "-" if a["p_value"] is None else f"{a['p_value']:.3g}", str(a["na"]))
    return table


def compare_table(cmp: Compare) -> Table:
    """`assay compare`: B against A per kind and overall."""
    title = f"assay compare · {cmp.b} against {cmp.a}"
    if cmp.against_campaign:
        title += f" (B from campaign {cmp.against_campaign})"
    table = Table(title=_text(title))
    for col in ("kind", "pairs", "mean A", "mean B", "diff B-A", "95% CI", "p", "wins", "losses", "ties"):
        table.add_column(col, justify="left" if col == "kind" else "right", overflow="fold")
    for kind, st in [*cmp.kinds.items(), ("overall", cmp.overall)]:
        ci = "-" if st.ci95 is None else f"[{st.ci95[0]:+.3f}, {st.ci95[1]:+.3f}]"
        diff = "-" if st.diff is None else f"{st.diff:+.3f}"
        p = "-" if st.p_value is None else f"{st.p_value:.3g}"
        table.add_row(_text(kind), str(st.n), _num(st.mean_a), _num(st.mean_b), diff, ci, p,
                      str(st.wins), str(st.losses), str(st.ties))
    return table


def dry_run_table(rows: list[dict[str, Any]], campaign: str) -> Table:
    """`assay run --dry-run`: per agent, the runs left and done and what the ones left may cost."""
    table = Table(title=_text(f"assay run --dry-run · campaign {campaign} · no model called"))
    for col in ("agent", "to do", "done", "est. input tokens", "est. output tokens", "est. cost", "basis"):
        table.add_column(col, justify="right" if col not in ("agent", "basis") else "left", overflow="fold")
    for r in rows:
        cost = "unknown" if r["cost_usd"] is None else f"${r['cost_usd']:.4f}"
        table.add_row(_text(r["agent"]), str(r["to_do"]), str(r["done"]), f"{r['input_tokens']:,}",
                      f"{r['output_tokens']:,}", cost, _text("; ".join(r["basis"]) or "-"))
    return table


def failure_table(fm: FailureModes) -> Table:
    """`assay report --failure-modes`: per agent, its failed runs and the share of each error category."""
    cats = [*fm.categories, "unclassified"]
    used = [c for c in cats if any(c in a.counts for a in fm.agents.values())]
    return _grid(f"failure modes of failed runs (judge {fm.judge})", ["agent", "failed", *used],
                 [[_text(agent), str(a.failed), *(f"{_pct(a.shares.get(c, 0.0))} ({a.counts.get(c, 0)})"
                                                 for c in used)]
                  for agent, a in fm.agents.items()])


def runs_listing_table(rows: list[RunRow], *, more: bool) -> Table:
    """`assay runs`: one line per stored run, its whole id first (what `assay show` takes)."""
    table = Table(title=Text("stored runs, newest first" + (" (more with --limit)" if more else "")))
    for col in ("run id", "campaign", "agent", "task", "level", "epoch", "status", "score", "cost"):
        table.add_column(col, justify="right" if col in ("epoch", "score", "cost") else "left", overflow="fold")
    for r in rows:
        score = "-" if r.score is None else f"{r.score:.3f}" + (" pass" if r.passed else "")
        cost = "unknown" if r.cost_usd is None else f"${r.cost_usd:.4f}"
        table.add_row(r.run_id, *(_text(v) for v in (r.campaign, r.agent, r.task_id, r.level or "-")),
                      str(r.epoch), r.status + (f" (attempt {r.attempt})" if r.attempt > 1 else ""), score, cost)
    return table
