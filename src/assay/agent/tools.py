"""The agent's tools: one registry (`Tool`: a spec and its implementation) the tool box runs.

The built-ins are five workspace tools, plus search where a task offers it; a third-party
package adds a tool through the `assay.tools` entry point group (`assay.plugins`,
docs/extending.md), and a task that names it in `tools:` is offered it. A task is offered
exactly the tools it names (the formats' defaults are the five built-ins,
`assay.task.model.TOOL_NAMES`), and its content hash covers those names only, so a new tool
changes no existing task's hash.

File tools (`assay.agent.file_tools`) run in the harness on the workspace through `assay.fs`,
which refuses absolute paths, '..' and symlinks that lead out; `run_command` runs in the sandbox.

Before any tool runs, its arguments are checked (`ToolBox.run`): at most MAX_ARGUMENT_BYTES
of text in all (a 1 GB `content` is refused before anything is encoded or written), nested
at most MAX_ARGUMENT_DEPTH levels, no non-finite number anywhere (NaN, Infinity, an
overflowing 1e999); then against the tool's declared JSON schema (`argument_errors`, by
jsonschema: types without coercion, so `["a"]` is no path and `true` no number; required
arguments; extra ones only where the schema allows them, as the built-in ones do); then each
path and cwd as the OS would take it (no NUL, not longer than PATH_MAX, no name over
NAME_MAX: `assay.fs.paths.check_relative`) and a command as one argument of the OS can be. A bad
argument is a tool error the agent reads, never an exception out of the tool box, so the
run goes on (SPEC "Levels, scores and passing"). The file tools act with the run's
uid (`assay.fs.fsuid.acting_as`) and limits: a file they write or edit is at most
`FILE_TOOL_MAX_BYTES` (and never over the sandbox's file-size limit), and the workspace's
disk quota holds for them as for commands.
"""

from __future__ import annotations

import asyncio
import base64
import errno
import functools
import inspect
import json
import math
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from assay.agent.file_tools import (
    FILE_TOOL_MAX_BYTES,
    IMAGE_MAX_BYTES,
    edit_file,
    list_files,
    read_file,
    read_image,
)
from assay.env.sandbox import Sandbox
from assay.errors import InputError
from assay.fs.fsuid import acting_as
from assay.fs.paths import PathError, check_relative
from assay.fs.writes import write_file
from assay.llm.messages import ImagePart, ToolCall, ToolSpec
from assay.plugins import Registry
from assay.record import escape_controls, safe_text

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

TOOL_OUTPUT_LIMIT = 12_000
DEFAULT_TIMEOUT_S = 300
MAX_TIMEOUT_S = 1800
MAX_ARGUMENT_BYTES = 8 * 1024**2
"""Most text (UTF-8 bytes, all string arguments together) one tool call may carry: 8 MiB."""
MAX_ARGUMENT_DEPTH = 32
"""Deepest nesting of lists and objects in one tool call's arguments (no tool takes any)."""
MAX_COMMAND_BYTES = 120 * 1024
"""Longest `run_command` command, in UTF-8 bytes: it is one argument of `bash -c`, and Linux
refuses an argument over 128 KiB (E2BIG); the rest is room for the service wrapper."""
PATH_ARGUMENTS = ("path", "cwd")
"""Arguments that name a workspace path: checked as the OS would take them before a tool runs."""


class SearchBackend(Protocol):
    """A `web_search` tool the harness runs (`assay.agent.search`, `assay.agent.brave`); its
    `label` is recorded on the run. `search` blocks, so it is called in a worker thread."""

    label: str

    def search(self, query: str, k: int = 5) -> str: ...


