"""The HTML report: one self-contained file (no network, no CDN): the leaderboard, per kind
its block with score bars and 95% CI whiskers, its accuracy-cost Pareto plot with the front
drawn, pass@k / pass^k curves and the same numbers in tables, and a runs table that is
collapsed by default, sortable and filterable by a little inline JavaScript.

Plots are inline SVG written here (no plotting library: the file must open anywhere and build
fast for 100,000 runs). Every label that may be long is truncated with its full text in a
`<title>` tooltip and axis labels are rotated, so labels never overlap; an axis whose values
are all equal (every score 0, every cost 0) gets a sane range instead of a zero-width one.
"""

from __future__ import annotations

import json
import math
from html import escape
from pathlib import Path
from typing import Any

from jinja2 import Environment, select_autoescape
from markupsafe import Markup

from assay.record import escape_controls, escape_page_text
from assay.report.build import MIN_HUMAN_RUNS
from assay.report.model import Report, ScenarioBlock, summary_model
from assay.report.table import COMMON_COLUMNS, HEADLINES, KIND_COLUMNS

W, H = 600, 320
ML, MR, MT, MB = 64, 20, 36, 96  # margins: left, right, top, bottom (room for rotated labels)
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f",
          "#bcbd22"]
LABEL_MAX = 14
"""Characters of an agent name shown under a bar or beside a point; the full name is the tooltip."""
MODALITIES = ("text", "multimodal")
RUN_COLUMNS = ["run", "task", "agent", "level", "epoch", "status", "end", "score", "passed", "cost (USD)"]


def _short(text: str, n: int = LABEL_MAX) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _esc(text: str) -> str:
    """Text in a plot (an agent's name, a level): its control, bidi and other invisible
    characters escaped as every view of assay shows them (`record.escape_controls`), then its
    markup (`html.escape`)."""
    return escape(escape_controls(text))


def _label(x: float, y: float, text: str, *, rotate: float = 0, anchor: str = "middle", cls: str = "lbl") -> str:
    rot = f' transform="rotate({rotate:g} {x:.1f} {y:.1f})"' if rotate else ""
    shown = escape_controls(text)  # cut after escaping: an escape counts as the characters it shows
    return (f'<text class="{cls}" x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{rot}>'
            f"<title>{escape(shown)}</title>{escape(_short(shown))}</text>")


def _domain(values: list[float], *, include_zero: bool = True, unit: tuple[float, float] | None = None
            ) -> tuple[float, float]:
    """A [lo, hi] range holding the values (and 0, and `unit` when given, e.g. [0, 1] for
    scores in it), padded by 5%; never of zero width."""
    vals = [v for v in values if math.isfinite(v)] or [0.0]
    lo, hi = min(vals), max(vals)
    if include_zero:
        lo, hi = min(lo, 0.0), max(hi, 0.0)
    if unit is not None:
        lo, hi = min(lo, unit[0]), max(hi, unit[1])
    if hi == lo:  # every value equal (e.g. every cost 0): one unit around it
        return (lo - 0.5, hi + 0.5) if lo != 0 else (0.0, 1.0)
    pad = (hi - lo) * 0.05
    return (lo - pad if lo < 0 else lo, hi + pad)


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    step = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(step))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= step), default=step)
    start = math.ceil(lo / step) * step
    return [start + i * step for i in range(int((hi - start) / step + 1e-9) + 1)]


class _Axes:
    def __init__(self, x: tuple[float, float], y: tuple[float, float]) -> None:
        self.x, self.y = x, y

    def px(self, v: float) -> float:
        return ML + (v - self.x[0]) / (self.x[1] - self.x[0]) * (W - ML - MR)

    def py(self, v: float) -> float:
        return H - MB - (v - self.y[0]) / (self.y[1] - self.y[0]) * (H - MT - MB)


