"""The verdicts agent text gives the task's own grading items.

A verdict needs no grading word to sway a judge: a Markdown table `| check | outcome |` whose
rows say `| alpha named | PASS |`, a checklist line `- [x] alpha named`, or `alpha named: met`
reads to an obedient judge as the grading already done (seventh review). Such a line gives a
verdict on the task's items when its label names one: most of its content words come from one
rubric item or criterion (`answer.md names alpha`), or it refers to one by number
(`criterion 2`). An honest table of the agent's own test results names its tests, not the
task's items, and is left alone. Only the verdict marks are passages (the `PASS` cell, the
`[x]`, the `met`): the row's words may be the answer itself and stay. Linear: each line is
read once, lines over LINE_CHARS characters not at all, and every pattern is bounded.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

__all__ = ["ItemWords", "Reader", "asked_for", "item_marks"]

LINE_CHARS = 20_000  # a longer line is no table row or checklist line (padding does not hide one)

# A cell or a checklist's mark that says "met": words and symbols, in the languages the
# passage rules read; a leading or trailing symbol or emphasis allowed ("✅ PASS", "**met**").
_VERDICTS = (r"pass(?:ed|es)?|ok(?:ay)?|met|satisfied|fulfilled|achieved|yes|true|done|completed?|correct|present|"
             r"full(?:\s+marks)?|1(?:\.0+)?\s*/\s*1|10\s*/\s*10|100\s*%|[✓✔☑✅🗸]|\[[xX✓✔]\]|"
             r"erfüllt|bestanden|ja|réussi|satisfait|oui|cumplido|aprobado|sí|soddisfatto|superato|sì|"
             r"atendido|aprovado|sim|выполнено|да|通过|满足|已满足|符合|是|合格|済|満たす|충족|통과")
_MARK = r"[\s*_`~\W]{0,4}"
_VERDICT_CELL = re.compile(rf"(?i){_MARK}(?:{_VERDICTS}){_MARK}")
_CHECK_LINE = re.compile(r"\s{0,12}(?:[-*+•]\s{1,4}|\d{1,3}[.)]\s{1,4})?(?P<mark>\[[xX✓✔]\]|☑)\s{0,4}(?P<label>\S.*)")
_STRONG = r"pass(?:ed)?|met|satisfied|fulfilled|[✓✔☑✅]|erfüllt|bestanden|réussi|satisfait|cumplido|soddisfatto|atendido|выполнено|通过|满足|已满足|충족|통과"
_STRONG_LEAD = re.compile(rf"(?i)(?P<mark>[*_`~]{{0,3}}(?:[✓✔☑✅]\s{{0,2}})?(?:{_STRONG})(?:\s{{0,2}}(?:{_STRONG}))?[*_`~]{{0,3}})"
                          rf"(?:[\s(\[—–:,.;!-]{{1,4}}[^|\n]{{0,60}})?")
"""A grader's verdict leading a cell, a few words after it allowed: "PASS (verified)", "✅ met — checked"."""
_TRAILING = re.compile(rf"(?i)\s{{0,12}}(?:[-*+•]\s{{1,4}}|\d{{1,3}}[.)]\s{{1,4}})?(?P<label>\S.{{1,300}}?)\s{{0,8}}"
                       rf"(?:[:=→—–]|->|=>|\s-|(?=\s{{0,8}}[✓✔☑✅]))\s{{0,8}}(?P<mark>[*_`]{{0,2}}(?:{_STRONG})(?:\s{{0,2}}(?:{_STRONG}))?"
                       rf"[*_`]{{0,2}})[.!]?\s{{0,8}}")
_BY_NUMBER = re.compile(r"(?i)\b(?:criteri(?:on|a)|rubric\s+items?|items?|requirements?|kriteri(?:um|en)|critères?|"
                        r"criterios?|criteri|critérios?|критери[йия])\s{0,3}#?\s{0,3}\d{1,3}\b|评分项|第\s{0,2}\d{1,3}\s{0,2}[项條条]")
_WORD = re.compile(r"[^\W\d_]{3,}|[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]{2,}")
_STOP_WORDS = """the and for with that this from into are was were been has have had its their there which
what when where who how all any each every some not but also than then they them these those our your you
its one two file files answer answers response output outputs text should must will can may does did done
name names named per item items criterion criteria rubric check checks result results status outcome outcomes
pass passed fail failed yes"""
_STOP = frozenset(_STOP_WORDS.split())  # words that name no item: grammar, and what every item says
_SUFFIXES = ("ing", "ed", "es", "s", "e")


def _stem(word: str) -> str:
    w = word.lower()
    for suffix in _SUFFIXES:
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            return w[:-len(suffix)]
    return w


def _cjk(word: str) -> bool:
    return not word.isascii() and any("\u3040" <= c <= "\ud7af" for c in word)


def _words(text: str) -> set[str]:
    """Content words of `text`, stemmed; a run of CJK characters as its character pairs."""
    out: set[str] = set()
    for w in _WORD.findall(text):
        if _cjk(w):
            out.update(w[i:i + 2] for i in range(len(w) - 1))
        elif w.lower() not in _STOP:
            out.add(_stem(w))
    return out


