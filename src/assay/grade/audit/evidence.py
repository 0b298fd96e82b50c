"""The evidence an audit reads of a run: the trace and the workspace's files, within `MAX_FILES`,
`READ_BYTES` and an entry ceiling (in a grading worker: `assay.grade.audit.offload`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assay.config import COPY_MAX_FILES
from assay.fs.paths import PathError
from assay.fs.reads import read_tree, read_workspace_head
from assay.grade.audit.claims import file_claims, norm_path
from assay.record import (
    Event,
    HarnessEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from assay.task.model import Task

READ_BYTES = 256 * 1024


MAX_FILES = 500


@dataclass
class Evidence:
    """What the run actually did and left behind."""

    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {id, name, arguments, output}
    commands: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)  # paths given to write_file/edit_file (or copied)
    files: set[str] = field(default_factory=set)  # every regular file in the workspace (rel paths)
    outputs: dict[str, str] = field(default_factory=dict)  # artifacts: rel path -> text (bounded)
    final: str = ""
    capped: list[str] = field(default_factory=list)  # the ceilings the walk of the workspace reached

    @property
    def answer_text(self) -> str:
        return "\n".join([self.final, *self.outputs.values()])


def text_of(data: bytes) -> str | None:
    """Text of a file's first READ_BYTES; None when it looks binary."""
    data = data[:READ_BYTES]
    if b"\x00" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")


def _initial_files(task: Task) -> dict[str, Path | str]:
    """rel path -> where its initial content comes from (a source file or literal text)."""
    out: dict[str, Path | str] = {}
    for wf in task.workspace:
        base = "" if wf.path in (".", "") else wf.path.strip("/")
        if wf.source is not None:
            src = Path(wf.source)
            if src.is_dir():
                for p in src.rglob("*"):
                    if p.is_file() and not p.is_symlink():
                        rel = p.relative_to(src).as_posix()
                        out[f"{base}/{rel}" if base else rel] = p
            else:
                out[base] = src
        else:
            out[base] = wf.content or ""
    return out


def _unchanged(rel: str, text: str, initial: dict[str, Path | str]) -> bool:
    src = initial.get(rel)
    if src is None:
        return False
    if isinstance(src, str):
        return text == src
    try:
        return text == src.read_bytes()[:READ_BYTES].decode("utf-8", errors="replace")
    except OSError:
        return False


def collect_evidence(task: Task, workspace: Path | None, events: list[Event], final_message: str,
                     commands: list[str] | None = None, *, max_entries: int = COPY_MAX_FILES) -> Evidence:
    """What the run did (its tool calls and commands) and left (the workspace's files, read
    within limits: `MAX_FILES` files of `READ_BYTES` each, `max_entries` entries looked at).
    When the walk of the workspace reaches a ceiling, `Evidence.capped` says which, and the
    files the rules ask about by name (the contract's, the answer's, those the file tools wrote,
    those the final message claims) are looked up one by one. Reads the agent's files: run it
    in a worker process (`audit_run` does), never on the event loop."""
    ev = _trace_evidence(events, final_message, commands or [])
    if workspace is None or not workspace.is_dir():
        return ev
    initial = _initial_files(task)
    wanted = {norm_path(p.path) for p in task.contract} | set(ev.written)
    if task.answer_path:
        wanted.add(norm_path(task.answer_path))
    # Read without following a link or opening a special file (the workspace is the agent's).
    for rel, data in read_tree(workspace, ".", max_file_bytes=READ_BYTES, max_files=MAX_FILES, partial=True,
                               skip=_skip_dir, max_entries=max_entries, capped=ev.capped):
        _add_file(ev, rel, data, rel in wanted, initial)
    if ev.capped:
        for rel in sorted(wanted | set(file_claims(ev.final)))[:MAX_FILES]:
            if rel and rel not in ev.files and (found := _look_up(workspace, rel)) is not None:
                _add_file(ev, rel, found, True, initial)
    return ev


def _trace_evidence(events: list[Event], final_message: str, commands: list[str]) -> Evidence:
    """The evidence of the trace: tool calls with their output, commands, files written."""
    ev = Evidence(final=final_message or "")
    by_id: dict[str, dict[str, Any]] = {}
    for e in events:
        if isinstance(e, ToolCallEvent):
            call = {"id": e.id, "name": e.name, "arguments": e.arguments, "output": ""}
            ev.tool_calls.append(call)
            by_id[e.id] = call
            if e.name == "run_command" and isinstance(e.arguments.get("command"), str):
                ev.commands.append(e.arguments["command"])
            if e.name in ("write_file", "edit_file") and isinstance(e.arguments.get("path"), str):
                ev.written.append(norm_path(e.arguments["path"]))
        elif isinstance(e, ToolResultEvent):
            tool = by_id.get(e.id)
            if tool is not None:
                tool["output"] = e.output
        elif isinstance(e, HarnessEvent) and e.files:  # a policy's copied artifacts
            ev.written += [norm_path(f) for f in e.files]
    for c in commands:
        if c not in ev.commands:
            ev.commands.append(c)
    return ev


def _add_file(ev: Evidence, rel: str, data: bytes, wanted: bool, initial: dict[str, Path | str]) -> None:
    ev.files.add(rel)
    text = text_of(data)
    if text is not None and (wanted or not _unchanged(rel, text, initial)):
        ev.outputs[rel] = text


def _look_up(workspace: Path, rel: str) -> bytes | None:
    """The first `READ_BYTES` of the regular file workspace/rel, or None (missing, a link, not
    a regular file)."""
    try:
        return read_workspace_head(workspace, rel, READ_BYTES)
    except PathError:
        return None


def _skip_dir(name: str) -> bool:
    return name.startswith(".") or name in ("node_modules", "__pycache__")