def _frame(ax: _Axes, title: str, xlabel: str, ylabel: str, *, xticks: bool = True, int_x: bool = False
           ) -> list[str]:
    out = [f'<text class="title" x="{W / 2:.0f}" y="18" text-anchor="middle">{escape(title)}</text>',
           f'<line class="axis" x1="{ML}" y1="{H - MB}" x2="{W - MR}" y2="{H - MB}"/>',
           f'<line class="axis" x1="{ML}" y1="{MT}" x2="{ML}" y2="{H - MB}"/>',
           f'<text class="axlabel" x="{(ML + W - MR) / 2:.0f}" y="{H - 8}" text-anchor="middle">{escape(xlabel)}</text>',
           f'<text class="axlabel" x="14" y="{(MT + H - MB) / 2:.0f}" text-anchor="middle" '
           f'transform="rotate(-90 14 {(MT + H - MB) / 2:.0f})">{escape(ylabel)}</text>']
    for t in _ticks(*ax.y):
        y = ax.py(t)
        out.append(f'<line class="grid" x1="{ML}" y1="{y:.1f}" x2="{W - MR}" y2="{y:.1f}"/>'
                   f'<text class="tick" x="{ML - 4}" y="{y + 3:.1f}" text-anchor="end">{t:.3g}</text>')
    if xticks:
        xs = _ticks(*ax.x)
        if int_x:  # k is a count: integer ticks only
            xs = sorted({float(round(t)) for t in xs if abs(t - round(t)) < 1e-9} | {ax.x[0], ax.x[1]})
        for t in xs:
            x = ax.px(t)
            out.append(f'<text class="tick" x="{x:.1f}" y="{H - MB + 14}" text-anchor="middle">{t:.3g}</text>')
    return out


def _svg(cls: str, parts: list[str], desc: str) -> Markup:
    return Markup(f'<svg class="plot {cls}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" '
                  f'width="{W}" height="{H}" role="img"><desc>{escape(desc)}</desc>{"".join(parts)}</svg>')


def bars_svg(kind: str, label: str, items: list[tuple[str, float, list[float] | None]]) -> Markup:
    """Each agent's headline score as a bar with its 95% CI as a whisker. A score of 0 is
    drawn as a visible bar at the zero line (class `zero`), never left out."""
    vals = [v for _a, v, ci in items for v in ([v] + (ci or []))]
    ax = _Axes((0, max(1, len(items))), _domain(vals, unit=(0.0, 1.0) if kind != "scenario" else None))
    parts = _frame(ax, f"{kind}: {label} by agent (bars: mean, whiskers: 95% bootstrap CI)", "agent",
                   label, xticks=False)
    slot = (W - ML - MR) / max(1, len(items))
    zero = ax.py(0.0) if ax.y[0] <= 0 <= ax.y[1] else ax.py(ax.y[0])
    for i, (agent, v, ci) in enumerate(items):
        cx = ML + slot * (i + 0.5)
        bw = min(48.0, slot * 0.6)
        top, bottom = sorted((ax.py(v), zero))
        zero_bar = bottom - top < 2
        if zero_bar:
            top, bottom = zero - 1, zero + 1
        parts.append(f'<rect class="bar{" zero" if zero_bar else ""}" x="{cx - bw / 2:.1f}" y="{top:.1f}" '
                     f'width="{bw:.1f}" height="{bottom - top:.1f}" fill="{COLORS[i % len(COLORS)]}">'
                     f"<title>{_esc(agent)}: {v:.4g}</title></rect>")
        if ci is not None:
            lo, hi = ax.py(ci[0]), ax.py(ci[1])
            parts.append(f'<g class="errbar"><title>95% CI [{ci[0]:.4g}, {ci[1]:.4g}]</title>'
                         f'<line x1="{cx:.1f}" y1="{lo:.1f}" x2="{cx:.1f}" y2="{hi:.1f}"/>'
                         f'<line x1="{cx - 6:.1f}" y1="{lo:.1f}" x2="{cx + 6:.1f}" y2="{lo:.1f}"/>'
                         f'<line x1="{cx - 6:.1f}" y1="{hi:.1f}" x2="{cx + 6:.1f}" y2="{hi:.1f}"/></g>')
        parts.append(f'<text class="val" x="{cx + bw / 2 + 2:.1f}" y="{min(top, ax.py(ci[1]) if ci else top) - 3:.1f}">'
                     f"{v:.3g}</text>")
        parts.append(_label(cx, H - MB + 12, agent, rotate=-35, anchor="end"))
    return _svg("bars", parts, f"{kind} {label} per agent with 95% confidence intervals")


