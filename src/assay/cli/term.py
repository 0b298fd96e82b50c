"""The terminal a command writes to and the helpers every command shares: the consoles, an input
error as exit 2, the invalid and skipped task lists, a `--json` file written whole, the stores a
command opened (closed when it ends)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Console

from assay.errors import InputError, InvalidTasks

if TYPE_CHECKING:
    from collections.abc import Callable

    from assay.store import Store


def console(stderr: bool = False) -> Console:
    """Piped output (CI logs, files) is not cut to 80 columns: ids and names stay whole. The
    width is read when a command starts (main): a terminal's, COLUMNS, else 200."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() or os.environ.get("COLUMNS") else 200)


out = console()


err = console(stderr=True)


closing: list[Callable[[], None]] = []  # what closes the stores this command opened; main calls them at its end


def escape_controls(text: str, *, keep_lines: bool = False) -> str:
    """`assay.record.escape_controls`, imported when first needed (not when a command starts:
    `assay.record` loads pydantic)."""
    from assay.record import escape_controls as escape

    return escape(text, keep_lines=keep_lines)


def shown(text: str) -> str:
    """`text` (a message naming a file, a field, a task or an agent) as the terminal may show
    it: its controls escaped, its lines kept (`record.escape_controls`), so a name read from
    a file or a store cannot clear the screen, set the window title or reverse what follows."""
    return escape_controls(text, keep_lines=True)


def error_text(e: InputError) -> str:
    """`e.message` as the terminal may show it: the file and field names whole on one line
    (every control escaped, a newline too), the reason with its lines kept (`shown`)."""
    def one(x: InputError) -> InputError:
        return InputError(None if x.file is None else escape_controls(x.file),
                          None if x.field is None else escape_controls(x.field),
                          escape_controls(x.reason, keep_lines=True), x.line, x.column)

    if isinstance(e, InvalidTasks):
        return shown(InvalidTasks([one(x) for x in e.errors]).message)
    return shown(one(e).message)


def say(line: str) -> None:
    """One line to stderr (a note, a warning, a skip), escaped as `shown`."""
    sys.stderr.write(shown(line) + "\n")


def fail(e: InputError) -> NoReturn:
    sys.stderr.write(f"error: {error_text(e)}\n")
    raise typer.Exit(2)


def print_invalid(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        where = escape_controls(str(r["file"] or "<input>")) + (f":{r['line']}" if r.get("line") else "")
        field = f": field '{escape_controls(str(r['field']))}'" if r.get("field") else ""
        sys.stderr.write(f"skipped (invalid): {where}{field}: {shown(str(r['reason']))}\n")


def print_skips(skipped: list[tuple[str, str, str]]) -> None:
    """One line per (agent, reason) rather than one per task: a suite can be large."""
    groups: dict[tuple[str, str], list[str]] = {}
    for task_id, agent_spec, reason in skipped:
        generic = reason.replace(task_id, "TASK")
        groups.setdefault((agent_spec, generic), []).append(task_id)
    for (agent_spec, generic), ids in groups.items():
        shown_ids = ", ".join(escape_controls(i) for i in ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
        sys.stderr.write(f"skip {escape_controls(agent_spec)} on {len(ids)} task(s) "
                         f"({escape_controls(generic.replace('task TASK ', ''))}): {shown_ids}\n")


def write_json(path: Path, data: Any) -> None:
    """A `--json` file: strict JSON (no NaN or Infinity: `dumps_finite` names the field instead)."""
    from assay.report.export import dumps_finite

    text = dumps_finite(data, path, indent=2)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def existing_store(store: str | None) -> tuple[str, Store, list[str]]:
    """(url, the store, its campaigns) for a command that reads results; exit 2 when there is none."""
    from assay.config import load_config, store_url

    try:
        url = store_url(store, load_config())
        st = open_existing(url)
    except InputError as e:
        fail(e)
    return url, st, st.campaigns()


def open_existing(url: str) -> Store:
    """The store at `url`; a SQLite file that does not exist yet is refused, not created."""
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        if not path.exists():
            raise InputError(path, None, "no store here yet (run `assay run` first, or pass --store)")
    return command_store(url)


def command_store(url: str, *, create: bool = False) -> Store:
    """The store at `url`, closed when the command ends however it ends (main): its connections
    (and a SQLite store's -wal and -shm files) do not outlive the command, in whatever process
    runs it."""
    from assay.store import Store

    st = Store(url, create=create)
    closing.append(st.close)
    return st
