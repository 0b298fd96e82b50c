"""Deterministic checks of rubric items, so a rubric task can be graded offline.

Why: OneMillion-Bench grades every atomic rubric item with an LLM judge. A judge costs money,
needs a network and drifts between versions; many items ("states the tax due of 1,234.50",
"has a 'Risks' section", "stays under 300 words") can be decided by a plain test of the
answer text. A rubric item may carry a `MachineCheck`; this module decides it. The same
check gives the same verdict on the same answer, forever, which also makes the shipped
reference and shortcut answers of a task a regression test of its rubric.

A check is `met` iff EVERY condition it gives holds (conditions left out are not tested):

- `regex`: a pattern or a list of patterns; each must match somewhere (a search with
  MULTILINE, plus IGNORECASE when `ignore_case`, the default). Patterns are Python `re`
  syntax run by RE2 in linear time (`assay.task.patterns`): backreferences, and lookarounds
  other than a fixed sequence of characters, are refused when the task is validated.
- `not_regex`: a pattern or a list; none may match.
- `number`: some number in the answer is within `tolerance` of `number` (absolute, or
  relative to `|number|` when `relative`). With `number_pattern`, only the first capture
  group (the whole match if the pattern has no group) of each match of that pattern is
  read (the first `patterns.MAX_MATCHES` matches). `number_pattern` without `number` requires a
  match that holds a number.
  Numbers are read by `assay.grade.numbers`, the one reader shared with contract predicates
  and the audit: thousands separators, full-width digits, a minus not glued to a word, and
  the Chinese multipliers 万 and 亿 when directly attached ("3.2万" reads 32000).
- `headings`: each text must appear as a heading line, compared case-insensitively after
  stripping: a Markdown heading (`## Text`), a line ending in ':' or '：' (`Text:`), or a
  bold line (`**Text**`). A leading enumerator ("1.", "2)", "一、", "IV.") and bold or colon
  decoration around the text are ignored, so `## 1. **Text**:` counts as "Text".
- `min_chars` / `max_chars`: bounds on the length of the stripped answer.
- `min_words` / `max_words`: bounds on the word count. Words are whitespace-separated
  tokens, except that every CJK character (Han, kana) counts as one word; in a token that
  mixes CJK and other characters, each non-CJK stretch holding a letter or digit counts one.

Negative-weight items: the check describes the BAD behaviour. `met` means the bad thing
happened, and the item's (negative) weight is applied. For example, a -15 item "Fabricates
a statute number" might carry `regex: "Article 99\\b"`; an item "Exceeds the 4 g daily
paracetamol limit" might carry `number: 8, tolerance: 3.5` (fires for 4.5-11.5) with
`number_pattern: "(\\d+(?:\\.\\d+)?)\\s*g\\s*(?:per|a|/)\\s*day"`.
Write such checks so that they cannot fire on an empty or an unrelated answer.

A check without any condition is vacuously met. An invalid regular expression is an
authoring error (refused by `assay validate`) and raises ValueError here rather than quietly
deciding the item.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from assay.grade.numbers import parse_numbers
from assay.task.model import MachineCheck
from assay.task.patterns import TaskPattern, compile_pattern
from assay.task.re2_translation import PatternError

__all__ = ["count_words", "evaluate_check", "find_headings"]

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ebef]")

_ENUMERATOR = re.compile(
    r"^(?:\d+(?:\.\d+)*[.)、]\s*|\d+(?:\.\d+)*\s+|(?:[ivxlc]+|[a-z])[.)]\s+"
    r"|[一二三四五六七八九十百]+[、.．]\s*|[（(][一二三四五六七八九十百\d]+[）)]\s*)",
    re.IGNORECASE,
)
_MD_HEADING_START = re.compile(r"\s{0,3}#{1,6}\s+")
r"""A Markdown heading's marker; its text is the rest of the line less trailing '#'s and spaces, cut
with str methods: the regex `(.*?)\s*#*\s*$` took cubic time on a line of spaces (agent text)."""


def count_words(text: str) -> int:
    """Whitespace tokens, with each CJK character counted as a word of its own."""
    n = 0
    for token in text.split():
        if not _CJK.search(token):
            n += 1
            continue
        n += len(_CJK.findall(token))
        n += sum(1 for part in _CJK.split(token) if any(ch.isalnum() for ch in part))
    return n


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def _undecorate(text: str) -> str:
    """Strip bold markers, a trailing colon and a leading enumerator from a heading's text."""
    prev = None
    t = text.strip()
    while t != prev:
        prev = t
        for mark in ("**", "__"):
            if t.startswith(mark) and t.endswith(mark) and len(t) > 2 * len(mark):
                t = t[len(mark):-len(mark)].strip()
        t = t.rstrip(":：").strip()
        t = _ENUMERATOR.sub("", t, count=1).strip()
    return t


