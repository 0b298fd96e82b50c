"""`assay export` and `assay import`: tasks in another framework's format, its results as runs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from assay.defaults import DEFAULTS
from assay.errors import InputError

if TYPE_CHECKING:
    from collections.abc import Callable

    from assay.interop.runs import Imported
from assay.cli import term
from assay.cli.app import CreateOpt, app
from assay.cli.term import command_store, fail, say

export_app = typer.Typer(no_args_is_help=True, help="Write assay tasks in another framework's format.")


import_app = typer.Typer(no_args_is_help=True, help="Store another framework's results as runs.")


app.add_typer(export_app, name="export")


app.add_typer(import_app, name="import")


@export_app.command("inspect")
def export_inspect(
    paths: Annotated[list[Path], typer.Argument(help="task files or folders (searched recursively)")],
    out_dir: Annotated[Path, typer.Option("--out", help="folder to write tasks.py, samples.json and manifest.json into")],
) -> None:
    """Assay tasks as an Inspect AI task file whose scorer is assay's grader (docs/interop-inspect.md)."""
    from assay.interop.export import export_inspect as do_export

    try:
        result = do_export(paths, out_dir)
    except InputError as e:
        fail(e)
    m = result.manifest
    for row in m.not_exported:
        say(f"not exported: {row.id}: {row.reason}")
    term.out.print(f"wrote {out_dir / m.task_file}: {len(m.exported)} task(s) as Inspect samples, "
              f"{len(m.not_exported)} not exportable (listed in {out_dir / 'manifest.json'})")
    term.out.print(f"run it: inspect eval {out_dir / m.task_file} --model MODEL; then: assay import inspect LOG")


def _import(convert: Callable[[list[Path], str], list[Imported]], files: list[Path], campaign: str,
            store: str | None, create: bool) -> None:
    """Read and convert every file (a bad one: exit 2, nothing written), then store the new runs."""
    from assay.config import load_config, store_url
    from assay.interop.runs import bounded_runs, store_imported

    try:
        url = store_url(store, load_config())
        if not campaign.strip():
            raise InputError(None, "--campaign", "empty campaign name")
        converted = bounded_runs(convert(files, campaign), files)  # refused before the store is opened
        result = store_imported(converted, command_store(url, create=create), campaign, files)
    except InputError as e:
        fail(e)
    term.out.print(f"{result.added} run(s) stored in campaign {campaign!r} ({result.void} void), "
              f"{result.already} already there, from {result.samples} run(s) read in {len(files)} file(s); "
              f"store {url}")


@import_app.command("inspect")
def import_inspect(
    logs: Annotated[list[Path], typer.Argument(help="Inspect log files (.eval or .json)")],
    campaign: Annotated[str, typer.Option(help="campaign to store the runs in")] = DEFAULTS.campaign,
    store: Annotated[str | None, typer.Option(help="store URL (default sqlite:///.assay/assay.db, or ASSAY_STORE)")] = None,
    create: CreateOpt = False,
) -> None:
    """Inspect AI logs as runs (one per sample and epoch; agent inspect:MODEL), so assay reports cover them."""
    from assay.interop.inspect_import import convert_logs

    _import(convert_logs, logs, campaign, store, create)


@import_app.command("omb")
def import_omb(
    files: Annotated[list[Path], typer.Argument(help="OneMillion-Bench task JSON files holding graded responses")],
    campaign: Annotated[str, typer.Option(help="campaign to store the runs in")] = "omb",
    store: Annotated[str | None, typer.Option(help="store URL")] = None,
    create: CreateOpt = False,
) -> None:
    """OneMillion-Bench grading results (model_response, rubric_auto_score) as runs of agent omb:MODEL."""
    from assay.interop.upstream import convert_omb

    _import(convert_omb, files, campaign, store, create)


@import_app.command("darebench")
def import_darebench(
    files: Annotated[list[Path], typer.Argument(help="DareBench results/*.json files")],
    campaign: Annotated[str, typer.Option(help="campaign to store the runs in")] = "darebench",
    store: Annotated[str | None, typer.Option(help="store URL")] = None,
    create: CreateOpt = False,
) -> None:
    """DareBench results files as runs of agent darebench:MODEL (one per task and grading run)."""
    from assay.interop.upstream import convert_darebench

    _import(convert_darebench, files, campaign, store, create)


@import_app.command("fdegym")
def import_fdegym(
    runs: Annotated[list[Path], typer.Argument(help="FDE-Gym run folders (result.json or void.json), or the runs "
                                                    "folder (FDEGYM_RUNS) holding them")],
    cases: Annotated[Path | None, typer.Option(help="folder holding the FDE-Gym case folders: each run's task is "
                                                    "read from its case, with the task id and hash of `assay run`")] = None,
    campaign: Annotated[str, typer.Option(help="campaign to store the runs in")] = "fdegym",
    store: Annotated[str | None, typer.Option(help="store URL")] = None,
    create: CreateOpt = False,
) -> None:
    """FDE-Gym harness runs (bench.py run) as runs of agent fdegym:SLUG on ENGAGEMENT/VARIANT at the run's level."""
    from functools import partial

    from assay.interop.fdegym import convert_fdegym

    _import(partial(convert_fdegym, cases=cases), runs, campaign, store, create)
