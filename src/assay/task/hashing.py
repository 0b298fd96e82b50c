"""Content hashes: a task's hash covers its normalised fields and every file it refers to,
so a stored result can be traced to the exact content it was produced on."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

from assay.task.model import Task


def _feed_path(h: hashlib._Hash, path: Path, label: str) -> None:
    if path.is_dir():
        for root, dirs, files in os.walk(path):
            dirs.sort()
            for name in sorted(files):
                fp = Path(root) / name
                rel = fp.relative_to(path).as_posix()
                _feed_file(h, fp, f"{label}/{rel}")
    elif path.exists():
        _feed_file(h, path, label)
    else:
        h.update(f"missing:{label}\0".encode())


def _feed_file(h: hashlib._Hash, fp: Path, label: str) -> None:
    h.update(f"file:{label}\0".encode())
    with open(fp, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 16), b""):
            h.update(chunk)
    h.update(b"\0")


def task_files(task: Task) -> Iterable[tuple[str, Path]]:
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
    for extra in task.metadata.get("hash_paths", []):
        yield f"extra:{extra}", Path(extra)


def compute_hash(task: Task) -> str:
    h = hashlib.sha256()
    data = task.model_dump(mode="json", exclude={"content_hash", "origin"})
    # Host paths differ between machines; the files' content is what matters.
    h.update(json.dumps(_strip_paths(data), sort_keys=True, ensure_ascii=False).encode())
    for label, path in task_files(task):
        _feed_path(h, Path(path), label)
    return h.hexdigest()[:16]


def _strip_paths(obj: object) -> object:
    if isinstance(obj, dict):
        out: dict[str, object] = {}
        for k, v in obj.items():
            if k == "hash_paths":
                continue
            if k in {"source", "artifacts", "script", "checks_file", "corpus"} and isinstance(v, str) and "/" in v:
                out[k] = "<path>"
            elif k == "images" and isinstance(v, list):
                out[k] = [Path(str(x)).name for x in v]
            else:
                out[k] = _strip_paths(v)
        return out
    if isinstance(obj, list):
        return [_strip_paths(v) for v in obj]
    return obj
