"""The command line: parses, calls the library, prints. No logic lives here.

One module per group of commands (`running`, `tasks`, `reporting`, `runs`, `serving`,
`interop`, `local`), each registering its commands on the one `app` (`assay.cli.app`), in
the order `assay --help` lists them; `term` holds what they share."""

from __future__ import annotations

import os
import sys
import tempfile
import time
import traceback

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
        sys.stderr.write(f"error: {term.error_text(e)}\n")
        sys.exit(2)
    except Exception as e:  # a fault of assay's own: no traceback on the terminal (SPEC), the details kept in a file
        sys.stderr.write(f"error: assay failed on a fault of its own ({type(e).__name__}: {term.shown(str(e)[:300])}); "
                         f"every finished run is kept; the details are in {_crash_log()}\n")
        sys.exit(1)
    finally:
        while term.closing:
            term.closing.pop()()


def _crash_log() -> str:
    """Write the exception being handled, with its traceback, to a new file only this user can
    read (in the temp folder); its path."""
    fd, path = tempfile.mkstemp(prefix=f"assay-crash-{time.strftime('%Y%m%d-%H%M%S')}-", suffix=".log")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(f"assay {' '.join(sys.argv[1:])}\n\n{traceback.format_exc()}")
    return path
