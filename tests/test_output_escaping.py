"""Names from task files, imports and stores shown by the terminal tables, the exit-2 error
messages, the Markdown report and the HTML report: every control, bidi and other invisible
character escaped (`assay.record.escape_controls`), markup escaped in Markdown, while
ordinary names and Unicode letters print as they are."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import typer
from markupsafe import Markup
from rich.console import Console

from assay.cli import term
from assay.errors import InputError, InvalidTasks
from assay.record import escape_page_text
from assay.report.build import build_report
from assay.report.model import summary_model
from tests.test_report_blocks import run

CLEAR = "\x1b[2J"
OSC_TITLE = "\x1b]0;pwned\x1b\\"
RLO = "\u202e"
RAW = ("\x1b", RLO, "\x07")
AGENT = f"x{CLEAR}{OSC_TITLE}<img src=x onerror=alert(1)>{RLO}gnp.exe"
TASK = f"t{CLEAR}<script>alert(2)</script>/v1"
HONEST = "modèle-中文"


def _raw(text: str) -> list[str]:
    return [c for c in RAW if c in text]


def _printed(*renderables: Any) -> str:
    buf = io.StringIO()
    con = Console(file=buf, width=400, color_system=None, force_terminal=False)
    for r in renderables:
        con.print(r)
    return buf.getvalue()


def _report() -> dict[str, Any]:
    """A rubric block and a scenario family for a hostile and an honest agent, on a hostile task."""
    runs = [run(agent, task, 0.8, cost=0.01) for agent in (AGENT, HONEST) for task in (TASK, "plain")]
    runs += [run(agent, TASK, 0, scenario=(0.5, 0.1), cost=0.02) for agent in (AGENT, HONEST)]
    return build_report(f"c{CLEAR}", runs)


# --------------------------------------------------------------------------- terminal tables


def test_tasks_table_escapes_a_hostile_id_and_domain_and_keeps_letters() -> None:
    from assay.report.table import tasks_table

    row = {"kinds": ["contract"], "language": "zh", "levels": [], "modality": "text",
           "execution": "multi-step-with-tools", "value": None}
    out = _printed(tasks_table([{**row, "id": f"t{CLEAR}{OSC_TITLE}{RLO}1", "domain": f"d{CLEAR}"},
                                {**row, "id": HONEST, "domain": "médecine"}]))
    assert not _raw(out), out
    assert "t\\x1b[2J\\x1b]0;pwned\\x1b\\\\u202e1" in out and "d\\x1b[2J" in out
    assert HONEST in out and "médecine" in out


def test_report_tables_escape_agent_task_and_family_names() -> None:
    from assay.report.table import kind_tables, leaderboard, runs_table

    rep = _report()
    out = _printed(leaderboard(summary_model(rep)), *kind_tables(summary_model(rep)), runs_table(rep))
    assert not _raw(out), [line for line in out.splitlines() if _raw(line)]
    assert "gnp.exe" in out and "\\u202egnp.exe" in out and "c\\x1b[2J" in out
    assert "<img src=x onerror=alert(1)>" in out  # the terminal renders no HTML: shown as it is
    assert HONEST in out


def test_runs_table_is_not_read_as_rich_markup() -> None:
    from assay.report.table import runs_table

    rep = build_report("c", [run("[bold red]agent[/]", "[link=http://x]t[/link]", 0.5)])
    out = _printed(runs_table(rep))
    assert "[bold red]agent[/]" in out and "[link=http://x]t[/link]" in out


# --------------------------------------------------------------------------- error messages


def test_fail_escapes_a_hostile_field_and_file_and_keeps_the_reasons_lines(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(typer.Exit) as e:
        term.fail(InputError(f"task{CLEAR}.yaml", f"bad\n{OSC_TITLE}{CLEAR}", f"unknown field{RLO}\nsee docs"))
    assert e.value.exit_code == 2
    err = capsys.readouterr().err
    assert not _raw(err), err
    # The file and field stay on their line (a newline in a name is escaped); the reason's lines are kept.
    assert err == ("error: task\\x1b[2J.yaml: field 'bad\\n\\x1b]0;pwned\\x1b\\\\x1b[2J': "
                   "unknown field\\u202e\nsee docs\n")


def test_fail_escapes_every_file_of_invalid_tasks(capsys: pytest.CaptureFixture[str]) -> None:
    errors = [InputError("a.yaml", f"x{CLEAR}", "bad"), InputError(f"b{RLO}.yaml", None, f"bad{OSC_TITLE}")]
    with pytest.raises(typer.Exit):
        term.fail(InvalidTasks(errors))
    err = capsys.readouterr().err
    assert not _raw(err), err
    assert err.splitlines() == ["error: 2 task files are invalid:", "  a.yaml: field 'x\\x1b[2J': bad",
                                "  b\\u202e.yaml: bad\\x1b]0;pwned\\x1b\\"]


def test_an_honest_error_prints_as_it_is(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(typer.Exit):
        term.fail(InputError("tâches/t.yaml", "domaine", "agent 'a' has no runs (agents there: b, 中文)"))
    assert capsys.readouterr().err == "error: tâches/t.yaml: field 'domaine': agent 'a' has no runs (agents there: b, 中文)\n"


def test_invalid_rows_and_skips_are_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    term.print_invalid([{"file": f"f{CLEAR}.yaml", "line": 3, "field": f"k{OSC_TITLE}", "reason": f"r{RLO}"}])
    term.print_skips([(f"t{CLEAR}", f"agent{RLO}", f"task t{CLEAR} needs a judge")])
    err = capsys.readouterr().err
    assert not _raw(err), err
    assert "skipped (invalid): f\\x1b[2J.yaml:3: field 'k\\x1b]0;pwned\\x1b\\': r\\u202e" in err
    assert "skip agent\\u202e on 1 task(s) (needs a judge): t\\x1b[2J" in err


# --------------------------------------------------------------------------- Markdown


def test_markdown_cells_escape_markup_pipes_and_controls(tmp_path: Path) -> None:
    from assay.report.export import _md_cell, write_markdown

    assert _md_cell("<b>a</b> & b | c") == "&lt;b&gt;a&lt;/b&gt; &amp; b \\| c"
    assert _md_cell(f"n{RLO}\n") == "n\\u202e\\n"
    assert _md_cell(HONEST) == HONEST and _md_cell("a_b *c*") == "a_b *c*"
    write_markdown(_report(), tmp_path / "r.md")
    md = (tmp_path / "r.md").read_text()
    assert "<img" not in md and "<script" not in md and not _raw(md)
    assert "&lt;img src=x onerror=alert(1)&gt;\\u202egnp.exe" in md and "&lt;script&gt;" in md
    assert md.startswith("# assay report · campaign c\\x1b[2J\n") and f"| {HONEST} |" in md


# --------------------------------------------------------------------------- HTML


def test_html_report_escapes_controls_and_bidi_in_tables_plots_and_runs() -> None:
    from assay.report.html import render_html

    page = render_html(_report())
    assert not _raw(page), [line[:200] for line in page.splitlines() if _raw(line)]
    assert "<img src=x" not in page and "<script>alert" not in page
    board = page.split('<table id="leaderboard">')[1].split("</table>")[0]
    assert "&lt;img src=x onerror=alert(1)&gt;\\u202egnp.exe</td>" in board and f"<td>{HONEST}</td>" in board
    bars = page.split('<svg class="plot bars"')[1].split("</svg>")[0]
    assert "\\u202egnp.exe</title>" in bars and f"<title>{HONEST}: " in bars
    assert "<title>c\\x1b[2J" not in page and "assay report · c\\x1b[2J</title>" in page


def test_plot_labels_are_cut_after_their_controls_are_escaped() -> None:
    from assay.report.html import _label

    label = _label(0, 0, f"{RLO}abcdefghijklmnopq")
    assert RLO not in label and "<title>\\u202eabcdefghijklmnopq</title>\\u202eabcdefg…</text>" in label


def test_page_text_is_escaped_and_markup_left_as_it_is() -> None:
    assert escape_page_text(f"a{RLO}\nb\tc") == "a\\u202e\nb\tc"
    assert escape_page_text(HONEST) == HONEST
    markup = Markup(f"<svg>{RLO}</svg>")
    assert escape_page_text(markup) is markup and escape_page_text(3) == 3
