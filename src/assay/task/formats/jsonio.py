"""JSON and JSONL from task files and upstream result files, read within limits.

Why: these files come from the internet. Python's `json` recurses once per nesting level, so
200,000 nested brackets end in a RecursionError traceback (and whatever walks a structure
hundreds of levels deep afterwards, pydantic or a placeholder filler, recurses too), and an
integer of more than 4,300 digits raises a bare ValueError. `loads_json` checks the size, then
the depth with `jsonlimits.deep_at` (one linear scan of the brackets outside strings), before `json.loads` runs, so
the parser never recurses deeply; every refusal is an InputError naming the file, the field
when the caller knows it, the line and column when known, and the reason (exit 2).

Limits: MAX_DEPTH levels of nesting (a task's deepest legitimate structure, a JSON schema in a
contract predicate, is a dozen); integers of at most Python's own limit of digits; the size is
the caller's (`yamlio.MAX_TASK_FILE_BYTES` for task files, the importers' own caps).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from assay.errors import InputError
from assay.jsonlimits import MAX_DEPTH, deep_at

__all__ = ["JSONSyntaxError", "loads_json", "loads_jsonl_line"]

class JSONSyntaxError(InputError):
    """The text is not JSON at all (as opposed to JSON refused for its size, depth or numbers):
    a caller that fills placeholders first may try again on the filled text."""


def _line_col(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _no_constant(name: str) -> Any:
    raise _NonFinite(name)


def _finite_float(s: str) -> float:
    x = float(s)
    if not math.isfinite(x):
        raise _NonFinite(s)
    return x


class _NonFinite(ValueError):
    """A NaN or infinite number in a file whose reader refuses them."""


def _decode(data: bytes, file: Path | str, field: str | None) -> str:
    try:
        return data.decode(json.detect_encoding(data))
    except UnicodeDecodeError as e:
        raise InputError(file, field, f"not UTF-8 text (byte {e.start})") from None


MAX_INT_BITS = 1023
"""Integers wider than this may be past a float's range (2**1024 - 1 is 1,024 bits and no float
holds it: `float()` raised OverflowError in the readers); no weight, score or count is one."""


class _PastFloat(ValueError):
    """An integer wider than `MAX_INT_BITS` (no weight, score or count can be that)."""


def _float_range_int(text: str) -> int:
    value = int(text)
    if value.bit_length() > MAX_INT_BITS:
        raise _PastFloat(text[:20])
    return value


class _Wide:
    """Stands for an integer past a float's range on the second reading, which finds its field."""


def _mark_wide(text: str) -> Any:
    value = int(text)
    return _Wide() if value.bit_length() > MAX_INT_BITS else value


def _path_of_wide(doc: Any) -> str | None:
    """Where the first `_Wide` sits in a parsed document, as `[0].rubrics[1].weight` (breadth of
    the walk is the document's, its depth at most MAX_DEPTH: an explicit stack, no recursion)."""
    stack: list[tuple[str, Any]] = [("", doc)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, _Wide):
            return path
        if isinstance(value, dict):
            stack.extend((f"{path}.{k}" if path else str(k), v) for k, v in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", v) for i, v in reversed(list(enumerate(value))))
    return None


def _wide_field(text: str, field: str | None) -> str | None:
    """The field of the first integer past a float's range, joined to the caller's `field`."""
    path = _path_of_wide(json.loads(text, parse_int=_mark_wide))
    if not path:
        return field
    if field and not path.startswith("["):
        return f"{field}.{path}"
    return f"{field or ''}{path}"


def loads_json(text: str | bytes, file: Path | str, *, field: str | None = None, max_chars: int | None = None,
               max_depth: int = MAX_DEPTH, finite: bool = False, line: int | None = None) -> Any:
    """`json.loads` of a file's text once it is at most `max_chars` long and `max_depth` deep.

    `finite`: NaN, Infinity and numbers that overflow to infinity (`1e999`) are refused too.
    `line`: the text is that line of a JSONL file (positions are reported on it). Every refusal
    is an InputError (JSONSyntaxError when the text does not parse)."""
    if isinstance(text, bytes):
        text = _decode(text, file, field)
    if max_chars is not None and len(text) > max_chars:
        raise InputError(file, field, f"{len(text):,} characters, more than the {max_chars:,} read", line=line)
    off = deep_at(text, max_depth)
    if off is not None:
        ln, col = _line_col(text, off)
        raise InputError(file, field, f"arrays/objects nested deeper than {max_depth} levels are refused",
                         line=line if line is not None else ln, column=col)
    try:
        if finite:
            return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float, parse_int=_float_range_int)
        return json.loads(text, parse_int=_float_range_int)
    except json.JSONDecodeError as e:
        where = f"line {line}, column {e.colno}" if line is not None else f"line {e.lineno}, column {e.colno}"
        raise JSONSyntaxError(file, field, f"does not parse as JSON: {e.msg} ({where})",
                              line=line if line is not None else e.lineno, column=e.colno) from None
    except _NonFinite as e:
        raise InputError(file, field, f"{e} is not a finite number (NaN and infinities are refused)",
                         line=line) from None
    except _PastFloat:
        raise InputError(file, _wide_field(text, field), "an integer past a float's range is refused",
                         line=line) from None
    except ValueError as e:  # int() refuses more digits than sys.get_int_max_str_digits()
        if "digits" not in str(e):
            raise
        limit = sys.get_int_max_str_digits()
        raise InputError(file, field, f"an integer of more than {limit:,} digits is refused", line=line) from None


def loads_jsonl_line(text: str, file: Path | str, lineno: int, *, max_depth: int = MAX_DEPTH,
                     finite: bool = False) -> Any:
    """One line of a JSONL file, with the limits of `loads_json` (errors name the line)."""
    return loads_json(text, file, max_depth=max_depth, finite=finite, line=lineno)
