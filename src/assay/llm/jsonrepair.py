"""Reading JSON out of model replies: fences, prose around it, smart quotes, near-JSON.

The repair of a broken value (trailing commas, missing quotes or commas, Python literals,
truncation) is the `json-repair` library's. What is judge-specific stays here: finding the
values in a reply (fenced blocks, objects and arrays inside prose, in order of appearance),
normalising smart quotes and full-width punctuation, trying a strict parse first, and
refusing bracketed prose ("[citation needed]") that a repairer would happily turn into a list.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import json_repair

# A fenced block; an unclosed fence (a cut-off reply) runs to the end of the text.
FENCE = re.compile(r"```[A-Za-z]*[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)
# One character for one character, so offsets in the normalised text are offsets in the raw one.
SMART = str.maketrans({"“": '"', "”": '"', "„": '"', "‘": "'", "’": "'", "，": ",", "：": ":"})
OPEN = re.compile(r"[\[{]")
BARE_WORD = re.compile(r"[^\W\d]\w*")
LITERALS = frozenset({"true", "false", "null", "True", "False", "None", "NaN", "Infinity"})
_DECODER = json.JSONDecoder()
# Scanning bracketed prose that turns out not to be JSON, then looking inside it, costs up to
# the rest of the region each time: give up past this many times the region's length.
REJECT_BUDGET = 8


def parse_lenient(text: str | None) -> Any:
    """The first JSON object or array in a judge reply, repaired if need be; a fenced block
    wins over bare JSON in the prose. ValueError when the reply holds none."""
    if not text or not text.strip():
        raise ValueError("empty reply")
    value = _whole(text)
    if value is not None:
        return value
    first: list[Any] = []
    for fenced, value in _found(text):
        if fenced:
            return value
        if not first:
            first.append(value)
    if first:
        return first[0]
    raise ValueError("no JSON found in reply")


def json_candidates(text: str | None) -> list[Any]:
    """Every JSON object or array in `text`, in order of appearance (fenced blocks and bare
    values in prose alike), each repaired like `parse_lenient`'s. A judge that reasons before
    it answers may quote JSON on its way; its verdict is the last value, not the first."""
    if not text or not text.strip():
        return []
    value = _whole(text)
    if value is not None:
        return [value]
    return [value for _, value in _found(text)]


def _whole(text: str) -> Any:
    """The hot path: a reply that is one clean JSON object or array, taken as written."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, (dict, list)) else None


# ---------------------------------------------------------------------------- finding values


def _regions(text: str) -> Iterator[tuple[int, int, bool]]:
    """(start, end, fenced) pieces of `text`: fenced blocks' contents and the prose between them.
    A value never spans two pieces, so a cut-off block cannot swallow the prose after it."""
    pos = 0
    for m in FENCE.finditer(text):
        if m.start() > pos:
            yield pos, m.start(), False
        yield m.start(1), m.end(1), True
        pos = m.end()
    if pos < len(text):
        yield pos, len(text), False


def _found(text: str) -> Iterator[tuple[bool, Any]]:
    norm = text.translate(SMART)
    for start, end, fenced in _regions(text):
        for value in _values(text[start:end], norm[start:end]):
            yield fenced, value


def _values(raw: str, norm: str) -> Iterator[Any]:
    """The top-level JSON values in one region; `norm` is `raw` with smart punctuation replaced."""
    pos, budget = 0, REJECT_BUDGET * len(norm) + 4096
    while (m := OPEN.search(norm, pos)) is not None:
        i = m.start()
        value, end = _strict(raw, norm, i)
        if end is None:
            end, plausible = _extent(norm, i)
            value = _repaired(norm[i:end]) if plausible else None
        if isinstance(value, (dict, list)):
            yield value
            pos = end
        else:  # not JSON after all (bracketed prose): look inside it
            budget -= end - i
            if budget < 0:
                return
            pos = i + 1


def _strict(raw: str, norm: str, i: int) -> tuple[Any, int | None]:
    """A well-formed value at `i`, as written, then with smart punctuation replaced."""
    for s in (raw,) if raw == norm else (raw, norm):
        try:
            return _DECODER.raw_decode(s, i)
        except (ValueError, RecursionError):
            continue
    return None, None


def _extent(s: str, i: int) -> tuple[int, bool]:
    """Where the bracketed value opening at `i` ends (the text's end when it is cut off), and
    whether it looks like JSON: no bare words outside strings but literals, or a quoted key."""
    depth = 0
    quote = ""
    esc = False
    prev = " "  # the last significant character outside strings
    keyed = False
    outside: list[str] = []
    n = len(s)
    k = i
    while k < n:
        ch = s[k]
        if quote:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == quote and (quote == '"' or _ends_single(s, k + 1)):
                quote = ""
        elif ch == '"' or (ch == "'" and prev in "{[,:"):
            quote = prev = ch
        else:
            if ch in "[{":
                depth += 1
            elif ch in "]}":
                depth -= 1
                if depth == 0:
                    k += 1
                    break
            elif ch == ":" and prev in "\"'":
                keyed = True
            if not ch.isspace():
                prev = ch
            outside.append(ch)
        k += 1
    plausible = keyed or set(BARE_WORD.findall("".join(outside))) <= LITERALS
    return k, plausible


def _ends_single(s: str, k: int) -> bool:
    """A single quote closes a string only before a delimiter (so "it's" stays inside)."""
    while k < len(s) and s[k].isspace():
        k += 1
    return k >= len(s) or s[k] in ",:}]"


def _repaired(span: str) -> Any:
    try:
        value = json_repair.loads(span, skip_json_loads=True)
    except Exception:  # a repairer fault on odd input means "no value here", never a crash
        return None
    if span.startswith("{") and isinstance(value, list):  # read as several values: keep the first
        value = value[0] if value and isinstance(value[0], dict) else None
    return value