def find_headings(answer: str) -> set[str]:
    """The normalised texts of every heading-like line of `answer`."""
    found: set[str] = set()
    for raw in answer.splitlines():
        line = raw.strip()
        if not line:
            continue
        m = _MD_HEADING_START.match(raw)
        if m:
            found.add(_norm(_undecorate(raw[m.end():].rstrip().rstrip("#").rstrip())))
        elif line.endswith((":", "：")) or (
                (line.startswith("**") and line.rstrip(":：").endswith("**") and len(line) > 4)
                or (line.startswith("__") and line.rstrip(":：").endswith("__") and len(line) > 4)):
            found.add(_norm(_undecorate(line)))
    found.discard("")
    return found


def _patterns(value: str | list[str] | None) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def _compile(pattern: str, flags: str, what: str, *, captures: bool = False) -> TaskPattern:
    try:
        return compile_pattern(pattern, flags, captures=captures)
    except PatternError as e:
        raise ValueError(f"invalid {what} pattern {pattern!r}: {e}") from None


def _short(text: str, limit: int = 40) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _fmt(x: float) -> str:
    return f"{x:,.6g}" if abs(x) < 1e6 else f"{x:,.0f}"


def _candidates(check: MachineCheck, answer: str, flags: str) -> list[float] | None:
    """The numbers the number condition looks at; None when number_pattern never matches."""
    if check.number_pattern is None:
        return parse_numbers(answer)
    pat = _compile(check.number_pattern, flags, "number_pattern", captures=True)
    matches = list(pat.finditer(answer))
    if not matches:
        return None
    values: list[float] = []
    for m in matches:
        group = m.group(1) if pat.groups else m.group(0)
        if group:
            values.extend(parse_numbers(group)[:1])
    return values


def _within(values: Iterable[float], target: float, tolerance: float, relative: bool) -> bool:
    allowed = abs(tolerance) * (abs(target) if relative else 1.0)
    slack = 1e-9 * max(1.0, abs(target))
    return any(abs(v - target) <= allowed + slack for v in values)


def evaluate_check(check: MachineCheck, answer: str, read_as: str | None = None) -> tuple[bool, str]:  # noqa: C901 (one branch per condition a check may give, as the module docstring lists them)
    """Decide one machine check on an answer: (met, reason).

    `met` is True iff every condition the check gives holds. `reason` is one short sentence:
    "all conditions hold", or the conditions that failed. `read_as` is the answer as a model
    reads it (`passages.skeleton`): a `not_regex` fails when it matches either text, so a
    word hidden by a zero-width or lookalike character is still found.
    """
    flags = "mi" if check.ignore_case else "m"
    failures: list[str] = []

    for p in _patterns(check.regex):
        if not _compile(p, flags, "regex").search(answer):
            failures.append(f"regex {_short(p)} does not match")
    for p in _patterns(check.not_regex):
        rx = _compile(p, flags, "not_regex")
        if rx.search(answer) or (read_as is not None and rx.search(read_as)):
            failures.append(f"not_regex {_short(p)} matches")

    if check.number is not None or check.number_pattern is not None:
        values = _candidates(check, answer, flags)
        if values is None:
            failures.append(f"number_pattern {_short(check.number_pattern or '')} does not match")
        elif check.number is None:
            if not values:
                failures.append(f"number_pattern {_short(check.number_pattern or '')} captures no number")
        elif not _within(values, check.number, check.tolerance, check.relative):
            tol = f"{check.tolerance:g}{' (relative)' if check.relative else ''}"
            seen = ", ".join(_fmt(v) for v in values[:5]) or "none"
            failures.append(f"no number within {tol} of {_fmt(check.number)} (found: {seen})")

    if check.headings:
        present = find_headings(answer)
        missing = [h for h in check.headings if _norm(_undecorate(h)) not in present]
        if missing:
            failures.append("missing heading" + ("s " if len(missing) > 1 else " ")
                            + ", ".join(_short(h) for h in missing))

    n_chars = len(answer.strip())
    if check.min_chars is not None and n_chars < check.min_chars:
        failures.append(f"{n_chars} chars is below min_chars {check.min_chars}")
    if check.max_chars is not None and n_chars > check.max_chars:
        failures.append(f"{n_chars} chars is above max_chars {check.max_chars}")

    if check.min_words is not None or check.max_words is not None:
        n_words = count_words(answer)
        if check.min_words is not None and n_words < check.min_words:
            failures.append(f"{n_words} words is below min_words {check.min_words}")
        if check.max_words is not None and n_words > check.max_words:
            failures.append(f"{n_words} words is above max_words {check.max_words}")

    if failures:
        return False, "; ".join(failures) + "."
    return True, "all conditions hold"
