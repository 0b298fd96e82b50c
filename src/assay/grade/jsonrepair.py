"""Lenient parsing of a judge's near-JSON: fences, smart quotes, trailing commas, cut-off arrays."""

from __future__ import annotations

import json
import re
from typing import Any

FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
SMART = str.maketrans({"“": '"', "”": '"', "„": '"', "‘": "'", "’": "'", "，": ",", "：": ":"})


def _close(text: str) -> str:
    """Close brackets and strings left open by a truncated reply."""
    stack: list[str] = []
    in_str = False
    esc = False
    last_complete = 0
    for i, ch in enumerate(text):
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
            if len(stack) <= 1:
                last_complete = i + 1
    if not stack and not in_str:
        return text
    # Drop a dangling partial element, then close what is open.
    cut = text[:last_complete] if last_complete else text
    stack = []
    in_str = False
    esc = False
    for ch in cut:
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
        elif ch in "]}" and stack:
            stack.pop()
    cut = re.sub(r",\s*$", "", cut.rstrip())
    return cut + ("" if not in_str else '"') + "".join(reversed(stack))


def parse_lenient(text: str) -> Any:
    """Best-effort JSON from a model reply; raises ValueError when nothing usable is there."""
    if text is None:
        raise ValueError("empty reply")
    candidates = [m.group(1) for m in FENCE.finditer(text)] + [text]
    for cand in candidates:
        s = cand.strip().translate(SMART)
        start = min((i for i in (s.find("{"), s.find("[")) if i != -1), default=-1)
        if start == -1:
            continue
        s = s[start:]
        for attempt in (s, _strip_trailing(s), _close(_strip_trailing(s))):
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
