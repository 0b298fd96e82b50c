"""A task's pattern, in Python's `re` syntax, written out in RE2's syntax with Python's meaning.

Task authors write Python `re` syntax, so a pattern is parsed by Python's own parser (the one
`re.compile` uses: escapes, verbose mode, inline flags, `{` literals all mean what they mean
in Python) and written out again in RE2's syntax, keeping Python's meaning where the engines
differ:

- `\\d`, `\\w`, `\\s` (and `\\D`, `\\W`, `\\S`) match Unicode digits, word characters and spaces as in
  Python (RE2's are ASCII-only), unless the pattern sets `(?a)`;
- `$` without MULTILINE also matches before a final newline, as in Python (RE2's only at the
  very end; it is a marker bit, `assay.task.pattern_marks`), and `\\Z` is RE2's `\\z`;
- `.`, `^`, `$` follow the MULTILINE and DOTALL flags and `(?m:...)`-style scopes as in Python;
  `x` (VERBOSE) is handled by the parser, since RE2 has no such mode.

Refused with the reason (no linear-time equivalent): other lookarounds (a repetition or a
capture inside, a lookbehind of several widths), backreferences, conditionals, atomic groups
and possessive quantifiers; and, for the markers, a lookaround right after `\\Z` or a
multi-line `$`, a start anchor right after a group ending in a lookaround, more than
MAX_LOOKAROUNDS bodies or MAX_COPIES checks at one position. A pattern's places after one
character are counted here too (`MAX_POSITIONS`, refused when it is compiled).
"""

from __future__ import annotations

import importlib
import re
from typing import Any

from assay.task.pattern_marks import (
    ASCII_WORD,
    MARK_BASE,
    MARK_LAST,
    MAX_CP,
    MAX_LOOKAROUNDS,
    Look,
    unicode_ranges,
)

__all__ = ["FLAG_LETTERS", "MAX_NESTING", "MAX_PATTERN_CHARS", "MAX_POSITIONS", "MAX_REPEAT", "NOTHING", "PatternError",
           "flag_bits", "to_re2", "translate"]

_parser: Any = importlib.import_module("re._parser")  # Python's own regex parser (what re.compile runs)
_C: Any = importlib.import_module("re._constants")

MAX_PATTERN_CHARS = 20_000
"""A longer pattern is refused: task patterns are short, and RE2's program grows with the text."""
MAX_NESTING = 100
"""Groups nested deeper than this are refused (Python's parser itself gives up a few hundred deep)."""
MAX_REPEAT = 1000
"""RE2's largest counted repetition (`{1000}`); Python allows more, RE2 refuses them."""
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

# Python's \s (str.isspace): what RE2 needs spelled out, its own \s is [\t\n\f\r ].
_SPACE_RANGES = [(0x09, 0x0D), (0x1C, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
                 (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000)]
_ASCII_SPACE = [(0x09, 0x0D), (0x20, 0x20)]
_ASCII_DIGIT = [(0x30, 0x39)]
NOTHING = r"[^\x{0}-\x{10ffff}]"
"""A class no character is in (what `[^\\W\\w]` means)."""

Ranges = list[tuple[int, int]]


class PatternError(ValueError):
    """A task pattern this harness will not run: the reason says why, for a task author."""


def flag_bits(flags: str) -> int:
    bits = 0
    for ch in flags:
        if ch not in FLAG_LETTERS:
            raise PatternError(f"unknown flag {ch!r} (flags are letters of {', '.join(FLAG_LETTERS)})")
        bits |= FLAG_LETTERS[ch]
    return bits


def to_re2(pattern: str, flags: str = "") -> str:
    """The pattern in RE2 syntax with Python's meaning (module docstring); PatternError if it
    has none in RE2 or does not parse as a Python regular expression."""
    return translate(pattern, flags, captures=True)[0]


def translate(pattern: str, flags: str, *, captures: bool) -> tuple[str, list[Look], int, int]:
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternError(f"{len(pattern):,} characters, longer than the {MAX_PATTERN_CHARS:,} a pattern may have")
    bits = flag_bits(flags)
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
    if nxt <= MAX_CP:
        out.append((nxt, MAX_CP))
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
        if b < MARK_BASE or a > MARK_LAST:
            out.append((a, b))
            continue
        if a < MARK_BASE:
            out.append((a, MARK_BASE - 1))
        if b > MARK_LAST:
            out.append((MARK_LAST + 1, b))
    return out


def _category(cat: str, ascii_mode: bool) -> tuple[str, Any, bool]:
    """(RE2 class text of the positive category, a function of its exact ranges, negated?) for
    one of \\d \\D \\s \\S \\w \\W, with Python's Unicode meaning unless ASCII."""
    negated = "_NOT_" in cat
    base = cat.replace("_NOT_", "_")
    if ascii_mode:
        rs = {"CATEGORY_DIGIT": _ASCII_DIGIT, "CATEGORY_SPACE": _ASCII_SPACE, "CATEGORY_WORD": ASCII_WORD}[base]
        return _ranges_text(rs), lambda: rs, negated
    if base == "CATEGORY_DIGIT":
        return r"\p{Nd}", lambda: list(unicode_ranges("digit")), negated
    if base == "CATEGORY_WORD":
        return r"\p{L}\p{N}_", lambda: list(unicode_ranges("word")), negated
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
    character and at the end (`mark_text`). The lookarounds met before a consuming atom, a group,
    an end anchor or the end of a sequence are one constraint, checked by reading one marker
    (`K`: the bits that must and must not be set); a consuming atom first reads what is left of
    its position's markers (`S*`). `copies` is the most checks one position can see (more than
    one when a group that may match nothing lies between lookarounds), counted as the pattern is
    written; more than MAX_COPIES is refused."""

    def __init__(self, *, marked: bool, captures: bool = True) -> None:
        self.marked = marked
        self.captures = captures
        self.looks: list[Look] = []
        self.copies = 1

    # --- markers

    def bit(self, look: Look) -> int:
        if look not in self.looks:
            if len(self.looks) >= MAX_LOOKAROUNDS:
                raise PatternError(f"more than {MAX_LOOKAROUNDS} different lookarounds (and \\b) in one pattern")
            self.looks.append(look)
        return 1 << self.looks.index(look)

    def skip(self) -> str:
        """Whatever is left of this position's markers."""
        return f"[{_lit(MARK_BASE)}-{_lit(MARK_LAST)}]*" if self.marked else ""

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
                pending.append((self.bit(Look("$", 0, behind=False, kind="end")), True))  # Python's $
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
            return self.bit(Look("", flags & re.ASCII, behind=False, kind=kind)), True
        direction, body = av
        kind = "lookahead" if direction > 0 else "lookbehind"
        source, widths = self.body(body, kind)
        if direction < 0 and len(widths) != 1:
            raise PatternError(f"a {kind} must have one fixed width (as Python requires)")
        py_flags = flags & (re.IGNORECASE | re.DOTALL | re.ASCII)
        return self.bit(Look(source, py_flags, behind=direction < 0)), name == "ASSERT"

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
        marks = _ranges_text([(MARK_BASE, MARK_LAST)]) if self.marked else ""
        if name == "LITERAL":
            return NOTHING if self.marked and MARK_BASE <= av <= MARK_LAST else _lit(av)
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
        marks = _ranges_text([(MARK_BASE, MARK_LAST)]) if self.marked else ""
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
