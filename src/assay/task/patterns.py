"""Task-supplied regular expressions, run by RE2 in time linear in the text.

Why: a pattern from a task file (contract `regex`/`number` predicates, rubric checks, stakeholder
`triggers`/`requires`, truth `framing` rules) used to run on Python's backtracking `re`, and
`^(\\d+\\s?)+$` against `"1" * 34 + "x"` takes about 2^34 steps: one such search froze every run
of a campaign (the harness is one asyncio process). RE2 has no backtracking, so its time is
linear in the text whatever the pattern. This module is the only place that compiles a
pattern a task file supplies; the harness's own constant patterns stay on `re`.

A pattern is translated to RE2's syntax with Python's meaning (`assay.task.re2_translation`),
its lookarounds, `\\b`, `\\B` and `$` kept as marker characters (`assay.task.pattern_marks`), and
compiled and run here (`compile_pattern`, `TaskPattern`); a pattern RE2 cannot run is refused
when a task is validated (`check_pattern`).

Known differences that remain: case-insensitive matching folds by RE2's Unicode tables
(lookaround bodies by Python's); `finditer` reads at most MAX_MATCHES matches, and after an
empty match it goes on one character later, so a non-empty match at the same position, which
Python would still find (`a??` on "a"), is not found.

RE2 options, set on purpose:
- `longest_match=False`: leftmost-first matching, Perl's and Python's rule, so `a|ab` finds
  "a" and capture groups hold what `re` would put there (True would be POSIX leftmost-longest);
- `max_mem=8 MiB` (RE2's default, stated): the budget of one compiled pattern, its program and
  its DFA cache; a pattern that does not fit is refused as too large, and a DFA that runs out
  falls back to RE2's NFA (slower, still linear). The LRU cache holds at most CACHE_SIZE
  patterns, so the worst case is CACHE_SIZE x 8 MiB, reached only by as many huge patterns;
- `log_errors=False`: a refusal is reported once, as an InputError, not also on stderr.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import re2

from assay.errors import InputError
from assay.task.pattern_marks import MARK_BYTES, MARK_CHARS, Look, MarkedMatch, is_mark, mark_text
from assay.task.re2_translation import MAX_POSITIONS, PatternError, flag_bits, translate

__all__ = ["CACHE_SIZE", "MAX_MATCHES", "Match", "TaskPattern", "check_flags", "check_pattern", "compile_pattern"]

CACHE_SIZE = 128
"""Compiled patterns kept (least recently used dropped): a campaign grades the same few again and again."""
MAX_MATCHES = 1_000
"""`finditer` stops after this many matches: each match may rescan the rest of the text, so the
bound keeps a scan of all matches within MAX_MATCHES passes over the text."""
MAX_MEM = 8 * 1024 * 1024

_SURROGATE = re.compile("[\ud800-\udfff]")


class Match(Protocol):
    """What callers read of a match: its text and groups (positions are not offered: in a pattern
    with markers they count the markers)."""

    def group(self, index: int = 0, /) -> str | None: ...

    def groups(self) -> tuple[str | None, ...]: ...


class TaskPattern:
    """A task pattern compiled by RE2: `search` and `finditer` as `re.Pattern` has them."""

    __slots__ = ("_copies", "_looks", "_regexp", "flags", "re2_pattern", "source")

    def __init__(self, source: str, flags: str, re2_pattern: str, regexp: Any, looks: tuple[Look, ...],
                 copies: int) -> None:
        self.source = source
        self.flags = flags
        self.re2_pattern = re2_pattern
        self._regexp = regexp
        self._looks = looks
        self._copies = copies

    @property
    def groups(self) -> int:
        return int(self._regexp.groups)

    def search(self, text: str) -> Match | None:
        """The first match in `text`, or None (linear in the text)."""
        m = self._regexp.search(self._prepare(text))
        if m is None:
            return None
        return MarkedMatch(m) if self._looks else m

    def finditer(self, text: str) -> Iterator[Match]:
        """The matches in `text`, left to right, at most MAX_MATCHES of them."""
        if self._looks:
            yield from self._marked_matches(self._prepare(text).encode("utf-8"))
            return
        n, last = 0, None
        for m in self._regexp.finditer(_encodable(text)):
            span = m.span()
            if span == last and span[0] == span[1]:  # google-re2 repeats an empty match found ahead
                continue
            if n >= MAX_MATCHES:
                return
            yield m
            n, last = n + 1, span

    def _marked_matches(self, data: bytes) -> Iterator[Match]:
        """Matches on the marked text, each search starting at the marker the last match ended
        on (if it read one), so a lookaround there is seen again, as `re` sees it."""
        pos, end = 0, len(data)
        for _ in range(MAX_MATCHES):
            m = self._regexp.search(data, pos)
            if m is None:
                return
            yield MarkedMatch(m)
            start, stop = m.span()
            if stop == start:
                if stop >= end:
                    return
                pos = stop + 1
                while pos < end and data[pos] & 0xC0 == 0x80:  # to the next character
                    pos += 1
            else:
                pos = stop
                while pos - MARK_BYTES > start and is_mark(data[pos - MARK_BYTES:pos]):
                    pos -= MARK_BYTES

    def _prepare(self, text: str) -> str:
        text = _encodable(text)
        return mark_text(MARK_CHARS.sub("\ufffd", text), self._looks, self._copies) if self._looks else text

    def __repr__(self) -> str:
        return f"TaskPattern({self.source!r}, flags={self.flags!r})"


def _encodable(text: str) -> str:
    """RE2 reads UTF-8: a lone surrogate (from a JSON `\\udXXX` escape) becomes U+FFFD, one
    character for one, so match positions stay those of the text."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def _options() -> Any:
    opts = re2.Options()
    opts.longest_match = False
    opts.max_mem = MAX_MEM
    opts.log_errors = False
    return opts


