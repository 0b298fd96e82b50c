"""The HTML report: leaderboard, per-kind breakdowns and plots, in one self-contained file."""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

from jinja2 import Environment, select_autoescape

from assay import metrics

TEMPLATE = """<!doctype html><html><head><meta charset="utf-8"><title>assay report · {{ campaign }}</title>
<style>body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}td:first-child,th:first-child{text-align:left}
.void{color:#a00}img{max-width:100%}</style></head><body>
<h1>assay report · campaign {{ campaign }}</h1>
<h2>Leaderboard</h2><table><tr><th>agent</th><th>runs</th><th>void</th><th>pass rate</th><th>mean score</th>
<th>value earned</th><th>cost (USD)</th><th>tokens</th></tr>
{% for a in agents %}<tr><td>{{ a.agent }}</td><td>{{ a.runs }}</td><td>{{ a.void }}</td><td>{{ pct(a.pass_rate) }}</td>
<td>{{ num(a.mean_score) }}</td><td>{{ money(a.economic_value) }}</td><td>{{ num(a.cost_usd) }}</td><td>{{ a.tokens }}</td></tr>{% endfor %}
</table>
{% for img in plots %}<img src="data:image/png;base64,{{ img }}">{% endfor %}
<h2>Runs</h2><table><tr><th>run</th><th>task</th><th>agent</th><th>level</th><th>epoch</th><th>status</th><th>end</th><th>score</th><th>passed</th></tr>
{% for r in runs %}<tr class="{{ r.status }}"><td>{{ r.run_id }}</td><td>{{ r.task_id }}</td><td>{{ r.agent }}</td><td>{{ r.level or '-' }}</td>
<td>{{ r.epoch }}</td><td>{{ r.status }}</td><td>{{ r.end_reason }}</td><td>{{ num(r.score) }}</td><td>{{ r.passed }}</td></tr>{% endfor %}
</table></body></html>"""


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


def plots(report: dict[str, Any]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    agents = [a for a in report["agents"] if a.get("mean_score") is not None]
    if not agents:
        return []
    out = []
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.bar([a["agent"] for a in agents], [a["mean_score"] for a in agents], color="#4a7")
    ax.set_ylabel("mean score")
    ax.set_title("mean score by agent")
    ax.tick_params(axis="x", rotation=30)
    out.append(_png(fig))
    plt.close(fig)
    priced = [a for a in agents if a.get("cost_usd") is not None]
    if priced:
        pts = [(a["cost_usd"], a["mean_score"]) for a in priced]
        front = metrics.pareto_front(pts)
        fig, ax = plt.subplots(figsize=(7, 3.5))
        ax.scatter([p[0] for p in pts], [p[1] for p in pts])
        for a, p in zip(priced, pts, strict=True):
            ax.annotate(a["agent"], p, fontsize=8)
        fx = [pts[i] for i in front]
        ax.plot([p[0] for p in fx], [p[1] for p in fx], "r--", label="Pareto front")
        ax.set_xlabel("cost (USD)")
        ax.set_ylabel("mean score")
        ax.legend()
        out.append(_png(fig))
        plt.close(fig)
    return out


def write_html(report: dict[str, Any], path: Path) -> None:
    env = Environment(autoescape=select_autoescape(default=True))
    tpl = env.from_string(TEMPLATE)
    html = tpl.render(
        campaign=report.get("campaign") or "(all)", agents=report["agents"], runs=report["runs"], plots=plots(report),
        pct=lambda v: "-" if v is None else f"{100 * v:.1f}%",
        num=lambda v: "-" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v)),
        money=lambda e: " / ".join(f"{v:,.0f} {c}" for c, v in sorted(e.items())) or "-",
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(html, encoding="utf-8")
    tmp.replace(path)