def pareto_svg(kind: str, points: list[tuple[str, float, float]], front: list[str], modality: str | None = None
               ) -> Markup:
    """Cost (USD) against the kind's headline per agent (over its `modality` tasks only, when
    given: DAREBench's separate text and multimodal fronts); the Pareto front (no agent both
    cheaper and better) drawn as a stepped line. All costs 0 gives the axis [0, 1]."""
    ax = _Axes(_domain([c for _a, c, _s in points]),
               _domain([s for _a, _c, s in points], unit=(0.0, 1.0) if kind != "scenario" else None))
    all_zero = all(c == 0 for _a, c, _s in points)
    scope = kind if modality is None else f"{kind} ({modality} tasks)"
    parts = _frame(ax, f"{scope}: score against cost, Pareto front" + (" (every cost is 0)" if all_zero else ""),
                   "cost of the agent's runs (USD)", "mean score")
    fpts = sorted(((c, s) for a, c, s in points if a in front), key=lambda p: (p[0], -p[1]))
    if fpts:
        path = [f"M{ax.px(fpts[0][0]):.1f},{ax.py(fpts[0][1]):.1f}"]
        for c1, s1 in fpts[1:]:
            path.append(f"H{ax.px(c1):.1f}V{ax.py(s1):.1f}")
        path.append(f"H{W - MR}")
        parts.append(f'<path class="front" d="{"".join(path)}"><title>Pareto front</title></path>')
    for i, (agent, c, s) in enumerate(points):
        x, y = ax.px(c), ax.py(s)
        on = agent in front
        parts.append(f'<circle class="pt{" onfront" if on else ""}" cx="{x:.1f}" cy="{y:.1f}" r="5" '
                     f'fill="{COLORS[i % len(COLORS)]}"><title>{_esc(agent)}: ${c:.4g}, {s:.4g}</title></circle>')
        parts.append(_label(x + 7, y - 7 - 10 * (i % 3), agent, anchor="start"))
    ly = MT + 4
    parts.append(f'<g class="legend"><path class="front" d="M{W - MR - 150},{ly} h24"/>'
                 f'<text class="tick" x="{W - MR - 120}" y="{ly + 3}">Pareto front</text>'
                 f'<circle cx="{W - MR - 138}" cy="{ly + 14}" r="4" fill="#555"/>'
                 f'<text class="tick" x="{W - MR - 120}" y="{ly + 17}">agent</text></g>')
    return _svg("pareto" if modality is None else f"pareto modality-{modality}", parts,
                f"{scope} mean score against cost with the Pareto front")


def curves_svg(kind: str, name: str, series: list[tuple[str, dict[str, float]]]) -> Markup:
    """pass@k or pass^k over k = 1..epochs, one line per agent, with a legend."""
    kmax = max((int(k) for _a, c in series for k in c), default=1)
    ax = _Axes((1, max(2, kmax)), (0.0, 1.0))
    parts = _frame(ax, f"{kind}: {name} over epochs", "k (draws out of the epochs run)", f"{name} (share of tasks)",
                   int_x=True)
    for i, (agent, curve) in enumerate(series):
        pts = sorted((int(k), v) for k, v in curve.items())
        color = COLORS[i % len(COLORS)]
        d = " ".join(f"{'M' if j == 0 else 'L'}{ax.px(k):.1f},{ax.py(v):.1f}" for j, (k, v) in enumerate(pts))
        parts.append(f'<path class="curve" d="{d}" stroke="{color}"><title>{_esc(agent)}</title></path>')
        if len(pts) == 1:
            parts.append(f'<circle cx="{ax.px(pts[0][0]):.1f}" cy="{ax.py(pts[0][1]):.1f}" r="3" fill="{color}"/>')
        ly = MT + 4 + 14 * i
        parts.append(f'<g class="legend"><line x1="{W - MR - 130}" y1="{ly}" x2="{W - MR - 110}" y2="{ly}" '
                     f'stroke="{color}" stroke-width="2"/>{_label(W - MR - 106, ly + 4, agent, anchor="start")}</g>')
    return _svg("curve", parts, f"{kind} {name} per agent")


