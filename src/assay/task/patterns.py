"""Task-supplied regular expressions, run by RE2 in time linear in the text.

Why: a pattern from a task file (contract `regex`/`number` predicates, rubric checks, stakeholder
`triggers`/`requires`, truth `framing` rules) used to run on Python's backtracking `re`, and
`^(\\d+\\s?)+$` against `"1" * 34 + "x"` takes about 2^34 steps: one such search froze every run
of a campaign (the harness is one asyncio process). RE2 has no backtracking, so its time is
linear in the text whatever the pattern. This module is the only place that compiles a
pattern a task file supplies; the harness's own constant patterns stay on `re`.

Task authors write Python `re` syntax, so a pattern is parsed by Python's own parser (the one
`re.compile` uses: escapes, verbose mode, inline flags, `{` literals all mean what they mean
in Python) and written out again in RE2's syntax, keeping Python's meaning where the engines
differ:

- `\\d`, `\\w`, `\\s` (and `\\D`, `\\W`, `\\S`) match Unicode digits, word characters and spaces as in
  Python (RE2's are ASCII-only), unless the pattern sets `(?a)`;
- `$` without MULTILINE also matches before a final newline, as in Python (RE2's only at the
  very end; it is a marker bit, below), and `\\Z` is RE2's `\\z`;
- `.`, `^`, `$` follow the MULTILINE and DOTALL flags and `(?m:...)`-style scopes as in Python;
  `x` (VERBOSE) is handled by the parser, since RE2 has no such mode.

**Lookarounds** whose body is a fixed sequence of single characters or classes (`(?<!not )`,
`(?<!不得)`, `(?!12)`, `(?<=\\d)`, alternatives allowed; a lookbehind of one width, as Python
requires) are kept, exactly and in linear time: before a search, each position of the text
gets a marker character (in a private-use block) whose bits say which of the pattern's
lookaround bodies match there, found by Python's `re` running the body alone (a fixed
sequence of characters cannot backtrack: time linear in the text times the body's length);
the RE2 pattern then reads the marker as it reads a character. `\\b`, `\\B` and `$` (without
MULTILINE) are marker bits too, positions found by Python's own `\\b`, `\\B` and `$`, so they
mean what they mean in Python (RE2's word boundaries are ASCII-only, and used as they are under
`(?a)`; RE2's `$` never matches before a final newline). The marked text is built in numpy
(`_marked`); a pattern with none of these runs on the text as it is.

Refused with the reason (no linear-time equivalent): other lookarounds (a repetition or a
capture inside, a lookbehind of several widths), backreferences, conditionals, atomic groups
and possessive quantifiers; and, for the markers, a lookaround right after `\\Z` or a
multi-line `$`, a start anchor right after a group ending in a lookaround, more than
MAX_LOOKAROUNDS bodies or MAX_COPIES checks at one position. Known differences that remain:
case-insensitive matching folds by RE2's Unicode tables (lookaround bodies by Python's);
`finditer` reads at most MAX_MATCHES matches, and after an empty match it goes on one
character later, so a non-empty match at the same position, which Python would still find
(`a??` on "a"), is not found.

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

import array
import functools
import importlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import re2

from assay.errors import InputError

__all__ = ["CACHE_SIZE", "MAX_LOOKAROUNDS", "MAX_MATCHES", "MAX_PATTERN_CHARS", "MAX_POSITIONS", "Match", "PatternError",
           "TaskPattern", "check_flags", "check_pattern", "compile_pattern", "to_re2"]

_parser: Any = importlib.import_module("re._parser")  # Python's own regex parser (what re.compile runs)
_C: Any = importlib.import_module("re._constants")

CACHE_SIZE = 128
"""Compiled patterns kept (least recently used dropped): a campaign grades the same few again and again."""
MAX_PATTERN_CHARS = 20_000
"""A longer pattern is refused: task patterns are short, and RE2's program grows with the text."""
MAX_NESTING = 100
"""Groups nested deeper than this are refused (Python's parser itself gives up a few hundred deep)."""
MAX_MATCHES = 1_000
"""`finditer` stops after this many matches: each match may rescan the rest of the text, so the
bound keeps a scan of all matches within MAX_MATCHES passes over the text."""
MAX_MEM = 8 * 1024 * 1024
MAX_REPEAT = 1000
"""RE2's largest counted repetition (`{1000}`); Python allows more, RE2 refuses them."""
MAX_LOOKAROUNDS = 8
"""Distinct lookaround bodies (and `\\b`) one pattern may have: a marker holds one bit for each."""
MAX_COPIES = 4
"""Checks of lookarounds one text position may see (each reads one copy of the position's marker)."""
_GONE = 1 << 20  # "every marker of this position was read" (past an end anchor)
MAX_POSITIONS = 256
"""The most places a pattern may be at after reading one character (its character classes and
literals, each counted repetition's copies multiplied out): RE2's time per character of text,
where its DFA gives way to the NFA (captures over a long match, a DFA past its memory), grows
with this number, so `(.*){1000}(.*){1000}` (2,000 places) costs seconds per 100 KB. Refused
above it; `[^\\n]{0,80}` is 80."""
MAX_BODY_CHARS = 64
"""The longest lookaround body (characters per alternative), so marking stays linear with a small factor."""

