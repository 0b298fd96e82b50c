"""Reading task files: YAML/JSON whose parse errors name file, line and column, and text read
without following a link or blocking on a special file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from assay import fs
from assay.errors import InputError


def load_yaml_text(text: str, file: Path | str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else None
        col = mark.column + 1 if mark else None
        reason = f"does not parse as YAML: {e.problem or e}"
        raise InputError(file, None, reason, line=line, column=col) from None
    except yaml.YAMLError as e:
        raise InputError(file, None, f"does not parse as YAML: {e}") from None


def load_yaml(path: Path) -> Any:
    return load_yaml_text(read_text(path), path)


def load_json(path: Path) -> Any:
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(path, None, f"does not parse as JSON: {e.msg}", line=e.lineno, column=e.colno) from None


MAX_TASK_FILE_BYTES = 256 * 1024 * 1024
"""A task file larger than this is refused (task files come from the internet)."""


def read_text(path: Path) -> str:
    """A task file's text: a regular file (never a link, a FIFO or a device), UTF-8, bounded."""
    try:
        return fs.read_regular(path, MAX_TASK_FILE_BYTES).decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(path, None, f"not UTF-8 text (byte {e.start})") from None
    except fs.PathError as e:
        raise InputError(path, None, str(e).removeprefix(f"{path}: ")) from None
    except OSError as e:
        raise InputError(path, None, f"cannot read: {e.strerror}") from None
