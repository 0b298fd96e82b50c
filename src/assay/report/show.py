"""`assay show`: one run's transcript and grade, readable in a terminal.

Model, tool and task text is shown as text (`rich.text.Text`), never interpreted as markup,
and with its control characters escaped (`assay.record.escape_controls`: newlines kept in
multi-line text, escaped in names), so an agent's file name, output or answer cannot clear
the screen, move the cursor, forge lines or reorder them with a bidi override in the
operator's terminal. `--json` prints the stored text exactly (JSON escapes it).
"""

from __future__ import annotations

import json

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from assay.record import (
    AssistantEvent,
    AuditFlag,
    Event,
    Grade,
    RunRecord,
    SystemEvent,
    ToolCallEvent,
    ToolResultEvent,
    UserEvent,
    escape_controls,
)

STYLE = {"system": "dim", "user": "cyan", "assistant": "green", "tool_call": "yellow", "tool_result": "white",
         "stakeholder": "magenta", "harness": "dim", "error": "red"}


def _text(text: str) -> Text:
    """Multi-line text (an event's body, a reason) as shown: controls escaped, lines kept."""
    return Text(escape_controls(text, keep_lines=True))


def _name(text: str) -> Text:
    """A name (a path, an item id) as shown: every control escaped, newlines included."""
    return Text(escape_controls(text))


def _body(ev: Event) -> str:
    if isinstance(ev, SystemEvent | UserEvent):
        return ev.content
    if isinstance(ev, AssistantEvent):
        calls = [f"→ {c.get('name')}({json.dumps(c.get('arguments', {}), ensure_ascii=False)})" for c in ev.tool_calls]
        return "\n".join([ev.content, *calls]) if calls else ev.content
    if isinstance(ev, ToolCallEvent):
        return f"{ev.name}({json.dumps(ev.arguments, ensure_ascii=False)})"
    if isinstance(ev, ToolResultEvent):
        return ev.output
    return json.dumps(ev.data(), ensure_ascii=False, indent=1)


def render_run(console: Console, rec: RunRecord, events: list[Event]) -> None:
    k = rec.key
    head = (f"run {rec.run_id} · task {k.task_id} ({k.task_hash}) · agent {k.agent} · level {k.level or '-'} · "
            f"epoch {k.epoch} · attempt {rec.attempt}\nstatus {rec.status} · end {rec.end_reason}"
            f"{' (' + rec.void_reason + ')' if rec.void_reason else ''} · sandbox {rec.sandbox} · "
            f"score {rec.score if rec.score is not None else '-'} · passed {rec.passed}")
    console.print(Panel(_text(head), title="run"))
    for ev in events:
        console.print(Panel(_text(_body(ev)[:20000]), title=_name(f"{ev.seq} · {ev.t:.2f}s · {ev.kind}"),
                            border_style=STYLE.get(ev.kind, "white"), title_align="left"))
    g = rec.grade
    if g.rubric is not None and g.rubric.items:
        t = Table(title="rubric items")
        for col in ("id", "weight", "tag", "hit", "na", "check", "reason"):
            t.add_column(col, overflow="fold")
        for it in g.rubric.items:
            t.add_row(_name(it.id), f"{it.weight:g}", _name(str(it.tag)), "NA" if it.na else str(it.hit), str(it.na),
                      str(it.check), _text(it.reason[:300]))
        console.print(t)
    if g.contract is not None and g.contract.predicates:
        t = Table(title=f"contract (sat={g.contract.sat})")
        for col in ("path", "predicate", "ok", "reason"):
            t.add_column(col, overflow="fold")
        for p in g.contract.predicates:
            t.add_row(_name(p.path), p.predicate or "", str(p.ok), _text(p.reason))
        console.print(t)
    if g.contract is not None and (g.contract.checks or g.contract.judge):
        lines = [f"check {k}: {v}" for k, v in (g.contract.checks or {}).items()]
        judge = g.contract.judge or {}
        if judge:
            lines.append(f"judge total: {judge.get('total')}"
                         + (" (read as a percent)" if judge.get("read_as_percent") else "")
                         + (" (capped)" if judge.get("capped") else ""))
            lines += [f"judge {k}: {v}" for k, v in (judge.get("scores") or {}).items()]
            if judge.get("notes"):
                lines.append(f"judge notes: {judge['notes']}")
        console.print(Panel(_text("\n".join(lines)), title="contract checks and judge"))
    _faults(console, g)
    if g.scenario is not None:
        sg = g.scenario
        lines = [f"KPI {_num(sg.kpi)} (baseline {_num(sg.kpi_baseline)}, reference {_num(sg.kpi_reference)})",
                 f"uplift U {_num(sg.uplift, '.4g')} · after incidents U_adj {sg.uplift_adj:.4g} · contact cost "
                 f"{sg.contact_cost:.4g} · S {sg.score:.4g} · solved {sg.solved}",
                 f"incidents: {'; '.join(sg.incidents) if sg.incidents else 'none'}",
                 f"questions asked: {sg.questions_asked} "
                 f"({', '.join(f'{p} {n}' for p, n in sorted(sg.asked_by_person.items())) or 'nobody'})",
                 f"key-fact coverage: {'-' if sg.key_fact_coverage is None else f'{sg.key_fact_coverage:.0%}'} "
                 f"· facts obtained: {', '.join(sg.facts_obtained) or 'none'}",
                 f"router: {sg.router or '-'}" + (f" ({sg.router_fallback_count} fallback(s))"
                                                  if sg.router_fallback_count else "")]
        if sg.off_limits_contacts:
            lines.append(f"off-limits contacts: {', '.join(sg.off_limits_contacts)}")
        summary = str(sg.grader.get("summary") or "")
        if summary:
            lines.append(f"grader: {summary[:2000]}")
        console.print(Panel(_text("\n".join(lines)), title="scenario grade"))
    _audit(console, g)
    u = rec.usage
    console.print(f"usage: in {u.input_tokens} · out {u.output_tokens} · cache read {u.cache_read_tokens} · "
                  f"cache write {u.cache_write_tokens} · cost {u.cost_usd if u.cost_usd is not None else 'unknown'}",
                  highlight=False, markup=False)


