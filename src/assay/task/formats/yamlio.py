"""YAML/JSON loading that reports parse errors with file, line and column."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

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


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise InputError(path, None, f"not UTF-8 text (byte {e.start})") from None
    except OSError as e:
        raise InputError(path, None, f"cannot read: {e.strerror}") from None
