"""Finding tasks under the paths a user gives (SPEC.md "Finding tasks").

What a file or folder is, is decided by its content: `task.yaml` (native), `engagement.json`
(FDE-Gym case), a Markdown file with `grading_type` front matter (DareBench), a JSON file
with `rubrics` (OneMillion-Bench), a JSONL file of rubric rows (HealthBench).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from assay.errors import InputError, InvalidTasks
from assay.fs.paths import PathError
from assay.fs.reads import open_regular_at
from assay.task.formats.darebench import read_darebench
from assay.task.formats.fdegym import read_case
from assay.task.formats.healthbench import read_healthbench
from assay.task.formats.jsonio import loads_jsonl_line
from assay.task.formats.native import read_native, read_task_yaml
from assay.task.formats.native_scenario import read_native_scenario
from assay.task.formats.omb import read_omb
from assay.task.formats.yamlio import load_json
from assay.task.model import Task

SKIP_DIRS = {".git", "__pycache__", ".assay", "node_modules", ".venv", "venv"}
SEARCH_DEPTH = 64
"""Folders more than this many levels below a given path are not searched for tasks (an error
names the first one): a suite is downloaded, and its folders are walked without recursion."""


def read_native_folder(folder: Path) -> list[Task]:
    """A folder with task.yaml: a native task, or with a `scenario:` block one task per variant."""
    raw = read_task_yaml(folder)
    return read_native_scenario(folder, raw) if "scenario" in raw else [read_native(folder, raw)]


def _json_has_rubrics(path: Path) -> bool | None:
    """True for OneMillion-Bench task files; None for JSON that is not a task; raise on bad JSON."""
    data = load_json(path)
    items = data if isinstance(data, list) else [data]
    return any(isinstance(it, dict) and ("rubrics" in it or "Rubrics" in it) for it in items) or None


SNIFF_BYTES = 8 * 1024 * 1024
"""The most of a file read to tell its kind (a JSON Lines file's first row must fit)."""


def _head(path: Path, max_bytes: int) -> bytes | None:
    """The first bytes of a regular file (never through a link, never a FIFO or device: a
    task file named like one must not hang discovery); None when it is not one."""
    try:
        fd, _st = open_regular_at(None, path)
    except (OSError, PathError):
        return None
    try:
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read(max_bytes)
    finally:
        os.close(fd)


def _md_is_darebench(path: Path) -> bool:
    data = _head(path, 8192)
    if data is None:
        return False
    head = data.decode("utf-8", errors="replace")
    if not head.startswith("---"):
        return False
    end = head.find("\n---", 3)
    front = head[3:end] if end != -1 else head
    return any(line.split(":", 1)[0].strip() == "grading_type" for line in front.splitlines())


def _jsonl_is_healthbench(path: Path) -> bool:
    data = _head(path, SNIFF_BYTES)
    if data is None:
        return False
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(data) - 3:  # not a character cut at the head's end
            raise InputError(path, None, f"does not parse as JSON Lines: not UTF-8 (byte {e.start})") from None
        text = data[:e.start].decode("utf-8")
    for n, line in enumerate(text.split("\n"), start=1):  # not splitlines: U+2028 is legal inside a JSON string
        if line.strip():
            row = loads_jsonl_line(line, path, n)  # within jsonio's limits (depth, digits)
            return isinstance(row, dict) and isinstance(row.get("rubrics"), list) and any(
                isinstance(r, dict) and "criterion" in r and "points" in r for r in row["rubrics"])
    return False


READERS: dict[str, Callable[[Path], list[Task]]] = {
    "native": read_native_folder,
    "fdegym": read_case,
    "darebench": read_darebench,
    "omb": read_omb,
    "healthbench": read_healthbench,
}


def _read(kind: str, path: Path) -> list[Task]:
    return READERS[kind](path)


def classify(path: Path) -> str | None:
    if path.is_dir():
        if (path / "task.yaml").is_file():
            return "native"
        if (path / "engagement.json").is_file():
            return "fdegym"
        return None
    suffix = path.suffix.lower()
    if suffix == ".md" and _md_is_darebench(path):
        return "darebench"
    if suffix == ".json" and path.name not in {"engagement.json", "npcs.json", "truth.json", "variants.json"}:
        return "omb" if _json_has_rubrics(path) else None
    if suffix == ".jsonl" and _jsonl_is_healthbench(path):
        return "healthbench"
    return None


def _walk(root: Path, errors: list[InputError]) -> Iterable[tuple[str, Path]]:
    """(kind, path) of every task file or folder under root; a file whose kind cannot be told
    (JSON that does not parse, ...) goes to `errors` and the walk goes on."""

    def kind_of(p: Path) -> str | None:
        try:
            return classify(p)
        except InputError as e:
            errors.append(e)
            return None

    kind = kind_of(root)
    if kind is not None:
        yield kind, root
        return
    if not root.is_dir():
        return
    stack = [(root, 0)]  # folders to look in, walked top-down in name order without recursion
    while stack:
        here, depth = stack.pop()
        try:
            with os.scandir(here) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue  # unreadable or gone: os.walk skips it the same way
        dirs = [e for e in entries if e.is_dir() and e.name not in SKIP_DIRS and not e.name.startswith(".")]
        keep = []
        for e in dirs:
            sub = here / e.name
            k = kind_of(sub)
            if k is not None:
                yield k, sub
            elif not e.is_symlink():
                keep.append(sub)
        for e in entries:
            if not e.is_dir():
                fp = here / e.name
                k = kind_of(fp)
                if k is not None:
                    yield k, fp
        if keep and depth >= SEARCH_DEPTH:
            errors.append(InputError(keep[0], None, f"folders nested more than {SEARCH_DEPTH} levels below "
                                                    f"{root}: not searched for tasks"))
            continue
        stack.extend((sub, depth + 1) for sub in reversed(keep))


@dataclass
class Found:
    """What `find_tasks` found: the valid tasks and every invalid task file's error."""

    tasks: list[Task] = field(default_factory=list)
    invalid: list[InputError] = field(default_factory=list)


def find_tasks(paths: Iterable[str | Path], *, limit: int | None = None) -> Found:
    """Every task under the given paths, in a stable order, and every bad file's error (a bad
    file never hides the others). A path that does not exist or holds no task is refused.
    `limit`: only the first N tasks of each path; files after them are not read."""
    found = Found()
    seen: dict[str, str] = {}
    for raw in paths:
        root = Path(raw)
        if not root.exists():
            raise InputError(root, None, "no such file or folder")
        before = len(found.tasks) + len(found.invalid)
        first = len(found.tasks)
        for kind, path in list(_walk(root, found.invalid)):
            if limit is not None and len(found.tasks) - first >= limit:
                break
            try:
                tasks = _read(kind, path)
            except InputError as e:
                found.invalid.append(e)
                continue
            except (ValueError, TypeError, OverflowError, MemoryError, RecursionError) as e:
                # A reader that did not foresee this file's content: still the file's fault, said
                # with its name (a value no float holds, a pydantic check, a list where a name is).
                found.invalid.append(InputError(path, None, f"cannot be read as a {kind} task: "
                                                            f"{type(e).__name__}: {str(e)[:300]}"))
                continue
            for task in tasks:
                if task.id in seen:
                    found.invalid.append(InputError(path, "id", f"duplicate task id {task.id!r} "
                                                                f"(also in {seen[task.id]})"))
                    continue
                if limit is not None and len(found.tasks) - first >= limit:
                    break
                seen[task.id] = str(path)
                found.tasks.append(task)
        if len(found.tasks) + len(found.invalid) == before:
            raise InputError(root, None, f"no tasks found in {root}")
    return found


def discover(paths: Iterable[str | Path], *, skip_invalid: bool = False) -> list[Task]:
    """Every task under the given paths; InvalidTasks naming every bad file unless `skip_invalid`."""
    found = find_tasks(paths)
    if found.invalid and not skip_invalid:
        raise InvalidTasks(found.invalid)
    return found.tasks


@dataclass
class TaskIndex:
    """Where each id, and each folder-like prefix of an id (`a` and `a/b` of `a/b/c`), is found
    in a task list: `--task` and a manifest's ids are looked up, not compared with every task."""

    exact: dict[str, list[int]] = field(default_factory=dict)
    under: dict[str, list[int]] = field(default_factory=dict)

    @classmethod
    def of(cls, tasks: list[Task]) -> TaskIndex:
        out = cls()
        for i, t in enumerate(tasks):
            out.exact.setdefault(t.id, []).append(i)
            cut = t.id.find("/")
            while cut > 0:
                out.under.setdefault(t.id[:cut], []).append(i)
                cut = t.id.find("/", cut + 1)
        return out

    def matches(self, want: str) -> list[int]:
        """The positions of the tasks `--task want` names: its id, or every task under `want/`."""
        return sorted({*self.exact.get(want, []), *self.under.get(want.rstrip("/"), [])})


def select(tasks: list[Task], ids: list[str]) -> list[Task]:
    """`--task ID`: the task with that id, or every task whose id starts with `ID/`."""
    if not ids:
        return tasks
    index = TaskIndex.of(tasks)
    chosen: dict[int, None] = {}
    for want in ids:
        hits = index.matches(want)
        if not hits:
            raise InputError(None, "--task", f"no task with id {want!r}")
        chosen.update(dict.fromkeys(hits))
    return [tasks[i] for i in chosen]