def _audit(console: Console, g: Grade) -> None:
    """The audit's flags, and what the injection screen said."""
    if g.audit is not None and g.audit.flags:
        console.print(Panel(_text("\n".join(_flag_lines(f) for f in g.audit.flags)), title="audit flags"))
    if g.audit is not None and g.audit.screen is not None:
        console.print(Panel(_text(_screen_lines(g.audit.screen)), title="injection screen"))


def _flag_lines(f: AuditFlag) -> str:
    """An audit flag as shown. A `judge_injection` flag also lists its passages (quoted as JSON
    strings, so a passage's line breaks cannot pose as lines of the report) and, once the run
    was judged again without them, both scores and both verdicts."""
    lines = [f"{f.rule}: {f.reason}{' (removed)' if f.removed else ''}"]
    extra = f.model_extra or {}
    for p in extra.get("passages") or []:
        found = {"screen": "found by the screen", "rules+screen": "found by the rules and the screen"}.get(
            str(p.get("detector")), "found by the rules")
        lines.append(f"  passage in the {p.get('where')} ({found}, {p.get('kind')}, {p.get('chars')} characters): "
                     + json.dumps(str(p.get("text", "")), ensure_ascii=False))
    if extra.get("rejudged"):
        lines.append(f"  score with the passages {_score(extra.get('score_with'))} · without them "
                     f"{_score(extra.get('score_without'))} · kept: {extra.get('kept')} the passages")
        for which in ("with", "without"):
            verdict = json.dumps(extra.get(f"verdict_{which}"), ensure_ascii=False)
            lines.append(f"  verdict {which} the passages: {verdict}")
    return "\n".join(lines)


def _screen_lines(screen: dict[str, object]) -> str:
    """What the injection screen said: how many passages it found, the quotes refused and why
    (as JSON strings), an unreadable reply's reason."""
    lines = [f"judge {screen.get('judge')} · {screen.get('texts')} text(s) screened · "
             f"{screen.get('passages')} passage(s) accepted"]
    refused = screen.get("refused")
    for r in refused if isinstance(refused, list) else []:
        lines.append(f"  refused ({r.get('reason')}): " + json.dumps(str(r.get("quote", "")), ensure_ascii=False))
    if screen.get("error"):
        lines.append(f"  {screen.get('error')}")
    return "\n".join(lines)


def _score(x: object) -> str:
    """A score a flag records, as shown (`-` when it has none)."""
    return format(x, ".4g") if isinstance(x, int | float) else "-"


def _faults(console: Console, g: Grade) -> None:
    """The parts scored 0 because grading them failed on the agent's work (SPEC `faults`)."""
    if g.faults:
        console.print(Panel(_text("\n".join(f"{f.part}: {f.reason}" for f in g.faults)),
                            title="grading faults (scored 0: grading failed on the agent's work)"))


def _num(x: float | None, spec: str = "g") -> str:
    """A number of the grade as shown, `-` where grading gave none (a fault)."""
    return "-" if x is None else format(x, spec)
