"""Suite manifests (`assay.manifest/1`): a named list of task ids, written by `assay curate`
and read by `assay run --tasks-from`. Only the manifest file is read or written; task files
are never touched."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from assay.errors import InputError
from assay.task.formats.yamlio import load_json, load_yaml

__all__ = ["MANIFEST_SCHEMA", "MANIFEST_SUFFIXES", "check_out_path", "read_manifest_tasks", "write_manifest"]

MANIFEST_SCHEMA = "assay.manifest/1"
MANIFEST_SUFFIXES = (".json", ".yaml", ".yml")


def check_out_path(path: Path) -> None:
    if path.suffix.lower() not in MANIFEST_SUFFIXES:
        raise InputError(path, "--out", "manifest must end in .json, .yaml or .yml")
    if path.is_dir():
        raise InputError(path, "--out", "is a folder, not a file")


def write_manifest(path: Path, manifest: dict[str, Any]) -> None:
    """Write atomically (a temporary file beside it, then a rename); JSON or YAML by suffix."""
    check_out_path(path)
    if path.suffix.lower() == ".json":
        text = json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"
    else:
        text = yaml.safe_dump(manifest, sort_keys=False, allow_unicode=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_manifest_tasks(path: Path) -> list[str]:
    """The `tasks` list of a suite manifest (for `assay run --tasks-from`)."""
    if not path.is_file():
        raise InputError(path, "--tasks-from", "no such manifest file")
    data = load_json(path) if path.suffix.lower() == ".json" else load_yaml(path)
    if not isinstance(data, dict):
        raise InputError(path, None, "not a suite manifest (expected a mapping with a 'tasks' list)")
    schema = data.get("schema")
    if schema is not None and schema != MANIFEST_SCHEMA:
        raise InputError(path, "schema", f"{schema!r} is not {MANIFEST_SCHEMA!r}")
    tasks = data.get("tasks")
    if not isinstance(tasks, list) or not all(isinstance(t, str) and t.strip() for t in tasks):
        raise InputError(path, "tasks", "must be a list of task ids (strings)")
    if not tasks:
        raise InputError(path, "tasks", "the manifest lists no tasks")
    return list(dict.fromkeys(tasks))