TOOL_SPECS: dict[str, ToolSpec] = {
    "run_command": ToolSpec(
        name="run_command",
        description="Run a shell command in the workspace (no network). Returns exit code and output.",
        parameters={"type": "object", "properties": {
            "command": {"type": "string", "description": "shell command"},
            "cwd": {"type": "string", "description": "working directory relative to the workspace root"},
            "timeout_s": {"type": "number", "description": f"seconds (default {DEFAULT_TIMEOUT_S}, max {MAX_TIMEOUT_S})"},
        }, "required": ["command"]},
    ),
    "read_file": ToolSpec(
        name="read_file",
        description="Read a text file from the workspace, with line numbers; an image (PNG, JPEG, GIF, WebP) "
                    "is returned as the image.",
        parameters={"type": "object", "properties": {
            "path": {"type": "string"},
            "offset": {"type": "integer", "description": "first line (0-based)"},
            "limit": {"type": "integer", "description": "number of lines (default 400)"},
        }, "required": ["path"]},
    ),
    "write_file": ToolSpec(
        name="write_file",
        description="Create or overwrite a file in the workspace.",
        parameters={"type": "object", "properties": {
            "path": {"type": "string"}, "content": {"type": "string"},
        }, "required": ["path", "content"]},
    ),
    "edit_file": ToolSpec(
        name="edit_file",
        description="Replace old_text with new_text in a workspace file (old_text must be unique unless replace_all).",
        parameters={"type": "object", "properties": {
            "path": {"type": "string"}, "old_text": {"type": "string"}, "new_text": {"type": "string"},
            "replace_all": {"type": "boolean"},
        }, "required": ["path", "old_text", "new_text"]},
    ),
    "list_files": ToolSpec(
        name="list_files",
        description="List files in the workspace (recursively).",
        parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": []},
    ),
    "web_search": ToolSpec(
        name="web_search",
        description="Search the web (or the task's document collection) and return ranked results.",
        parameters={"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    ),
}


def check_arguments(value: Any, where: str = "arguments") -> int:
    """Refuse (ValueError) non-finite numbers anywhere in `value`, more than MAX_ARGUMENT_BYTES
    of text in all and nesting deeper than MAX_ARGUMENT_DEPTH (so no later step, the schema
    check's messages included, recurses far); the text's size in bytes."""
    total = 0
    stack: list[tuple[str, Any, int]] = [(where, value, 0)]
    while stack:
        name, v, level = stack.pop()
        if level > MAX_ARGUMENT_DEPTH:
            raise ValueError(f"tool arguments refused: nested deeper than {MAX_ARGUMENT_DEPTH} levels")
        if isinstance(v, str):
            total += len(v) if v.isascii() else len(v.encode("utf-8", "surrogatepass"))
            if total > MAX_ARGUMENT_BYTES:
                raise ValueError(f"tool arguments refused: more than {MAX_ARGUMENT_BYTES} bytes of text "
                                 f"(the limit of one tool call); write large files with a command")
        elif isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"{name} refused: {v!r} is not a finite number")
        elif isinstance(v, dict):
            stack.extend((f"{k}", x, level + 1) for k, x in v.items())
            total += sum(len(str(k)) for k in v)
        elif isinstance(v, (list, tuple)):
            stack.extend((f"{name}[{i}]", x, level + 1) for i, x in enumerate(v))
    return total


@functools.cache
def _validator(tool: str) -> Validator:
    """The JSON-schema validator of a tool's declared arguments (jsonschema, imported on first use)."""
    from jsonschema.validators import validator_for

    schema = tool_spec(tool).parameters
    cls = validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


_JSON_NAMES = ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"),
               (list, "an array"), (dict, "an object"), (type(None), "null"))


_SCHEMA_NAMES = {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "a boolean",
                 "array": "an array", "object": "an object", "null": "null"}


def _json_kind(value: Any) -> str:
    """`value`'s JSON type with its article ("a string", "an array", ...), and a number or a
    boolean itself as JSON writes it (`a number (1.5)`, `a boolean (true)`)."""
    kind = next((n for t, n in _JSON_NAMES if isinstance(value, t)), type(value).__name__)
    if isinstance(value, bool | int | float):
        shown = json.dumps(value)
        return f"{kind} ({shown if len(shown) <= 40 else shown[:37] + '...'})"
    return kind


def _argument_error(e: Any, schema: dict[str, Any]) -> list[str]:
    """What a jsonschema ValidationError says, in words naming the argument (never the value:
    it may be megabytes)."""
    where = ".".join(str(p) for p in e.path) or "arguments"
    if e.validator == "type":
        want = e.validator_value if isinstance(e.validator_value, list) else [e.validator_value]
        names = " or ".join(_SCHEMA_NAMES.get(str(w), str(w)) for w in want)
        return [f"argument {where!r} must be {names}, not {_json_kind(e.instance)}"]
    if e.validator == "required" and isinstance(e.instance, dict):
        return [f"missing required argument {name!r}" for name in e.validator_value if name not in e.instance]
    if e.validator == "additionalProperties" and isinstance(e.instance, dict):
        known = set(schema.get("properties", {}))
        extra = ", ".join(repr(k)[:60] for k in e.instance if k not in known)
        return [f"unknown argument(s) {extra}; this tool takes {', '.join(sorted(known)) or 'none'}"]
    return [f"argument {where!r}: {clip(str(e.message), 300)}"]