def levels_svg(series: list[tuple[str, dict[str, float]]]) -> Markup:
    """Scenario mean S per level (L0 full brief .. L3 discover everything), one line per agent:
    `series` holds each agent's mean S by level."""
    levels = sorted({lv for _a, by in series for lv in by})
    vals = [v for _a, by in series for v in by.values()]
    ax = _Axes((-0.5, len(levels) - 0.5), _domain(vals))
    parts = _frame(ax, "scenario: mean S per level", "level (L0 full brief .. L3 discover everything)", "mean S",
                   xticks=False)
    for i, lv in enumerate(levels):
        parts.append(f'<text class="tick" x="{ax.px(i):.1f}" y="{H - MB + 14}" text-anchor="middle">{_esc(lv)}</text>')
    for j, (agent, by) in enumerate(series):
        color = COLORS[j % len(COLORS)]
        pts = [(levels.index(lv), by[lv]) for lv in levels if lv in by]
        d = " ".join(f"{'M' if n == 0 else 'L'}{ax.px(x):.1f},{ax.py(y):.1f}" for n, (x, y) in enumerate(pts))
        parts.append(f'<path class="curve level" d="{d}" stroke="{color}"><title>{_esc(agent)}</title></path>')
        parts += [f'<circle cx="{ax.px(x):.1f}" cy="{ax.py(y):.1f}" r="3" fill="{color}"><title>{_esc(agent)} '
                  f"{_esc(levels[x])}: {y:.4g}</title></circle>" for x, y in pts]
        ly = MT + 4 + 14 * j
        parts.append(f'<g class="legend"><line x1="{W - MR - 130}" y1="{ly}" x2="{W - MR - 110}" y2="{ly}" '
                     f'stroke="{color}" stroke-width="2"/>{_label(W - MR - 106, ly + 4, agent, anchor="start")}</g>')
    return _svg("levels", parts, "scenario mean S per level and agent")


def kind_sections(model: Report) -> list[dict[str, Any]]:
    """Per kind present: its plots and the tables of the same numbers (the terminal's columns),
    read from the report's models (`model.summary_model`)."""
    out = []
    for kind, head, label in HEADLINES:
        having = [(a.agent, b) for a in model.agents if (b := getattr(a, kind)) is not None]
        if not having:
            continue
        having.sort(key=lambda ab: (getattr(ab[1], head) is None, -(getattr(ab[1], head) or 0.0), ab[0]))
        scored = [(agent, b) for agent, b in having if getattr(b, head) is not None]
        plots = [bars_svg(kind, label, [(agent, getattr(b, head), b.ci95) for agent, b in scored])]
        priced = [(agent, b.cost_usd, getattr(b, head)) for agent, b in scored if b.cost_usd is not None]
        if priced:
            plots.append(pareto_svg(kind, priced, [p.agent for p in model.pareto.get(kind, [])]))
        pareto_rows = []
        if all(f"{kind}/{m}" in model.pareto_points for m in MODALITIES):  # both modalities ran: one plot each
            for m in MODALITIES:
                scope = f"{kind}/{m}"
                on = [p.agent for p in model.pareto.get(scope, [])]
                pts = [(p.agent, p.cost_usd, p.mean_score) for p in model.pareto_points[scope]]
                plots.append(pareto_svg(kind, pts, on, modality=m))
                pareto_rows += [[a, m, f"{c:.4g}", f"{v:.4g}", "yes" if a in on else "no"] for a, c, v in pts]
        for field, name in (("pass_at_k", "pass@k"), ("pass_hat_k", "pass^k")):
            series = [(agent, getattr(b, field)) for agent, b in having if getattr(b, field)]
            if series:
                plots.append(curves_svg(kind, name, series))
        leveled = [(agent, {lv: level.mean_s for lv, level in b.levels.items()}) for agent, b in having
                   if isinstance(b, ScenarioBlock) and b.levels]
        if leveled:
            plots.append(levels_svg(leveled))
        cols = [*KIND_COLUMNS[kind], *COMMON_COLUMNS]
        rows = [[agent, str(len(b.tasks)), *(f(b) for _n, f in cols)] for agent, b in having]
        ts = model.task_sets.get(kind)
        families = [[agent, fam, f"{f.mean_s:.4g}", str(len(f.variants)), f"{f.spread:.4g}", str(f.runs)]
                    for agent, b in having if isinstance(b, ScenarioBlock) for fam, f in b.families.items()]
        out.append({"kind": kind, "plots": plots, "head": ["agent", "tasks", *(n for n, _f in cols)], "rows": rows,
                    "families": families, "pareto_rows": pareto_rows,
                    "baseline": [[fam, ", ".join(b.people), str(b.runs), f"{b.mean:.4g}", _ci_cell(b.ci95),
                                  "; ".join(f"{a} {v.mean:.4g} ({v.runs} runs)" for a, v in b.agents.items()) or "-"]
                                 for fam, b in model.human_baseline.get(kind, {}).items()],
                    "differ": bool(ts and ts.differ), "missing": ts.missing if ts else {},
                    "shared": len(ts.shared) if ts else 0})
    return out


