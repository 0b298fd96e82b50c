"""JSON from hands the harness does not trust, read within limits.

A check's result line, a grader's answer file, an artifact under the `json` predicate: their
bytes follow from what an agent delivered, and Python's `json` recurses once per nesting level
(300,000 brackets end in RecursionError) and refuses integers of more than 4,300 digits with
ValueError. `loads` checks size and depth with a linear scan first, so the parser never
recurses deeply, and turns every refusal into one `JSONLimitError` with a reason a grade can
record. `loads_head` reads the first characters of a longer JSON text as the value they
begin (what a page shows of a stored event it clips).
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["MAX_DEPTH", "JSONLimitError", "deep_at", "loads", "loads_head"]

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


# One token of a JSON text: a string (complete, or cut at the end of the text), a bracket, a
# colon or comma, or a scalar (a number, true, false, null, NaN); whitespace before it skipped.
_TOKEN = re.compile(rf'\s*+(?:({_STRING})|([\[\]{{}}:,])|([^\s\[\]{{}}:,"]++))')


def _cut_string(body: str) -> str:
    """The text of a string's JSON body (between its quotes) cut anywhere: an escape or a
    surrogate pair cut in half is left out."""
    for end in range(len(body), max(-1, len(body) - 12), -1):
        try:
            text: str = json.loads(f'"{body[:end]}"')
        except ValueError:  # an escape cut in half: a little shorter
            continue
        return text[:-1] if text and "\ud800" <= text[-1] <= "\udbff" else text
    return ""


def loads_head(head: str, mark: str = "", *, max_depth: int = MAX_DEPTH) -> Any:
    """The value the JSON text `head` begins, where `head` is the first characters of a longer
    JSON text: a string cut at the end is kept with `mark` after it (a key cut in half, a
    number or a literal cut, an unfinished member are left out), and every array and object
    still open is closed. Containers nested deeper than `max_depth` are left out from there.
    One pass over the tokens, then one `json.loads` of at most `head`'s length and depth;
    None when `head` begins no value (empty, or not JSON)."""
    # Each open container: [bracket, state]; state "first" (just opened), "key" (after a comma
    # in an object), "colon" (after a key), "value" (after a colon, or a comma in an array),
    # "next" (after a member). The document itself is a value, then "done".
    stack: list[list[str]] = []
    top = "value"
    safe = ""  # the longest prefix of `head` found that is JSON once its open containers are closed
    closers = ""
    pos = 0
    for m in _TOKEN.finditer(head):
        if m.start() != pos:
            break  # not JSON from here
        pos = m.end()
        string, punct, scalar = m.groups()
        inner = stack[-1][0] if stack else ""
        state = stack[-1][1] if stack else top
        wants_key = inner == "{" and state in ("first", "key")
        wants_value = state == "value" or (inner == "[" and state == "first")
        if string is not None:
            complete = len(string) > 1 and string.endswith('"') and not _cut_escape(string)
            if wants_key and complete:
                stack[-1][1] = "colon"
                continue
            if not wants_value:
                break
            if not complete:  # the text ends inside this string: kept as far as it goes, marked
                kept = json.dumps(_cut_string(string[1:]) + mark, ensure_ascii=False)
                safe, closers = head[:m.start(1)] + kept, _closers(stack)
                break
        elif scalar is not None:
            if not wants_value or pos == len(head):  # a number or literal the cut may have shortened
                break
        elif punct in "[{":
            if not wants_value or len(stack) >= max_depth:
                break
            stack.append([punct, "first"])
            safe, closers = head[:pos], _closers(stack)
            continue
        elif punct in "]}":
            if inner != {"]": "[", "}": "{"}[punct] or state not in ("first", "next"):
                break
            stack.pop()
        elif _separator(stack, punct, state):
            continue
        else:
            break
        # a value ended here
        if stack:
            stack[-1][1] = "next"
        else:
            top = "done"
        safe, closers = head[:pos], _closers(stack)
    return json.loads(safe + closers) if safe else None


def _separator(stack: list[list[str]], punct: str, state: str) -> bool:
    """A colon after a key, or a comma after a member, taken (False: not one of them here)."""
    if punct == ":" and state == "colon":
        stack[-1][1] = "value"
        return True
    if punct == "," and state == "next":
        stack[-1][1] = "key" if stack[-1][0] == "{" else "value"
        return True
    return False


def _closers(stack: list[list[str]]) -> str:
    return "".join("}" if bracket == "{" else "]" for bracket, _state in reversed(stack))


def _cut_escape(string: str) -> bool:
    """Whether a string token that ends with a quote ends with an escaped quote instead (an odd
    run of backslashes before it): then the text was cut right after it."""
    run = len(string) - 1 - len(string[:-1].rstrip("\\"))
    return run % 2 == 1
