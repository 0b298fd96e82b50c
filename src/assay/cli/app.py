"""The `assay` command group, its options (`--version`) and the options several commands share."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from assay.version import __version__

if TYPE_CHECKING:

    pass


CreateOpt = Annotated[bool, typer.Option("--create", help="make a SQLite store's folder if it does not exist (the default .assay folder is always made)")]


app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="assay: measure what language agents are worth on real professional work.")


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"assay {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="print the version and exit")] = False,
) -> None:
    """assay: measure what language agents are worth on real professional work."""
