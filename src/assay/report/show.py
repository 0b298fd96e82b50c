"""`assay show`: one run's transcript and grade, readable in a terminal."""

from __future__ import annotations

import json

from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from assay.record import Event, RunRecord

STYLE = {"system": "dim", "user": "cyan", "assistant": "green", "tool_call": "yellow", "tool_result": "white",
         "stakeholder": "magenta", "harness": "dim", "error": "red", "judge": "blue"}


def _body(ev: Event) -> str:
    d = ev.data
    if ev.kind in ("system", "user", "assistant"):
        text = d.get("content", "")
        if d.get("tool_calls"):
            text += "\n" + "\n".join(f"→ {c['name']}({json.dumps(c.get('arguments', {}), ensure_ascii=False)})"
                                     for c in d["tool_calls"])
        return text
    if ev.kind == "tool_call":
        return f"{d.get('name')}({json.dumps(d.get('arguments', {}), ensure_ascii=False)})"
    if ev.kind == "tool_result":
        return str(d.get("output", ""))
    return json.dumps(d, ensure_ascii=False, indent=1)


def render_run(console: Console, rec: RunRecord, events: list[Event]) -> None:
    k = rec.key
    head = (f"run {rec.run_id} · task {k.task_id} ({k.task_hash}) · agent {k.agent} · level {k.level or '-'} · "
            f"epoch {k.epoch} · attempt {rec.attempt}\nstatus {rec.status} · end {rec.end_reason}"
            f"{' (' + rec.void_reason + ')' if rec.void_reason else ''} · sandbox {rec.sandbox} · "
            f"score {rec.score if rec.score is not None else '-'} · passed {rec.passed}")
    console.print(Panel(head, title="run"))
    for ev in events:
        console.print(Panel(_body(ev)[:20000], title=f"{ev.seq} · {ev.t:.2f}s · {ev.kind}",
                            border_style=STYLE.get(ev.kind, "white"), title_align="left"), highlight=False)
    g = rec.grade
    if g.get("items"):
        t = Table(title="rubric items")
        for col in ("id", "weight", "tag", "hit", "na", "check", "reason"):
            t.add_column(col)
        for it in g["items"]:
            t.add_row(str(it["id"]), f"{it['weight']:g}", str(it.get("tag")), str(it["hit"]), str(it["na"]),
                      str(it["check"]), str(it.get("reason", ""))[:80])
        console.print(t)
    if g.get("predicates"):
        t = Table(title=f"contract (sat={g.get('sat')})")
        for col in ("path", "predicate", "ok", "reason"):
            t.add_column(col)
        for p in g["predicates"]:
            t.add_row(p["path"], p.get("predicate", ""), str(p["ok"]), p["reason"])
        console.print(t)
    audit = g.get("audit") or {}
    if audit.get("flags"):
        console.print(Panel("\n".join(f"{f['rule']}: {f['reason']}{' (removed)' if f.get('removed') else ''}"
                                      for f in audit["flags"]), title="audit flags"))
    u = rec.usage
    console.print(f"usage: in {u.input_tokens} · out {u.output_tokens} · cache read {u.cache_read_tokens} · "
                  f"cache write {u.cache_write_tokens} · cost {u.cost_usd if u.cost_usd is not None else 'unknown'}",
                  highlight=False)