def check_flags(flags: str | None) -> None:
    """PatternError for a flag letter other than i, m, s, x."""
    flag_bits(flags or "")


@functools.lru_cache(maxsize=CACHE_SIZE)
def compile_pattern(pattern: str, flags: str = "", *, captures: bool = True) -> TaskPattern:
    """A task pattern compiled by RE2 with Python's meaning (module docstring); `flags` are
    letters of `imsx`. PatternError (a ValueError) says why a pattern cannot be run.

    `captures=False` for a caller that asks only whether (and where) it matches: its groups are
    written as non-capturing, so RE2 finds the match with its DFA alone, where capture groups
    would have its NFA walk the whole match (time per character up to MAX_POSITIONS steps)."""
    translated, looks, copies, places = translate(pattern, flags, captures=captures)
    try:
        regexp = re2.compile(translated, _options())
        for look in looks:
            look.regex  # noqa: B018 (compiled now, so a body Python refuses is refused here)
    except re2.error as e:
        raise PatternError(_re2_reason(e)) from None
    except re.error as e:
        raise PatternError(f"a lookaround body does not compile: {e}") from None
    if places > MAX_POSITIONS:
        raise PatternError(f"it can be at {places:,} places at once after one character (more than "
                           f"{MAX_POSITIONS}): RE2's time per character grows with that; use fewer or smaller "
                           "counted repetitions")
    return TaskPattern(pattern, flags, translated, regexp, tuple(looks), copies)


def check_pattern(file: Path | str, field: str, pattern: Any, flags: str | None = "") -> None:
    """InputError(file, field, reason) for a pattern (or flags) this harness will not run."""
    if not isinstance(pattern, str):
        raise InputError(file, field, "a pattern must be a string")
    try:
        compile_pattern(pattern, flags or "")
    except PatternError as e:
        raise InputError(file, field, f"bad regex {_short(pattern)}: {e}") from None


def _short(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _re2_reason(e: Exception) -> str:
    msg = e.args[0] if e.args else str(e)
    text = msg.decode("utf-8", "replace") if isinstance(msg, bytes) else str(msg)
    if "too large" in text or "out of memory" in text:
        return (f"too large for RE2: its compiled form does not fit the {MAX_MEM // 2**20} MiB budget "
                "of one pattern (large counted repetitions of classes grow fast)")
    return f"RE2 cannot compile it: {text}"
