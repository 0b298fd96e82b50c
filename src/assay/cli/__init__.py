"""The command line: parses, calls the library, prints. No logic lives here.

One module per group of commands (`running`, `tasks`, `reporting`, `runs`, `serving`,
`interop`, `local`), each registering its commands on the one `app` (`assay.cli.app`), in
the order `assay --help` lists them; `term` holds what they share."""

from __future__ import annotations

import sys

# isort: off
# Each module registers its commands on `app` as it is imported: in the order `--help` lists them.
from assay.cli import running, tasks, reporting, runs, serving, interop, local  # noqa: F401
# isort: on
from assay.cli import term
from assay.cli.app import app
from assay.errors import InputError

__all__ = ["app", "main"]


def main() -> None:
    term.out, term.err = term.console(), term.console(stderr=True)  # this command's terminal and COLUMNS
    try:
        app()
    except InputError as e:  # bad input found deep in a command (a store that cannot be opened): exit 2
        sys.stderr.write(f"error: {e.message}\n")
        sys.exit(2)
    finally:
        while term.closing:
            term.closing.pop()()
