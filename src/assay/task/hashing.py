"""The one content hash: a task's hash covers its normalised fields and every file it refers
to, so a stored result can be traced to the exact content it was produced on.

Host paths differ between machines, so they are left out of the fields (a folder's files
are hashed by their path relative to the folder and their content instead): moving a suite
keeps its hashes. Scenario tasks also hash their whole case folder.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from assay.errors import InputError
from assay.fs import digests as fs_digests
from assay.fs.paths import PathError
from assay.task.model import Task

__all__ = ["content_hash", "file_digest", "json_digest", "task_files"]

_PATH_KEYS = frozenset({"source", "artifacts", "script", "root", "checks_file", "corpus", "case"})


def json_digest(obj: Any, length: int = 16) -> str:
    """sha256 of canonical JSON (sorted keys), hex, first `length` characters."""
    raw = json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:length]


def file_digest(path: str | Path, length: int = 16) -> str:
    return fs_digests.file_digest(path, length)


def task_files(task: Task) -> Iterable[tuple[str, Path]]:
    """(label, path) of every file or folder the task refers to, in a fixed order."""
    if task.scenario is not None:
        yield "case", Path(task.scenario.case)
    for i, wf in enumerate(task.workspace):
        if wf.source is not None:
            yield f"workspace[{i}]", wf.source
    for i, img in enumerate(task.images):
        yield f"images[{i}]", img
    if task.corpus is not None:
        yield "corpus", task.corpus
    if task.grading is not None and task.grading.checks_file is not None:
        yield "checks", task.grading.checks_file
    for name, pol in sorted(task.policies.items()):
        for attr in ("artifacts", "script"):
            p = getattr(pol, attr)
            if p is not None:
                yield f"policy:{name}:{attr}", p


def content_hash(task: Task, digests: dict[str, str] | None = None) -> str:
    """The hash of a task: its fields without host paths, then each of `task_files` by content.

    `digests` caches the digest of each file or folder by host path, for readers that make
    several tasks from one folder (the variants of a scenario share their case folder)."""
    h = hashlib.sha256()
    data = task.model_dump(mode="json", exclude={"content_hash", "origin", "responses"})
    h.update(json.dumps(_strip_paths(data), sort_keys=True, ensure_ascii=False, default=str)
             .encode("utf-8", "surrogatepass"))
    cache = digests if digests is not None else {}
    for label, path in task_files(task):
        key = str(path)
        if key not in cache:
            try:
                cache[key] = fs_digests.tree_digest(path)
            except PathError as e:  # a downloaded task's tree the harness will not walk
                raise InputError(path, label, str(e)) from None
        h.update(f"\0{label}\0{cache[key]}".encode())
    return h.hexdigest()[:16]


def _strip_paths(obj: object) -> object:
    if isinstance(obj, dict):
        out: dict[str, object] = {}
        for k, v in obj.items():
            if k in _PATH_KEYS and isinstance(v, str) and "/" in v:
                out[k] = "<path>"
            elif k == "images" and isinstance(v, list):
                out[k] = [Path(str(x)).name for x in v]
            else:
                out[k] = _strip_paths(v)
        return out
    if isinstance(obj, list):
        return [_strip_paths(v) for v in obj]
    return obj
