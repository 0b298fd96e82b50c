"""JSON from hands the harness does not trust, read within limits.

A check's result line, a grader's answer file, an artifact under the `json` predicate: their
bytes follow from what an agent delivered, and Python's `json` recurses once per nesting level
(300,000 brackets end in RecursionError) and refuses integers of more than 4,300 digits with
ValueError. `loads` checks size and depth with a linear scan first, so the parser never
recurses deeply, and turns every refusal into one `JSONLimitError` with a reason a grade can
record.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["MAX_DEPTH", "JSONLimitError", "deep_at", "loads"]

MAX_DEPTH = 64
"""Arrays and objects nested deeper than this are refused (a task's deepest legitimate
structure, a JSON schema in a contract predicate, is a dozen)."""


class JSONLimitError(ValueError):
    """The text is not JSON this harness reads: too large, too deep, or not JSON at all."""


# One match per bracket outside strings, and one at the end: everything before it (strings,
# whatever else) is consumed possessively, and a string runs to its closing quote or to the end
# of the text (an unterminated one, which json.loads then refuses). So every match starts where
# the last one ended and none can fail: the scan moves strictly forward, linear in the text.
_STRING = r'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)'
_BRACKET = re.compile(rf'(?:{_STRING}|[^\[\]{{}}"]++)*+([\[\]{{}}]|\Z)', re.DOTALL)


def deep_at(text: str, max_depth: int = MAX_DEPTH) -> int | None:
    """The offset of the first bracket (outside strings) past `max_depth` levels, or None.
    One pass that stops there; closing brackets never take the level below zero."""
    level = 0
    for m in _BRACKET.finditer(text):
        bracket = m.group(1)
        if not bracket:  # the end of the text
            break
        if bracket in "[{":
            level += 1
            if level > max_depth:
                return m.start(1)
        elif level:
            level -= 1
    return None


def loads(text: str | bytes, *, max_depth: int = MAX_DEPTH, max_chars: int = 64 * 1024**2) -> Any:
    """`json.loads` of `text` once it is at most `max_chars` long and `max_depth` deep;
    JSONLimitError (with the reason) for anything it cannot take."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if len(text) > max_chars:
        raise JSONLimitError(f"{len(text):,} characters, more than the {max_chars:,} read")
    if deep_at(text, max_depth) is not None:
        raise JSONLimitError(f"nested deeper than {max_depth} levels")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise JSONLimitError(f"not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except (ValueError, RecursionError) as e:  # an integer of more digits than Python converts
        raise JSONLimitError(f"not JSON this harness reads: {str(e)[:200]}") from None