def argument_errors(tool: str, args: dict[str, Any]) -> list[str]:
    """Why `args` do not fit the tool's declared JSON schema (empty: they do), checked by
    jsonschema: types as JSON has them, no coercion (`"5"` is no number, `true` is neither an
    integer nor a number), required arguments, and whatever else the schema says."""
    schema = tool_spec(tool).parameters
    found: list[str] = []
    for e in sorted(_validator(tool).iter_errors(args), key=lambda e: [str(p) for p in e.path]):
        found.extend(m for m in _argument_error(e, schema) if m not in found)
    return found


def _present(tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """`args` without the optional ones given as null: a model asked for strict arguments
    (OpenAI's strict mode) sends null for an optional argument it leaves out."""
    required = set(tool_spec(tool).parameters.get("required", ()))
    return {k: v for k, v in args.items() if v is not None or k in required}


def _check_values(tool: str, args: dict[str, Any]) -> None:
    """Refuse (ValueError, PathError) values of the right type the OS could not take: a path
    or cwd with a NUL or too long (`assay.fs.paths.check_relative`), a command with a NUL or too
    long for one argument (MAX_COMMAND_BYTES)."""
    for name in PATH_ARGUMENTS:
        value = args.get(name)
        if isinstance(value, str) and value not in ("", "."):
            try:
                check_relative(value)
            except PathError as e:
                raise PathError(f"argument {name!r}: {e}") from None
    command = args.get("command") if tool == "run_command" else None
    if isinstance(command, str):
        if "\x00" in command:
            raise ValueError("command refused: it contains a NUL character, which no shell command can hold")
        size = len(command) if command.isascii() else len(command.encode("utf-8", "surrogatepass"))
        if size > MAX_COMMAND_BYTES:
            raise ValueError(f"command refused: {size} bytes is over the {MAX_COMMAND_BYTES} one command may have "
                             "(the OS's limit of one argument); write a script with write_file and run that")


def _timeout(raw: Any) -> float:
    """timeout_s as given (a positive, finite number of seconds), capped at MAX_TIMEOUT_S."""
    if raw is None or raw == "":
        return DEFAULT_TIMEOUT_S
    if isinstance(raw, bool):
        raise ValueError(f"timeout_s refused: {raw!r} is not a number of seconds")
    if isinstance(raw, int) and raw > MAX_TIMEOUT_S:
        return MAX_TIMEOUT_S  # also an integer too large for a float
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ValueError(f"timeout_s refused: {raw!r} is not a number of seconds") from None
    except OverflowError:  # -(2**1024): an integer no float holds
        raise ValueError("timeout_s refused: it must be a positive, finite number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"timeout_s refused: {raw!r} must be a positive, finite number of seconds")
    return min(value, MAX_TIMEOUT_S)


def clip(text: str, limit: int = TOOL_OUTPUT_LIMIT) -> str:
    """Keep the head and the tail of a long output, saying how much was cut."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head - 60
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... {cut} characters cut ...]\n{text[-tail:]}"


@dataclass
class ToolOutput:
    """A tool's result as the model gets it: text, and the images `read_file` attached."""

    text: str
    images: list[ImagePart] = field(default_factory=list)


ToolResult = str | ToolOutput
ToolRun = Callable[[dict[str, Any], "ToolBox"], "ToolResult | Awaitable[ToolResult]"]
"""A tool's implementation: `(arguments, box) -> text or ToolOutput`. The arguments are checked
against the spec's schema before it runs; `box` is the run's ToolBox (`box.workspace`, the
workspace folder or None; `box.sandbox`). A plain function runs in a worker thread (it may
block), a coroutine function on the event loop. A ValueError (or KeyError, TypeError,
`assay.fs.PathError`, a missing file) is an error the agent reads; anything else is a fault of the
tool, which makes the run void (harness_error)."""


@dataclass(frozen=True)
class Tool:
    """An agent tool: what the model is told (`spec`: name, description, JSON schema of the
    arguments) and what runs when it calls it (`run`)."""

    spec: ToolSpec
    run: ToolRun

    @property
    def name(self) -> str:
        return self.spec.name


async def _run_command(a: dict[str, Any], box: ToolBox) -> ToolResult:
    if box.workspace is None:
        return "error: this task has no workspace"
    if box.sandbox is None:
        return "error: commands are not available"
    cmd = str(a["command"])
    timeout = _timeout(a.get("timeout_s"))
    box.commands.append(cmd)
    try:
        r = await box.sandbox.run(cmd, cwd=str(a.get("cwd") or "."), timeout_s=timeout)
    except OSError as e:
        if e.errno != errno.E2BIG:  # anything else is the machine's, not the agent's
            raise
        return "error: command refused: too long for the OS (E2BIG); write a script and run that"
    if r.timed_out:
        head = f"[timed out after {timeout:g} s; the command and its children were killed]"
    else:
        head = f"[exit code {r.exit_code}]"
    if r.output_truncated:
        head += " [output truncated]"
    tail = "".join(f"\n{n}" for n in r.notes)
    return f"{head}\n{r.output}{tail}"


async def _web_search(a: dict[str, Any], box: ToolBox) -> ToolResult:
    if box.search_backend is None:
        return "error: this task offers no search"
    return await asyncio.to_thread(box.search_backend.search, str(a["query"]))


def _file_tool(name: str) -> ToolRun:
    """A file tool: run as the run's uid, off the event loop (a file the agent made huge, or slow
    to read, stalls this run only)."""

    async def run(a: dict[str, Any], box: ToolBox) -> ToolResult:
        ws = box.workspace
        if ws is None:
            return "error: this task has no workspace"
        owner = box.sandbox.uid if box.sandbox is not None else None

        def as_the_run() -> ToolResult:
            with acting_as(owner):  # the run's uid, in this worker thread only (setfsuid is per thread)
                try:
                    return box._file_tool(name, ws, a, owner)
                except OSError as e:  # the file system said no (full, permission, ...): the agent's to handle
                    return f"error: {a.get('path', '.')}: {e.strerror or e}"

        return await asyncio.to_thread(as_the_run)

    return run


BUILTIN_TOOLS: dict[str, Tool] = {
    "run_command": Tool(TOOL_SPECS["run_command"], _run_command),
    **{n: Tool(TOOL_SPECS[n], _file_tool(n)) for n in ("read_file", "write_file", "edit_file", "list_files")},
    "web_search": Tool(TOOL_SPECS["web_search"], _web_search),
}
def _check_schema(tool: Tool) -> None:
    """ValueError for a plugin tool whose parameters are not a JSON schema."""
    try:
        from jsonschema.validators import validator_for

        validator_for(tool.spec.parameters).check_schema(tool.spec.parameters)
    except Exception as e:  # noqa: BLE001 - jsonschema's SchemaError, or whatever a malformed schema raises
        raise ValueError(f"its parameters are not a JSON schema: {e}") from e


TOOLS: Registry[Tool] = Registry("assay.tools", Tool, BUILTIN_TOOLS, check=_check_schema)
"""The one tool registry: the built-ins, then the `assay.tools` plugins as tasks name them."""


def register_tool(tool: Tool) -> None:
    """Register a tool in this process (what an `assay.tools` entry point does when first named)."""
    TOOLS.register(tool)


def tool_names() -> list[str]:
    """Every tool a task may name: the registered ones, then the installed plugins' (unloaded)."""
    return TOOLS.names()


def get_tool(name: str, field: str = "tools") -> Tool | None:
    """The tool `name`, loading its plugin on first use; None when no one provides it (a plugin
    that fails to load or is not a usable Tool is a PluginError, exit 2)."""
    return TOOLS.get(name, field)


def tool_spec(name: str) -> ToolSpec:
    """The spec of a registered tool (KeyError for one not registered)."""
    return TOOLS.items[name].spec


def check_task_tools(tasks: Iterable[Any]) -> None:
    """Load every tool the tasks name (InputError, exit 2, naming the task's file, before any run):
    a task file's names were checked against the installed tools when it was read; this imports
    the plugins and checks what they provide."""
    for task in tasks:
        for i, name in enumerate(task.tools):
            where = task.origin or task.id
            try:
                found = get_tool(name, f"tools[{i}]")
            except InputError as e:
                raise type(e)(where, e.field, e.reason) from e
            if found is None:
                raise InputError(where, f"tools[{i}]", f"unknown tool {name!r} (known: {', '.join(tool_names())})")


class ToolBox:
    """Executes tool calls for one run; every result is text as the model sees it, plus the
    images `read_file` returns to an agent that can see them (`images`)."""

    def __init__(self, workspace: Path | None, sandbox: Sandbox | None, names: list[str],
                 search: SearchBackend | None = None, *, images: bool = False) -> None:
        self.workspace = workspace
        self.sandbox = sandbox
        self.images = images
        self.names = [n for n in names if n != "web_search"]
        if search is not None:
            self.names.append("web_search")
        self.search_backend = search
        self.commands: list[str] = []
        self.tools: dict[str, Tool] = {}
        for name in self.names:
            tool = get_tool(name)
            if tool is None:  # task files are checked when read, and campaigns load their tools up front
                raise ValueError(f"unknown tool {name!r} (known: {', '.join(tool_names())})")
            self.tools[name] = tool

    def specs(self) -> list[ToolSpec]:
        return [self.tools[n].spec for n in self.names]

    async def execute(self, call: ToolCall) -> str:
        return (await self.run(call)).text

    async def run(self, call: ToolCall) -> ToolOutput:
        if call.name not in self.names:
            return ToolOutput(f"error: unknown tool {call.name!r}; available: {', '.join(self.names)}")
        if call.arguments_error:
            return ToolOutput(f"error: arguments are not a JSON object ({call.arguments_error})")
        try:
            check_arguments(call.arguments)
            args = _present(call.name, call.arguments)
            errors = argument_errors(call.name, args)
            if errors:
                return ToolOutput(safe_text("error: " + "; ".join(errors)))
            _check_values(call.name, args)
            out = await self._dispatch(call.name, args)
        except (PathError, ValueError, KeyError, TypeError, UnicodeError, OverflowError, IsADirectoryError,
                FileNotFoundError, NotADirectoryError, PermissionError) as e:
            return ToolOutput(safe_text(clip(f"error: {e}")))
        if isinstance(out, ToolOutput):
            return ToolOutput(safe_text(clip(out.text)), out.images)
        if not isinstance(out, str):
            raise TypeError(f"tool {call.name!r} returned a {type(out).__name__}, not text or a ToolOutput")
        return ToolOutput(safe_text(clip(out)))

    async def _dispatch(self, name: str, a: dict[str, Any]) -> ToolResult:
        run = self.tools[name].run
        if inspect.iscoroutinefunction(run):
            return await run(a, self)
        result = await asyncio.to_thread(run, a, self)
        return await result if inspect.isawaitable(result) else result

    def _file_tool(self, name: str, ws: Path, a: dict[str, Any], owner: int | None) -> str | ToolOutput:
        sb = self.sandbox
        max_bytes = FILE_TOOL_MAX_BYTES if sb is None else min(FILE_TOOL_MAX_BYTES, sb.limits.file_size_bytes)
        room = sb.volume.check_write if sb is not None and sb.volume is not None else None
        if name == "read_file":
            image = read_image(ws, str(a["path"]))
            if image is not None:
                return self._image(str(a["path"]), *image)
            return read_file(ws, str(a["path"]), int(a.get("offset") or 0), int(a.get("limit") or 400))
        if name == "write_file":
            return write_file(ws, str(a["path"]), str(a["content"]), owner=owner, max_bytes=max_bytes, room=room)
        if name == "edit_file":
            return edit_file(ws, str(a["path"]), str(a["old_text"]), str(a["new_text"]),
                             bool(a.get("replace_all", False)), owner=owner, max_bytes=max_bytes, room=room)
        if name == "list_files":
            return list_files(ws, str(a.get("path") or "."), show_name=escape_controls)
        raise ValueError(f"unknown tool {name}")

    def _image(self, rel: str, kind: str, size: int, data: bytes | None) -> str | ToolOutput:
        """An image `read_file` found: attached for a model that sees images, else a note."""
        what = f"{rel} is an image ({kind}, {size} bytes)"
        if not self.images:
            return f"[{what}; this agent's model takes text only, so the image cannot be shown]"
        if data is None:
            return f"[{what}, over the {IMAGE_MAX_BYTES} bytes a model is shown; make a smaller copy to view it]"
        return ToolOutput(f"[{what}: attached below]",
                          [ImagePart(media_type=kind, data_b64=base64.b64encode(data).decode())])