def _ci_cell(ci: list[float] | None) -> str:
    return "-" if ci is None else f"[{ci[0]:.4g}, {ci[1]:.4g}]"


def _runs_json(report: dict[str, Any]) -> Markup:
    """The runs as JSON rows for the inline table script, safe inside `<script>` (no `<`, `>`
    or `&` survives unescaped, so no text can close the element)."""
    rows = [[r["run_id"], r["task_id"], r["agent"], r["level"] or "", r["epoch"], r["status"], r["end_reason"],
             r["score"], r["passed"], r["usage"].get("cost_usd")] for r in report["runs"]]
    rows = [[escape_controls(v) if isinstance(v, str) else v for v in row] for row in rows]  # as the page shows text
    text = json.dumps(rows, separators=(",", ":"), allow_nan=False)
    return Markup(text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))


SCRIPT = r"""
(function(){
const data = JSON.parse(document.getElementById('runs-data').textContent);
const tbody = document.querySelector('#runs-table tbody');
const filter = document.getElementById('runs-filter');
const status = document.getElementById('runs-status');
const shown = document.getElementById('runs-shown');
const LIMIT = 500;
let sortCol = -1, sortDir = 1;
function cell(v){ return v === null ? '-' : (typeof v === 'number' && !Number.isInteger(v) ? String(Number(v.toPrecision(4))) : String(v)); }
function render(){
  const q = filter.value.trim().toLowerCase(), st = status.value;
  let rows = data.filter(r => (!st || r[5] === st) && (!q || r.some(v => v !== null && String(v).toLowerCase().includes(q))));
  if (sortCol >= 0) {
    rows = rows.slice().sort((a, b) => {
      const x = a[sortCol], y = b[sortCol];
      if (x === y) return 0; if (x === null) return 1; if (y === null) return -1;
      return (typeof x === 'number' && typeof y === 'number' ? x - y : String(x).localeCompare(String(y))) * sortDir;
    });
  }
  const frag = document.createDocumentFragment();
  for (const r of rows.slice(0, LIMIT)) {
    const tr = document.createElement('tr');
    tr.className = r[5];
    r.forEach((v, i) => {
      const td = document.createElement('td');
      if (i === 1) { const a = document.createElement('a'); a.href = '#runs'; a.className = 'task';
        a.title = 'show every run of this task'; a.textContent = v; a.dataset.task = v; td.appendChild(a); }
      else td.textContent = cell(v);
      tr.appendChild(td);
    });
    frag.appendChild(tr);
  }
  tbody.replaceChildren(frag);
  shown.textContent = 'showing ' + Math.min(rows.length, LIMIT) + ' of ' + rows.length + ' matching runs (' + data.length + ' in all)';
}
document.querySelectorAll('#runs-table th').forEach((th, i) => th.addEventListener('click', () => {
  sortDir = sortCol === i ? -sortDir : 1; sortCol = i;
  document.querySelectorAll('#runs-table th').forEach(h => h.removeAttribute('aria-sort'));
  th.setAttribute('aria-sort', sortDir > 0 ? 'ascending' : 'descending');
  render();
}));
tbody.addEventListener('click', e => { const a = e.target.closest('a.task'); if (a) { e.preventDefault(); filter.value = a.dataset.task; render(); } });
filter.addEventListener('input', render);
status.addEventListener('change', render);
render();
})();
"""

