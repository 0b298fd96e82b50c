"""`assay tasks` and `assay validate`: a suite listed, its tasks checked."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from assay.errors import InputError

if TYPE_CHECKING:

    pass
from assay.cli import term
from assay.cli.app import app
from assay.cli.term import (
    fail,
)


@app.command()
def tasks(
    paths: Annotated[list[Path], typer.Argument(help="task files or folders")],
    json_flag: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """List the tasks found under PATHS."""
    from assay.task.discover import discover
    from assay.task.formats.values import apply_found_value_tables

    try:
        found = discover(paths)
        apply_found_value_tables(found, paths)  # OneMillion-Bench values, as `assay run` picks them up
    except InputError as e:
        fail(e)
    rows = [{"id": t.id, "kinds": t.kinds, "domain": t.domain, "language": t.language, "levels": t.levels,
             "modality": t.modality, "execution": t.execution,
             "value": {"amount": t.value.amount, "currency": t.value.currency} if t.value else None,
             "title": t.title, "source": t.source, "hash": t.content_hash} for t in found]
    if json_flag:
        sys.stdout.write(json.dumps({"tasks": rows}, ensure_ascii=False, indent=2) + "\n")
        return
    from assay.report.table import tasks_table

    term.out.print(tasks_table(rows))


@app.command()
def validate(
    paths: Annotated[list[Path], typer.Argument(help="task files or folders")],
    anchors: Annotated[bool, typer.Option("--anchors", help="also run admission anchors (reference must pass, noop must not)")] = False,
    store: Annotated[str | None, typer.Option(help="store URL for anchor runs (default: a temporary one)")] = None,
) -> None:
    """Check every task file; with --anchors, run each task's admission anchors."""
    import asyncio

    from assay.task.discover import discover

    try:
        found = discover(paths)
    except InputError as e:
        fail(e)
    term.out.print(f"[green]ok[/]: {len(found)} tasks valid")
    if not anchors:
        return
    from assay.campaign.anchors import anchors_table, run_anchors

    try:
        verdicts = asyncio.run(run_anchors(found, store_url=store, console=term.err))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    term.out.print(anchors_table(verdicts))
    if any(not v.ok for v in verdicts):
        raise typer.Exit(1)
