"""Lookarounds, `\\b`, `\\B` and Python's `$` kept exactly, in linear time, as marker characters.

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
(`mark_text`); a pattern with none of these runs on the text as it is. One marker bit is a
`Look`; a match on the marked text is read without its markers (`MarkedMatch`).
"""

from __future__ import annotations

import array
import functools
import json
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ASCII_WORD", "MARK_BASE", "MARK_BYTES", "MARK_CHARS", "MARK_LAST", "MAX_CP", "MAX_LOOKAROUNDS", "Look",
           "MarkedMatch", "UNICODE_TABLE", "computed_ranges", "is_mark", "mark_text", "unicode_ranges"]

MAX_LOOKAROUNDS = 8
"""Distinct lookaround bodies (and `\\b`) one pattern may have: a marker holds one bit for each."""
MARK_BASE = 0x100000
"""Markers are MARK_BASE + bits, in plane 16's private-use block; text characters there are
read as U+FFFD when a pattern has markers, so a text cannot forge one."""
MARK_LAST = MARK_BASE + (1 << MAX_LOOKAROUNDS) - 1
MARK_CHARS = re.compile(f"[{chr(MARK_BASE)}-{chr(MARK_LAST)}]")
_STRIP = dict.fromkeys(range(MARK_BASE, MARK_LAST + 1))
ASCII_WORD = [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]
MAX_CP = 0x10FFFF


@dataclass(frozen=True)
class Look:
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
    """A bool per code point: built once per process from `unicode_ranges`."""
    import numpy as np
    table = np.zeros(MAX_CP + 1, dtype=bool)
    for a, b in (ASCII_WORD if ascii_only else unicode_ranges("word")):
        table[a:b + 1] = True
    return table


UNICODE_TABLE = Path(__file__).resolve().parents[1] / "data" / "unicode_classes.json"
"""`computed_ranges` of "word" and "digit" for the Unicode versions of the Pythons assay runs on,
by `unicodedata.unidata_version` (tests/test_task_patterns.py checks this Python's)."""


@functools.cache
def unicode_ranges(name: str) -> tuple[tuple[int, int], ...]:
    """The code points of Python's Unicode `\\w` or `\\d` as ranges: only a negated class holding
    a negated category (`[^\\W\\d]`) needs them, RE2 having no class difference. Read from
    `UNICODE_TABLE` for this Python's Unicode version, else computed (`computed_ranges`)."""
    shipped = json.loads(UNICODE_TABLE.read_text()).get(unicodedata.unidata_version, {}).get(name)
    if shipped is not None:
        return tuple((int(a), int(b)) for a, b in shipped)
    return computed_ranges(name)


def computed_ranges(name: str) -> tuple[tuple[int, int], ...]:
    """`unicode_ranges` found by Python's `re` itself over a string of every code point (0.2 s)."""
    every = array.array("I", range(MAX_CP + 1)).tobytes().decode("utf-32-le", "surrogatepass")
    runs = re.finditer({"word": r"\w+", "digit": r"\d+"}[name], every)
    return tuple((m.start(), m.end() - 1) for m in runs)


def _unmarked(g: Any) -> str | None:
    if g is None:
        return None
    return (g.decode("utf-8") if isinstance(g, bytes) else str(g)).translate(_STRIP)


class MarkedMatch:
    """A match on the marked text (its UTF-8 bytes), its groups read without the markers."""

    __slots__ = ("_m",)

    def __init__(self, m: Any) -> None:
        self._m = m

    def group(self, index: int = 0, /) -> str | None:
        return _unmarked(self._m.group(index))

    def groups(self) -> tuple[str | None, ...]:
        return tuple(_unmarked(g) for g in self._m.groups())


MARK_BYTES = len(chr(MARK_BASE).encode("utf-8"))


def is_mark(b: bytes) -> bool:
    """Whether these bytes are one marker (MARK_BASE + bits) in UTF-8."""
    text = b.decode("utf-8", "replace")
    return len(text) == 1 and MARK_BASE <= ord(text) <= MARK_LAST


@functools.lru_cache(maxsize=16)
def mark_text(text: str, looks: tuple[Look, ...], copies: int) -> str:
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
