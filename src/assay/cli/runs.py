"""`assay show` and `assay runs`: stored runs, one or listed."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from assay.errors import InputError

if TYPE_CHECKING:

    pass
from assay.cli import term
from assay.cli.app import app
from assay.cli.term import (
    existing_store,
    fail,
    open_existing,
)


@app.command()
def show(
    run_id: Annotated[str, typer.Argument(help="run id (or a unique prefix of at least 6 characters)")],
    store: Annotated[str | None, typer.Option(help="store URL")] = None,
    json_flag: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """One run: transcript, grade breakdown, audit flags."""
    from assay.config import load_config, store_url
    from assay.report.build import run_row
    from assay.report.show import render_run

    try:
        st = open_existing(store_url(store, load_config()))
    except InputError as e:
        fail(e)
    try:
        rec = st.get_run(run_id)
    except InputError as e:
        fail(e)
    if rec is None:
        from assay.store.reads import MIN_PREFIX

        short = (f" (an id prefix needs at least {MIN_PREFIX} characters; `assay runs` lists the ids)"
                 if len(run_id) < MIN_PREFIX else " (`assay runs` lists the ids)")
        fail(InputError(None, "RUN_ID", f"no run {run_id!r} in the store{short}"))
    events = st.events(rec.run_id)
    if json_flag:
        sys.stdout.write(json.dumps({"run": run_row(rec), "events": [e.wire() for e in events]},
                                    ensure_ascii=False, indent=2, default=str) + "\n")
        return
    render_run(term.out, rec, events)


RUN_STATUSES = ("done", "void", "broken")


@app.command("runs")
def runs_(
    campaign: Annotated[str | None, typer.Option(help="only this campaign (default: every campaign)")] = None,
    agent: Annotated[list[str] | None, typer.Option("--agent", help="only this agent; repeatable")] = None,
    task: Annotated[list[str] | None, typer.Option("--task", help="only this task id; repeatable")] = None,
    status: Annotated[list[str] | None, typer.Option("--status", help="done|void|broken; repeatable")] = None,
    limit: Annotated[int, typer.Option(help="at most this many, newest first (0: all)")] = 50,
    json_flag: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    store: Annotated[str | None, typer.Option(help="store URL")] = None,
) -> None:
    """List stored runs (the current attempt of each run key) with their ids, for `assay show`."""
    from assay.report.table import runs_listing_table
    from assay.store.listing import RunRow, list_runs

    bad = [s for s in status or [] if s not in RUN_STATUSES]
    if bad:
        fail(InputError(None, "--status", f"{bad[0]!r} is not one of {', '.join(RUN_STATUSES)}"))
    if limit < 0:
        fail(InputError(None, "--limit", "must be 0 (all) or more"))
    _, st, campaigns = existing_store(store)
    if campaign is not None and campaign not in campaigns:
        fail(InputError(None, "--campaign", f"no campaign named {campaign!r} in the store"))
    rows = list_runs(st, campaign=campaign, agents=agent or [], tasks=task or [], statuses=status or [],
                     limit=None if limit == 0 else limit + 1)
    more = limit != 0 and len(rows) > limit
    rows = rows[:limit] if more else rows
    if json_flag:
        sys.stdout.write(json.dumps({"runs": [RunRow.model_dump(r) for r in rows], "more": more},
                                    ensure_ascii=False, indent=2) + "\n")
        return
    if not rows:
        sys.stderr.write("no stored run matches\n")
        return
    term.out.print(runs_listing_table(rows, more=more))