TEMPLATE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>assay report · {{ campaign }}</title>
<style>body{font-family:system-ui,sans-serif;margin:2em;max-width:1300px}table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}td:first-child,th:first-child{text-align:left}
.void{color:#a00}.warn{color:#8a5a00}.plots{display:flex;flex-wrap:wrap;gap:8px}
svg.plot{border:1px solid #eee;background:#fff;font-size:11px}svg .title{font-size:13px;font-weight:600}
svg .axis{stroke:#333}svg .grid{stroke:#eee}svg .errbar line{stroke:#000;stroke-width:1.5}
svg .bar.zero{stroke:#333;stroke-width:1}svg .front{fill:none;stroke:#d62728;stroke-width:2;stroke-dasharray:6 3}
svg .curve{fill:none;stroke-width:2}svg .tick,svg .lbl,svg .val{fill:#333}svg .axlabel{fill:#000}
#runs-table th{cursor:pointer;background:#f4f4f4}#runs-table th[aria-sort=ascending]::after{content:" ▲"}
#runs-table th[aria-sort=descending]::after{content:" ▼"}</style></head><body>
<h1>assay report · campaign {{ campaign }}</h1>
{% if shared_tasks %}<p>Every kind's block covers only the tasks every agent that ran the kind finished (<code>--shared-tasks</code>).</p>{% endif %}
{% for w in warnings %}<p class="warn">warning: {{ w }}</p>{% endfor %}
<h2>Leaderboard</h2><table id="leaderboard"><tr><th>agent</th><th>runs</th><th>void</th><th>pass rate</th>
{% for k in kinds %}<th>{{ k[2] }}</th>{% endfor %}<th>value earned</th><th>cost (USD)</th><th>tokens</th></tr>
{% for a in agents %}<tr><td>{{ a.agent }}</td><td>{{ a.runs }}</td><td>{{ a.void }}</td><td>{{ pct(a.pass_rate) }}</td>
{% for k in kinds %}<td>{{ num(a[k[0]][k[1]]) if a[k[0]] is not none else '-' }}</td>{% endfor %}
<td>{{ money(a.economic_value) }}</td><td>{{ num(a.cost_usd) }}</td><td>{{ a.tokens }}</td></tr>{% endfor %}
</table>
{% for s in sections %}<section class="kind" id="kind-{{ s.kind }}"><h2>{{ s.kind }}</h2>
{% if s.differ %}<p class="warn">Agents finished different {{ s.kind }} task sets ({{ s.shared }} finished by all):
{% for a, m in s.missing.items() %}{{ a }} lacks {{ m|length }}{% if not loop.last %}; {% endif %}{% endfor %}.
<code>assay report --shared-tasks</code> compares them on the shared ones.</p>{% endif %}
<div class="plots">{% for p in s.plots %}{{ p }}{% endfor %}</div>
<table class="block"><tr>{% for h in s.head %}<th>{{ h }}</th>{% endfor %}</tr>
{% for r in s.rows %}<tr>{% for c in r %}<td>{{ c }}</td>{% endfor %}</tr>{% endfor %}</table>
{% if s.families %}<h3>Scenario families (spread: best minus worst variant's mean S)</h3><table class="families">
<tr><th>agent</th><th>family</th><th>mean S</th><th>variants</th><th>spread</th><th>runs</th></tr>
{% for r in s.families %}<tr>{% for c in r %}<td>{{ c }}</td>{% endfor %}</tr>{% endfor %}</table>{% endif %}
{% if s.pareto_rows %}<h3>Score against cost per modality (the text and multimodal Pareto plots)</h3><table class="pareto-modality">
<tr><th>agent</th><th>modality</th><th>cost (USD)</th><th>mean score</th><th>on the front</th></tr>
{% for r in s.pareto_rows %}<tr>{% for c in r %}<td>{{ c }}</td>{% endfor %}</tr>{% endfor %}</table>{% endif %}
{% if s.baseline %}<h3>Human expert baseline per task family (people's runs pooled; shown from {{ min_human_runs }} runs)</h3>
<table class="human-baseline"><tr><th>family</th><th>people</th><th>runs</th><th>human mean</th><th>95% CI</th><th>agents on the same tasks</th></tr>
{% for r in s.baseline %}<tr>{% for c in r %}<td>{{ c }}</td>{% endfor %}</tr>{% endfor %}</table>{% endif %}
</section>{% endfor %}
{% if failure_modes %}<section id="failure-modes"><h2>Failure modes (judge {{ failure_modes.judge }})</h2>
<table><tr><th>agent</th><th>failed</th><th>category</th><th>runs</th><th>share</th></tr>
{% for agent, a in failure_modes.agents.items() %}{% for c, n in a.counts.items() %}<tr><td>{{ agent }}</td><td>{{ a.failed }}</td>
<td>{{ c }}</td><td>{{ n }}</td><td>{{ pct(a.shares[c]) }}</td></tr>{% endfor %}{% endfor %}</table>
<details><summary>each failed run's category and reason</summary><table><tr><th>run</th><th>agent</th><th>task</th><th>category</th><th>reason</th></tr>
{% for m in failure_modes.runs %}<tr><td>{{ m.run_id }}</td><td>{{ m.agent }}</td><td>{{ m.task_id }}</td><td>{{ m.category }}</td>
<td>{{ m.reason }}</td></tr>{% endfor %}</table></details></section>{% endif %}
<details id="runs"><summary>Runs ({{ n_runs }}): sortable, filterable</summary>
<p><label>filter <input id="runs-filter" type="search" placeholder="agent, task, status, score…"></label>
<label>status <select id="runs-status"><option value="">any</option><option>done</option><option>void</option><option>broken</option></select></label>
<span id="runs-shown"></span></p>
<table id="runs-table"><thead><tr>{% for c in run_columns %}<th>{{ c }}</th>{% endfor %}</tr></thead><tbody></tbody></table>
<noscript>The runs table needs JavaScript; the same rows are in the --json and --csv exports.</noscript>
</details>
<script type="application/json" id="runs-data">{{ runs_json }}</script>
<script>{{ script }}</script>
</body></html>"""


def render_html(report: dict[str, Any]) -> str:
    """The HTML report: its numbers read from the report's models (`model.summary_model`), its
    runs table from the report's run rows."""
    env = Environment(autoescape=select_autoescape(default=True), finalize=escape_page_text)
    model = summary_model(report)
    kinds = [k for k in HEADLINES if any(getattr(a, k[0]) is not None for a in model.agents)]
    return env.from_string(TEMPLATE).render(
        campaign=model.campaign or "(all)", agents=model.agents, kinds=kinds,
        sections=kind_sections(model), warnings=model.warnings, shared_tasks=model.shared_tasks,
        failure_modes=model.failure_modes, min_human_runs=MIN_HUMAN_RUNS, n_runs=len(report["runs"]),
        run_columns=RUN_COLUMNS, runs_json=_runs_json(report), script=Markup(SCRIPT),
        pct=lambda v: "-" if v is None else f"{100 * v:.1f}%",
        num=lambda v: "-" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v)),
        money=lambda e: " / ".join(f"{v:,.0f} {c}" for c, v in sorted(e.items())) or "-",
    )


def write_html(report: dict[str, Any], path: Path) -> None:
    html = render_html(report)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(html, encoding="utf-8")
    tmp.replace(path)