FLAG_LETTERS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE}
"""The flags a task file may give (contract predicates' `flags`), as Python's `re` letters."""

_SURROGATE = re.compile("[\ud800-\udfff]")
MARK_BASE = 0x100000
"""Markers are MARK_BASE + bits, in plane 16's private-use block; text characters there are
read as U+FFFD when a pattern has markers, so a text cannot forge one."""
_MARK_LAST = MARK_BASE + (1 << MAX_LOOKAROUNDS) - 1
_MARK_CHARS = re.compile(f"[{chr(MARK_BASE)}-{chr(_MARK_LAST)}]")
_STRIP = dict.fromkeys(range(MARK_BASE, _MARK_LAST + 1))

# Python's \s (str.isspace): what RE2 needs spelled out, its own \s is [\t\n\f\r ].
_SPACE_RANGES = [(0x09, 0x0D), (0x1C, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
                 (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000)]
_ASCII_SPACE = [(0x09, 0x0D), (0x20, 0x20)]
_ASCII_DIGIT = [(0x30, 0x39)]
_ASCII_WORD = [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]
_MAX_CP = 0x10FFFF
NOTHING = r"[^\x{0}-\x{10ffff}]"
"""A class no character is in (what `[^\\W\\w]` means)."""

Ranges = list[tuple[int, int]]


class PatternError(ValueError):
    """A task pattern this harness will not run: the reason says why, for a task author."""


class Match(Protocol):
    """What callers read of a match: its text and groups (positions are not offered: in a pattern
    with markers they count the markers)."""

    def group(self, index: int = 0, /) -> str | None: ...

    def groups(self) -> tuple[str | None, ...]: ...


@dataclass(frozen=True)
class _Look:
    """One marker bit: the positions where a lookaround body matches (found by Python's `re` on
    the body alone), or where Python's `\\b`, `\\B` or `$` holds (`kind`)."""

    source: str  # Python syntax of the body (kind "body")
    flags: int
    behind: bool
    kind: str = "body"  # or "boundary", "non_boundary" (`ascii` in flags: their ASCII forms), "end"

    @functools.cached_property
    def regex(self) -> re.Pattern[str]:
        return re.compile(f"(?=({self.source}))", self.flags)

    def positions(self, text: str, cps: Any) -> Any:
        """The positions (0..len(text)) where this bit is set, as a numpy array."""
        import numpy as np  # imported where texts are marked: validating a pattern needs none
        n = len(cps)
        if self.kind == "end":  # Python's $: at the end, and before a final newline
            return np.array([n - 1, n] if n and text[-1] == "\n" else [n], dtype=np.int64)
        if self.kind in ("boundary", "non_boundary"):
            word = _word_chars(cps, ascii_only=bool(self.flags & re.ASCII))
            left = np.concatenate(([False], word))
            right = np.concatenate((word, [False]))
            hit = left != right if self.kind == "boundary" else (left == right) & (n > 0)
            return np.flatnonzero(hit)
        found = self.regex.finditer(text)
        return np.fromiter((m.end(1) if self.behind else m.start() for m in found), dtype=np.int64)


def _word_chars(cps: Any, *, ascii_only: bool) -> Any:
    """Python's `\\w` (str.isalnum or "_") of each code point, by a table of every code point."""
    return _word_table(ascii_only)[cps]


@functools.lru_cache(maxsize=2)
def _word_table(ascii_only: bool) -> Any:
    """A bool per code point: built once per process from `_unicode_ranges`."""
    import numpy as np
    table = np.zeros(_MAX_CP + 1, dtype=bool)
    for a, b in (_ASCII_WORD if ascii_only else _unicode_ranges("word")):
        table[a:b + 1] = True
    return table


def _unmarked(g: Any) -> str | None:
    if g is None:
        return None
    return (g.decode("utf-8") if isinstance(g, bytes) else str(g)).translate(_STRIP)


class _MarkedMatch:
    """A match on the marked text (its UTF-8 bytes), its groups read without the markers."""

    __slots__ = ("_m",)

    def __init__(self, m: Any) -> None:
        self._m = m

    def group(self, index: int = 0, /) -> str | None:
        return _unmarked(self._m.group(index))

    def groups(self) -> tuple[str | None, ...]:
        return tuple(_unmarked(g) for g in self._m.groups())


_MARK_BYTES = len(chr(MARK_BASE).encode("utf-8"))


def _is_mark(b: bytes) -> bool:
    """Whether these bytes are one marker (MARK_BASE + bits) in UTF-8."""
    text = b.decode("utf-8", "replace")
    return len(text) == 1 and MARK_BASE <= ord(text) <= _MARK_LAST


class TaskPattern:
    """A task pattern compiled by RE2: `search` and `finditer` as `re.Pattern` has them."""

    __slots__ = ("_copies", "_looks", "_regexp", "flags", "re2_pattern", "source")

    def __init__(self, source: str, flags: str, re2_pattern: str, regexp: Any, looks: tuple[_Look, ...],
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
        return _MarkedMatch(m) if self._looks else m

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
            yield _MarkedMatch(m)
            start, stop = m.span()
            if stop == start:
                if stop >= end:
                    return
                pos = stop + 1
                while pos < end and data[pos] & 0xC0 == 0x80:  # to the next character
                    pos += 1
            else:
                pos = stop
                while pos - _MARK_BYTES > start and _is_mark(data[pos - _MARK_BYTES:pos]):
                    pos -= _MARK_BYTES

    def _prepare(self, text: str) -> str:
        text = _encodable(text)
        return _marked(_MARK_CHARS.sub("\ufffd", text), self._looks, self._copies) if self._looks else text

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


@functools.lru_cache(maxsize=16)
def _marked(text: str, looks: tuple[_Look, ...], copies: int) -> str:
    """The text with `copies` markers before each character and at the end: MARK_BASE + the bits
    of the lookaround bodies (and `\\b`, `\\B`, `$`) that hold at that position. Built in numpy
    over the code points, so linear at C speed. Cached for the last few texts: one message is
    searched with every trigger of a person, most with `\\b`."""
    import numpy as np
    cps = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    n = len(cps)
    bits = np.zeros(n + 1, dtype=np.uint32)
    for i, look in enumerate(looks):
        bits[look.positions(text, cps)] |= np.uint32(1 << i)
    stride = copies + 1
    out = np.empty(n * stride + copies, dtype=np.uint32)
    rows = out[: n * stride].reshape(n, stride)
    rows[:, :copies] = (bits[:n] + MARK_BASE)[:, None]
    rows[:, copies] = cps
    out[n * stride:] = bits[n] + MARK_BASE
    return out.tobytes().decode("utf-32-le")


def _options() -> Any:
    opts = re2.Options()
    opts.longest_match = False
    opts.max_mem = MAX_MEM
    opts.log_errors = False
    return opts


def _flag_bits(flags: str) -> int:
    bits = 0
    for ch in flags:
        if ch not in FLAG_LETTERS:
            raise PatternError(f"unknown flag {ch!r} (flags are letters of {', '.join(FLAG_LETTERS)})")
        bits |= FLAG_LETTERS[ch]
    return bits


def check_flags(flags: str | None) -> None:
    """PatternError for a flag letter other than i, m, s, x."""
    _flag_bits(flags or "")


@functools.lru_cache(maxsize=CACHE_SIZE)
def compile_pattern(pattern: str, flags: str = "", *, captures: bool = True) -> TaskPattern:
    """A task pattern compiled by RE2 with Python's meaning (module docstring); `flags` are
    letters of `imsx`. PatternError (a ValueError) says why a pattern cannot be run.

    `captures=False` for a caller that asks only whether (and where) it matches: its groups are
    written as non-capturing, so RE2 finds the match with its DFA alone, where capture groups
    would have its NFA walk the whole match (time per character up to MAX_POSITIONS steps)."""
    translated, looks, copies, places = _translate(pattern, flags, captures=captures)
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


# --------------------------------------------------------------------------- translation


def to_re2(pattern: str, flags: str = "") -> str:
    """The pattern in RE2 syntax with Python's meaning (module docstring); PatternError if it
    has none in RE2 or does not parse as a Python regular expression."""
    return _translate(pattern, flags, captures=True)[0]


def _translate(pattern: str, flags: str, *, captures: bool) -> tuple[str, list[_Look], int, int]:
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternError(f"{len(pattern):,} characters, longer than the {MAX_PATTERN_CHARS:,} a pattern may have")
    bits = _flag_bits(flags)
    try:
        parsed = _parser.parse(pattern, bits)
    except re.error as e:
        raise PatternError(f"not a regular expression: {e}") from None
    except RecursionError:
        raise PatternError(f"groups nested too deeply (at most {MAX_NESTING})") from None
    state = int(parsed.state.flags) | bits
    if state & re.LOCALE:
        raise PatternError("the LOCALE flag is not supported")
    writer = _Writer(marked=_needs_marks(parsed.data, 0, state), captures=captures)
    body, _ = writer.seq(parsed.data, state, 0, used=0)
    return ("(?i)" if state & re.IGNORECASE else "") + body, writer.looks, writer.copies, _places(parsed.data, 0)


def _needs_marks(items: Any, depth: int, flags: int) -> bool:
    """Whether the pattern needs markers: a lookaround; a `$` without MULTILINE (Python's also
    matches before a final newline, RE2's has no such form); a `\\b`/`\\B`, which must be Python's
    Unicode one (RE2's own is ASCII-only, exact only under `(?a)`)."""
    if depth > MAX_NESTING:
        raise PatternError(f"groups nested more than {MAX_NESTING} deep")
    for op, av in items:
        name = op.name
        if name in ("ASSERT", "ASSERT_NOT"):
            return True
        if name == "AT" and av.name in ("AT_BOUNDARY", "AT_NON_BOUNDARY") and not flags & re.ASCII:
            return True
        if name == "AT" and av.name == "AT_END" and not flags & re.MULTILINE:
            return True
        if name == "BRANCH" and any(_needs_marks(alt, depth + 1, flags) for alt in av[1]):
            return True
        if name == "SUBPATTERN" and _needs_marks(av[3], depth + 1, (flags | av[1]) & ~av[2]):
            return True
        if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT") and _needs_marks(av[2], depth + 1, flags):
            return True
    return False


def _places(items: Any, depth: int) -> int:
    """How many places (character classes and literals, counted repetitions multiplied out) the
    sequence has: a bound on the NFA threads alive after one character (MAX_POSITIONS).
    Lookaround bodies count nothing: markers are found apart, by a fixed sequence's scan."""
    if depth > MAX_NESTING:
        raise PatternError(f"groups nested more than {MAX_NESTING} deep")
    total = 0
    for op, av in items:
        name = op.name
        if name in ("LITERAL", "NOT_LITERAL", "ANY", "IN"):
            total += 1
        elif name == "BRANCH":
            total += sum(_places(alt, depth + 1) for alt in av[1])
        elif name == "SUBPATTERN":
            total += _places(av[3], depth + 1)
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            lo, hi, sub = av
            copies = lo + 1 if hi == _C.MAXREPEAT else hi
            total += min(copies, MAX_REPEAT + 1) * _places(sub, depth + 1)
        if total > MAX_POSITIONS * MAX_REPEAT:  # far past the bound: stop counting
            return total
    return total


def _nullable(items: Any) -> bool:
    """Whether the sequence can match the empty string."""
    for op, av in items:
        name = op.name
        if name in ("LITERAL", "NOT_LITERAL", "ANY", "IN"):
            return False
        if name == "BRANCH" and not any(_nullable(alt) for alt in av[1]):
            return False
        if name == "SUBPATTERN" and not _nullable(av[3]):
            return False
        if name in ("MAX_REPEAT", "MIN_REPEAT") and av[0] > 0 and not _nullable(av[2]):
            return False
    return True


def _lit(cp: int) -> str:
    """One character as an RE2 literal, in or out of a class: letters and digits as they are,
    ASCII punctuation escaped, anything else as `\\x{HEX}`."""
    ch = chr(cp)
    if ch.isascii() and ch.isalnum():
        return ch
    if ch.isascii() and ch.isprintable() and ch != " ":
        return "\\" + ch
    return f"\\x{{{cp:x}}}"


def _ranges_text(ranges: Ranges) -> str:
    return "".join(_lit(a) if a == b else f"{_lit(a)}-{_lit(b)}" for a, b in ranges)


def _complement(ranges: Ranges) -> Ranges:
    out, nxt = [], 0
    for a, b in sorted(ranges):
        if a > nxt:
            out.append((nxt, a - 1))
        nxt = max(nxt, b + 1)
    if nxt <= _MAX_CP:
        out.append((nxt, _MAX_CP))
    return out


def _union(ranges: Ranges) -> Ranges:
    out: Ranges = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _without_marks(ranges: Ranges) -> Ranges:
    """The ranges less the marker block."""
    out: Ranges = []
    for a, b in ranges:
        if b < MARK_BASE or a > _MARK_LAST:
            out.append((a, b))
            continue
        if a < MARK_BASE:
            out.append((a, MARK_BASE - 1))
        if b > _MARK_LAST:
            out.append((_MARK_LAST + 1, b))
    return out


@functools.cache
def _unicode_ranges(name: str) -> tuple[tuple[int, int], ...]:
    """The code points of Python's Unicode `\\w` or `\\d` as ranges, found by Python's `re` itself
    over a string of every code point (computed once, ~0.05 s): only a negated class holding a
    negated category (`[^\\W\\d]`) needs them, RE2 having no class difference."""
    every = array.array("I", range(_MAX_CP + 1)).tobytes().decode("utf-32-le", "surrogatepass")
    runs = re.finditer({"word": r"\w+", "digit": r"\d+"}[name], every)
    return tuple((m.start(), m.end() - 1) for m in runs)


def _category(cat: str, ascii_mode: bool) -> tuple[str, Any, bool]:
    """(RE2 class text of the positive category, a function of its exact ranges, negated?) for
    one of \\d \\D \\s \\S \\w \\W, with Python's Unicode meaning unless ASCII."""
    negated = "_NOT_" in cat
    base = cat.replace("_NOT_", "_")
    if ascii_mode:
        rs = {"CATEGORY_DIGIT": _ASCII_DIGIT, "CATEGORY_SPACE": _ASCII_SPACE, "CATEGORY_WORD": _ASCII_WORD}[base]
        return _ranges_text(rs), lambda: rs, negated
    if base == "CATEGORY_DIGIT":
        return r"\p{Nd}", lambda: list(_unicode_ranges("digit")), negated
    if base == "CATEGORY_WORD":
        return r"\p{L}\p{N}_", lambda: list(_unicode_ranges("word")), negated
    if base == "CATEGORY_SPACE":
        return _ranges_text(_SPACE_RANGES), lambda: _SPACE_RANGES, negated
    raise PatternError(f"the class item {cat} has no RE2 equivalent")


_REFUSED = {
    "GROUPREF": "a backreference (\\1, (?P=name)) needs backtracking",
    "GROUPREF_EXISTS": "a conditional group (?(1)yes|no) needs backtracking",
    "ATOMIC_GROUP": "an atomic group (?>...) is a backtracking construct",
    "POSSESSIVE_REPEAT": "a possessive quantifier (*+, ++, ?+) is a backtracking construct",
}
_WHY = "; RE2 runs task patterns in linear time and has no backtracking: rewrite the pattern without it"
_ATOMS = ("LITERAL", "NOT_LITERAL", "ANY", "IN")


class _Writer:
    """Writes a parsed Python pattern (re._parser's tree) in RE2's syntax.

    With lookarounds (`marked`), the text carries `copies` identical markers before every
    character and at the end (`_marked`). The lookarounds met before a consuming atom, a group,
    an end anchor or the end of a sequence are one constraint, checked by reading one marker
    (`K`: the bits that must and must not be set); a consuming atom first reads what is left of
    its position's markers (`S*`). `copies` is the most checks one position can see (more than
    one when a group that may match nothing lies between lookarounds), counted as the pattern is
    written; more than MAX_COPIES is refused."""

    def __init__(self, *, marked: bool, captures: bool = True) -> None:
        self.marked = marked
        self.captures = captures
        self.looks: list[_Look] = []
        self.copies = 1

    # --- markers

    def bit(self, look: _Look) -> int:
        if look not in self.looks:
            if len(self.looks) >= MAX_LOOKAROUNDS:
                raise PatternError(f"more than {MAX_LOOKAROUNDS} different lookarounds (and \\b) in one pattern")
            self.looks.append(look)
        return 1 << self.looks.index(look)

    def skip(self) -> str:
        """Whatever is left of this position's markers."""
        return f"[{_lit(MARK_BASE)}-{_lit(_MARK_LAST)}]*" if self.marked else ""

    def check(self, pending: list[tuple[int, bool]], used: int) -> str:
        """Read one marker meeting every (bit, wanted) constraint; `used` were read here before."""
        if used >= _GONE:
            raise PatternError("a lookaround right after an end anchor ($, \\Z) cannot be run by RE2; "
                               "put it before the anchor")
        if used + 1 > MAX_COPIES:
            raise PatternError(f"more than {MAX_COPIES} lookarounds at one position, with groups between them")
        self.copies = max(self.copies, used + 1)
        need = avoid = 0
        for b, want in pending:
            if want:
                need |= b
            else:
                avoid |= b
        ok = [m for m in range(1 << MAX_LOOKAROUNDS) if m & need == need and not m & avoid]
        return f"[{_ranges_text(_union([(MARK_BASE + m, MARK_BASE + m) for m in ok]))}]" if ok else NOTHING

    # --- sequences

    def seq(self, items: Any, flags: int, depth: int, *, used: int) -> tuple[str, int]:
        """The RE2 text of a sequence, and how many markers its end position may have had read
        (`used` at its start)."""
        if depth > MAX_NESTING:
            raise PatternError(f"groups nested more than {MAX_NESTING} deep")
        out: list[str] = []
        pending: list[tuple[int, bool]] = []
        for op, av in items:
            name = op.name
            if name in _REFUSED:
                raise PatternError(_REFUSED[name] + _WHY)
            if name in ("ASSERT", "ASSERT_NOT") or (self.marked and name == "AT" and av.name in
                                                    ("AT_BOUNDARY", "AT_NON_BOUNDARY")):
                pending.append(self.lookaround(name, av, flags))
                continue
            if self.marked and name == "AT" and av.name == "AT_END" and not flags & re.MULTILINE:
                pending.append((self.bit(_Look("$", 0, behind=False, kind="end")), True))  # Python's $
                continue
            if name == "AT" and (not self.marked or av.name in ("AT_BEGINNING", "AT_BEGINNING_STRING")):
                if used and self.marked:
                    raise PatternError("a start anchor (^, \\A) right after a lookaround in a group cannot be run "
                                       "by RE2; put the anchor first")
                out.append(self.at(av.name, flags))  # a start anchor looks before this position's markers
                continue
            if pending:
                out.append(self.check(pending, used))
                pending, used = [], used + 1
            if name in _ATOMS:
                out.append(self.skip() + self.atom(name, av, flags))
                used = 0
            elif name == "AT":  # an end anchor looks past this position's markers
                out.append(self.skip() + self.at(av.name, flags))
                used = _GONE
            else:
                text, used = self.compound(name, av, flags, depth, used)
                out.append(text)
        if pending:
            out.append(self.check(pending, used))
            used += 1
        return "".join(out), used

    def compound(self, name: str, av: Any, flags: int, depth: int, used: int) -> tuple[str, int]:
        if name == "BRANCH":
            texts, exits = [], []
            for alt in av[1]:
                text, end = self.seq(alt, flags, depth + 1, used=used)
                texts.append(text)
                exits.append(end)
            return "(?:" + "|".join(texts) + ")", max(exits)
        if name == "SUBPATTERN":
            group, add, remove, sub = av
            body, end = self.seq(sub, (flags | add) & ~remove, depth + 1, used=used)
            case = "i" if add & re.IGNORECASE else "-i" if remove & re.IGNORECASE else ""
            if group is not None and self.captures:
                return (f"((?{case}:{body}))" if case else f"({body})"), end
            return f"(?{case}:{body})", end
        if name in ("MAX_REPEAT", "MIN_REPEAT"):
            return self.repeat(av, flags, depth, used, lazy=name == "MIN_REPEAT")
        raise PatternError(f"the construct {name} has no RE2 equivalent")

    def repeat(self, av: Any, flags: int, depth: int, used: int, *, lazy: bool) -> tuple[str, int]:
        lo, hi, sub = av
        unbounded = hi == _C.MAXREPEAT
        for n in (lo, None if unbounded else hi):
            if n is not None and n > MAX_REPEAT:
                raise PatternError(f"a repetition count of {n} is above RE2's limit of {MAX_REPEAT}")
        body, end = self.seq(sub, flags, depth + 1, used=used)
        if (unbounded or hi > 1) and end > used:  # a later turn starts where this one ended
            body, end2 = self.seq(sub, flags, depth + 1, used=min(end, _GONE))
            end = max(end, end2)
        single = len(sub) == 1 and sub[0][0].name in _ATOMS and not self.marked and not body.startswith("(?:")
        atom = body if single else f"(?:{body})"
        if (lo, unbounded) == (0, True):
            q = "*"
        elif (lo, unbounded) == (1, True):
            q = "+"
        elif unbounded:
            q = f"{{{lo},}}"
        elif (lo, hi) == (0, 1):
            q = "?"
        elif lo == hi:
            q = f"{{{lo}}}"
        else:
            q = f"{{{lo},{hi}}}"
        return atom + q + ("?" if lazy else ""), max(end, used) if lo == 0 or _nullable(sub) else end

    # --- lookarounds

    def lookaround(self, name: str, av: Any, flags: int) -> tuple[int, bool]:
        """(bit, wanted) of a lookaround or, in a marked pattern, of `\\b` or `\\B`."""
        if name == "AT":  # where Python's own \b (or \B: never on an empty text) holds
            kind = "boundary" if av.name == "AT_BOUNDARY" else "non_boundary"
            return self.bit(_Look("", flags & re.ASCII, behind=False, kind=kind)), True
        direction, body = av
        kind = "lookahead" if direction > 0 else "lookbehind"
        source, widths = self.body(body, kind)
        if direction < 0 and len(widths) != 1:
            raise PatternError(f"a {kind} must have one fixed width (as Python requires)")
        py_flags = flags & (re.IGNORECASE | re.DOTALL | re.ASCII)
        return self.bit(_Look(source, py_flags, behind=direction < 0)), name == "ASSERT"

    def body(self, items: Any, kind: str) -> tuple[str, set[int]]:
        """A lookaround body in Python syntax, when it is a fixed sequence of single characters or
        classes (alternatives allowed), and the widths it can have."""
        out, widths = [], {0}
        for op, av in items:
            name = op.name
            if name in _ATOMS:
                out.append(_py_atom(name, av))
                widths = {w + 1 for w in widths}
            elif name == "BRANCH" or (name == "SUBPATTERN" and av[0] is None and not av[1] and not av[2]):
                alts = [self.body(alt, kind) for alt in (av[1] if name == "BRANCH" else [av[3]])]
                out.append("(?:" + "|".join(text for text, _ in alts) + ")")
                widths = {w + x for w in widths for _, ws in alts for x in ws}
            else:
                what = "a capture group" if name == "SUBPATTERN" else "a repetition" if "REPEAT" in name else name
                raise PatternError(f"a {kind} holding {what} cannot be run in linear time; only a fixed sequence "
                                   f"of characters or classes, such as (?<!not ) or (?!12), can" + _WHY)
            if max(widths) > MAX_BODY_CHARS:
                raise PatternError(f"a {kind} longer than {MAX_BODY_CHARS} characters")
        return "".join(out), widths

    # --- atoms

    def atom(self, name: str, av: Any, flags: int) -> str:
        marks = _ranges_text([(MARK_BASE, _MARK_LAST)]) if self.marked else ""
        if name == "LITERAL":
            return NOTHING if self.marked and MARK_BASE <= av <= _MARK_LAST else _lit(av)
        if name == "NOT_LITERAL":
            return f"[^{_lit(av)}{marks}]"
        if name == "ANY":
            if flags & re.DOTALL:
                return f"[^{marks}]" if self.marked else "(?s:.)"
            return f"[^\\n{marks}]" if self.marked else "."
        return self.klass(av, flags)

    @staticmethod
    def at(code: str, flags: int) -> str:
        if code == "AT_BEGINNING":
            return "(?m:^)" if flags & re.MULTILINE else r"\A"
        if code == "AT_END":  # multiline here: without, Python's $ is a marker bit (`seq`)
            return "(?m:$)"
        return {"AT_BEGINNING_STRING": r"\A", "AT_END_STRING": r"\z", "AT_BOUNDARY": r"\b",
                "AT_NON_BOUNDARY": r"\B"}[code]

    def klass(self, items: Any, flags: int) -> str:
        """A character class; categories as Python means them (Unicode unless ASCII)."""
        ascii_mode = bool(flags & re.ASCII)
        negated = False
        parts: list[str] = []  # RE2 class items of the positive members
        exact: Ranges = []  # the same members as ranges
        not_cats: list[tuple[str, Any]] = []  # negated categories: (positive class text, its ranges)
        for op, av in items:
            name = op.name
            if name == "NEGATE":
                negated = True
            elif name in ("LITERAL", "RANGE"):
                lo, hi = (av, av) if name == "LITERAL" else av
                rs = _without_marks([(lo, hi)]) if self.marked else [(lo, hi)]
                parts.append(_ranges_text(rs))
                exact.extend(rs)
            elif name == "CATEGORY":
                text, ranges, is_not = _category(av.name, ascii_mode)
                if is_not:
                    not_cats.append((text, ranges))
                else:
                    parts.append(text)
                    exact.extend(ranges())
            else:
                raise PatternError(f"the class item {name} has no RE2 equivalent")
        marks = _ranges_text([(MARK_BASE, _MARK_LAST)]) if self.marked else ""
        if not not_cats:
            if negated:
                return f"[^{''.join(parts)}{marks}]"
            return f"[{''.join(parts)}]" if any(parts) else NOTHING
        if not negated:  # [a\D] as an alternation: RE2 cannot put a negated category inside a class
            alts = ([f"[{''.join(parts)}]"] if any(parts) else []) + [f"[^{text}{marks}]" for text, _ in not_cats]
            return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        # [^\W\d]: the exact complement of its members, written out as ranges
        members = exact + [r for _, ranges in not_cats for r in _complement(list(ranges()))]
        rest = _complement(_union(members))
        rest = _without_marks(rest) if self.marked else rest
        return f"[{_ranges_text(rest)}]" if rest else NOTHING


def _py_atom(name: str, av: Any) -> str:
    """A single-character item of a lookaround body in Python's syntax."""
    if name == "LITERAL":
        return re.escape(chr(av))
    if name == "NOT_LITERAL":
        return f"[^\\U{av:08x}]"
    if name == "ANY":
        return "."
    out: list[str] = []
    for op, x in av:
        item = op.name
        if item == "NEGATE":
            out.insert(0, "^")
        elif item == "LITERAL":
            out.append(f"\\U{x:08x}")
        elif item == "RANGE":
            out.append(f"\\U{x[0]:08x}-\\U{x[1]:08x}")
        elif item == "CATEGORY":
            out.append({"CATEGORY_DIGIT": r"\d", "CATEGORY_NOT_DIGIT": r"\D", "CATEGORY_SPACE": r"\s",
                        "CATEGORY_NOT_SPACE": r"\S", "CATEGORY_WORD": r"\w", "CATEGORY_NOT_WORD": r"\W"}[x.name])
        else:
            raise PatternError(f"the class item {item} has no RE2 equivalent")
    return "[" + "".join(out) + "]"
