"""Lenient parsing of a judge's near-JSON: fences, smart quotes, trailing commas, cut-off arrays."""

from __future__ import annotations

import ast
import json
import re
from typing import Any

FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
SMART = str.maketrans({"“": '"', "”": '"', "„": '"', "‘": "'", "’": "'", "，": ",", "：": ":"})


def _parse_basic(text: str) -> Any:
    """The plain fallback: the first JSON value after fence and quote repair (truncation is
    handled by `parse_lenient`'s own repair before this is tried)."""
    if text is None:
        raise ValueError("empty reply")
    candidates = [m.group(1) for m in FENCE.finditer(text)] + [text]
    for cand in candidates:
        s = cand.strip().translate(SMART)
        start = min((i for i in (s.find("{"), s.find("[")) if i != -1), default=-1)
        if start == -1:
            continue
        s = s[start:]
        for attempt in (s, _strip_trailing(s)):
            try:
                return json.loads(attempt)
            except json.JSONDecodeError:
                pass
        # Text after the JSON value: decode the first value only.
        try:
            obj, _ = json.JSONDecoder().raw_decode(_strip_trailing(s))
            return obj
        except json.JSONDecodeError:
            continue
    raise ValueError("no JSON found in reply")


def _strip_trailing(s: str) -> str:
    return re.sub(r",\s*([\]}])", r"\1", s)


def _scan(s: str) -> tuple[list[str], bool, list[int]]:
    """Open closers, whether a string is open, and cut points (after a complete value) in `s`."""
    stack: list[str] = []
    in_str = esc = False
    cuts: list[int] = []
    for i, ch in enumerate(s):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"':
            in_str = True
        elif ch in "[{":
            stack.append("]" if ch == "[" else "}")
        elif ch in "]}":
            if stack:
                stack.pop()
            cuts.append(i + 1)
        elif ch == ",":
            cuts.append(i)
    return stack, in_str, cuts


def _no_trailing(s: str) -> str:
    return re.sub(r",\s*([\]}])", r"\1", s)


def _closed(s: str) -> str:
    stack, in_str, _ = _scan(s)
    s = s + ('"' if in_str else "")
    return re.sub(r"[,:]\s*$", "", s.rstrip()) + "".join(reversed(stack))


def _try(s: str) -> Any:
    try:
        return json.loads(s)
    except json.JSONDecodeError:
        return None


def _pythonish(s: str) -> Any:
    """A Python-literal reply ({'met': True}); only literals are evaluated."""
    t = re.sub(r"\btrue\b", "True", re.sub(r"\bfalse\b", "False", re.sub(r"\bnull\b", "None", s)))
    try:
        v = ast.literal_eval(t)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return v if isinstance(v, (dict, list)) else None


def _repair(cand: str) -> Any:
    """The first JSON value in `cand`, repaired: trailing commas, trailing prose, truncation."""
    s = _no_trailing(cand)
    for attempt in (cand, s):
        v = _try(attempt)
        if v is not None:
            return v
    try:
        return json.JSONDecoder().raw_decode(s)[0]
    except json.JSONDecodeError:
        pass
    # Truncated: close what is open, else cut back to the last complete value and close.
    v = _try(_no_trailing(_closed(s)))
    if v is not None:
        return v
    _, _, cuts = _scan(s)
    for pos in reversed(cuts[-400:]):
        v = _try(_no_trailing(_closed(s[:pos])))
        if v is not None:
            return v
    return _pythonish(s)


def parse_lenient(text: str | None) -> Any:
    """Best-effort JSON from a judge reply: ``` fences, smart quotes, trailing commas, prose
    around the JSON, truncated arrays and objects, Python-literal booleans."""
    if not text or not text.strip():
        raise ValueError("empty reply")
    fences = [m.group(1) for m in re.finditer(r"```[A-Za-z]*\s*(.*?)(?:```|$)", text, re.DOTALL)]
    for raw in [*fences, text]:
        s = raw.strip().translate(SMART)
        starts = sorted(i for i in (s.find("{"), s.find("[")) if i != -1)
        for start in starts:
            v = _repair(s[start:])
            if v is not None:
                return v
    return _parse_basic(text)  # raises ValueError when nothing usable is there