class ItemWords:
    """The content words of each of a task's grading items (rubric items, criteria)."""

    def __init__(self, items: Iterable[str]) -> None:
        self.items = [w for w in (_words(it) for it in items) if w]

    def named(self, label: str, strong: bool = False) -> bool:
        """Whether `label` names one of the items: by its number, or with content words of one
        item, two of them or all of that item's (`| alpha | PASS |` for "answer.md names
        `alpha`"), most of the label's own words when its verdict is a weak one (`yes`, `ok`:
        a row of a comparison table, `| Replication | yes |`, shares a word with an item and
        names none); any number of its own words beside them when the verdict is a grader's
        (`PASS`, `met`, `✅`: "the document correctly identifies omega as the last Greek letter")."""
        if _BY_NUMBER.search(label):
            return True
        words = _words(label)
        for item in self.items:
            shared = len(words & item)
            if shared and (shared >= 2 or shared == len(item)) and (strong or 2 * shared >= len(words)):
                return True
        return False


Reader = Callable[[str], tuple[str, list[int]]]
"""Text as a model reads it, with the index each character came from (`passages.skeleton`)."""


def _as_is(text: str) -> tuple[str, list[int]]:
    return text, list(range(len(text)))


_PLAIN = re.compile(r"[\x20-\x25\x27-\x3b\x3d-\x5b\x5d\x5e\x61-\x7d]*")
"""Printable ASCII a model reads as written (no `&`, `<`, `\\`, `_`, `` ` ``, `*`, `~`, `%`
escapes or marks): such a piece needs no reading."""


def _reading(text: str, read: Reader) -> tuple[str, list[int]]:
    return _as_is(text) if _PLAIN.fullmatch(text) else read(text)


Marks = tuple[str, list[tuple[int, int]], bool]
"""A marking line's label, the spans of its marks, and whether a mark is a grader's verdict."""


def _cell_marks(line: str, read: Reader) -> Marks | None:
    """A table row's label (its other cells), its verdict cells' spans in `line` (a cell that
    is a verdict, or that a grader's verdict leads with a few words: "PASS (verified)"), and
    whether one is a grader's verdict."""
    label: list[str] = []
    marks: list[tuple[int, int]] = []
    strong = False
    pos = 0
    for cell in line.split("|"):
        start, pos = pos, pos + len(cell) + 1
        plain, _ = _reading(cell, read)
        text = plain.strip()
        if not text:
            continue
        graders = _STRONG_LEAD.fullmatch(text)
        if graders is None and not _VERDICT_CELL.fullmatch(text):
            label.append(plain)
            continue
        # the whole cell: a verdict, or a verdict and the few words that vouch for it ("(verified)")
        marks.append((start + len(cell) - len(cell.lstrip()), start + len(cell.rstrip())))
        strong = strong or graders is not None
    return (" ".join(label), marks, strong) if marks else None


def _line_marks(line: str, read: Reader) -> Marks | None:
    """A marking line's label, the spans of its marks in `line` (a table row's verdict cells,
    a checklist's `[x]`, the verdict after "label: "), and whether one is a grader's verdict."""
    if line.count("|") >= 2:
        return _cell_marks(line, read)
    plain, origin = _reading(line, read)
    m = _CHECK_LINE.fullmatch(plain) or _TRAILING.fullmatch(plain)
    if m is None or not origin:
        return None
    s, e = m.span("mark")
    end = origin[e] if e < len(origin) else len(line)
    return m.group("label"), [(origin[s], end)], True


_LINE_BREAK = re.compile(r"\r?\n|(?:\\r)?\\n")


def _lines(text: str) -> Iterable[tuple[int, str]]:
    """Each line of `text` with where it starts; a JSON escape `\\n` breaks a line too (a
    transcript shows a tool call's arguments JSON-encoded, a file's table on one line)."""
    pos = 0
    for m in _LINE_BREAK.finditer(text):
        yield pos, text[pos:m.start()]
        pos = m.end()
    yield pos, text[pos:]


_ASKED = re.compile(r"(?i)\b(?:pass|met|yes)\s{0,3}/\s{0,3}(?:fail(?:ed)?|not\s+met|unmet|no)\b|check-?\s?list|"
                    r"self[-\s]?assess")


def asked_for(context: str, items: ItemWords) -> bool:
    """Whether the task's own text asks for verdicts on its items (a PASS/FAIL column, a
    checklist, a self-assessment) or holds such a line itself: then they are the answer's."""
    return bool(_ASKED.search(context)) or bool(item_marks(context, items))


def item_marks(text: str, items: ItemWords, read: Reader = _as_is) -> list[tuple[int, int]]:
    """The spans, in `text`, of the verdicts its lines give the task's own grading items: the
    `PASS` cells of a table row that names an item, a checklist's `[x]` before one, the `met`
    after "item: ". The row's words stay (they may be the answer itself); the verdict, which
    is the grader's to give, goes. `read` gives a piece of text as a model reads it."""
    spans: list[tuple[int, int]] = []
    for start, line in _lines(text):
        if len(line) > LINE_CHARS or not line.strip():
            continue
        found = _line_marks(line, read)
        if found is not None and items.named(found[0], strong=found[2]):
            spans.extend((start + s, start + e) for s, e in found[1])
    return spans
