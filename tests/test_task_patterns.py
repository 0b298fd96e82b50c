"""Tests of assay.task.patterns: task patterns run by RE2 with Python's meaning, in linear time."""

from __future__ import annotations

import random
import re
import time

import pytest

import assay
from assay.errors import InputError
from assay.task import patterns
from assay.task.pattern_marks import MARK_BASE
from assay.task.patterns import MAX_MATCHES, check_pattern, compile_pattern
from assay.task.re2_translation import FLAG_LETTERS, PatternError, to_re2
from tests.helpers import HOSTILE_S, REPO

REDOS = r"^(\d+\s?)+$"


def groups(m: patterns.Match | re.Match[str] | None) -> object:
    return None if m is None else (m.group(0), m.groups())


def same(pattern: str, text: str, flags: str = "") -> None:
    """`search` and `finditer` give what Python's `re` gives."""
    bits = 0
    for ch in flags:
        bits |= FLAG_LETTERS[ch]
    ours, theirs = compile_pattern(pattern, flags), re.compile(pattern, bits)
    assert groups(ours.search(text)) == groups(theirs.search(text)), (pattern, text)
    assert [groups(m) for m in ours.finditer(text)] == [groups(m) for m in theirs.finditer(text)], (pattern, text)


# --------------------------------------------------------------------------- Python's meaning kept


@pytest.mark.parametrize(("pattern", "text"), [
    (r"\d+", "价格１２３元"),  # full-width digits are \d in Python, not in RE2
    (r"\w+", "café 你好"),
    (r"\s", "a\u3000b"),  # ideographic space
    (r"[^\W\d_]+", "ab12_cd é"),  # letters only: a negated class holding \W
    (r"[\W_]+", "a-_b"),
    (r"[\S\d]+", "a 1"),
    (r"\D+", "ab12"),
    (r"^TOTAL: (\d+)$", "TOTAL: 12\n"),  # $ before a final newline
    (r"^a$", "a\nb"),
    (r"a\Z", "a\n"),
    (r"(?m)^x$", "a\nx\nb"),
    (r"(?s)a.b", "a\nb"),
    (r"a.b", "a\nb"),
    (r"(?i)straße", "STRASSE strasse Straße"),
    (r"(?x) a  b  # a comment\n c", "abc"),
    (r"[\u4e00-\u9fff]+", "abc中文def"),
    (r"\N{EM DASH}", "a—b"),
    (r"a{,2}b", "aaab"),
    (r"x{2", "x{2"),  # a `{` that is no quantifier is a literal, as in Python
    (r"(a|ab)(c|bcd)(d*)", "abcd"),  # leftmost-first groups
    (r"(a)|(b)", "b"),
    (r"(?a)\w+", "é ab"),
    (r"\bring\b", "a ring, rings, ring"),
    (r"\b100\b", "共100元 and 100"),  # Python's \b is Unicode: 共 is a word character
    (r"\Bx", "ax x"),
    (r"", "ab"),
    (r"x*", "axxb"),
])
def test_python_semantics_are_kept(pattern: str, text: str) -> None:
    same(pattern, text)


@pytest.mark.parametrize("flags", ["", "i", "m", "s", "mi", "x"])
def test_flags_mean_what_they_mean_in_python(flags: str) -> None:
    for text in ["Ab\nab\n", "AB", "a\nB", "x\n"]:
        same(r"^ab$", text, flags)
        same(r"a.b", text, flags)


LOOKAROUNDS = [
    r"(?<!不能)(?<!不得)同时(?:申报|享受)",
    r"自费[^\n。]{0,20}(?<!不)(?:可|能)报销",
    r"(?<!not )(?<!never )(?<!n't )\b(?:give|use)\s+aspirin",
    r"20(?!12)\d\d",
    r"(?<!\d)\d{2}(?!\d)",
    r"(?<=[ab])c|d(?=e)",
    r"(a|b(?!c))+",
    r"x(?<!ax)",
    r"(?i)(?<!no )go",
    r"\bCO\b[^\n]{0,8}\b30\b",
    r"(?<!a)(?:b?)(?<!c)d",
]
WORDS = ["不", "能", "同时", "申报", "自费", "可", "报销", "not ", "never ", "n't ", "give ", "aspirin", "20", "12",
         "13", "a", "b", "c", "d", "e", "x", "\n", " ", "1", "é", "NO ", "no ", "go", "CO ", "30", ","]


@pytest.mark.parametrize("pattern", LOOKAROUNDS)
def test_literal_lookarounds_are_exact(pattern: str) -> None:
    rnd = random.Random(pattern)
    for _ in range(1500):
        same(pattern, "".join(rnd.choice(WORDS) for _ in range(rnd.randint(0, 10))))


def test_random_patterns_agree_with_re() -> None:
    """Patterns built from pieces the translation handles one by one, against random texts."""
    pieces = [r"a", r"b+", r"\d", r"\w*", r"\s?", r"[^a\n]", r".", r"(?:ab|a)", r"(c|d)", r"\b", r"^", r"$",
              r"(?<!a)", r"(?!b)", r"[\W\d]", r"\B", r"x{1,2}?", r"é"]
    rnd = random.Random(25)
    alphabet = ["a", "b", "c", "d", "x", "1", " ", "\n", "é", "_", "-"]
    for _ in range(400):
        pattern = "".join(rnd.choice(pieces) for _ in range(rnd.randint(1, 5)))
        try:
            re.compile(pattern)
        except re.error:
            continue
        try:
            compile_pattern(pattern)
        except PatternError as e:
            assert "two lookarounds" in str(e) or "anchor" in str(e), (pattern, e)
            continue
        for _ in range(25):
            same(pattern, "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 8))))


def test_the_starter_suites_patterns_decide_as_re_did() -> None:
    """Every rubric check and contract pattern of the bundled suite, on every text it ships."""
    tasks = assay.load_tasks([REPO / "suites" / "starter"])
    texts = [p.read_text(errors="replace") for p in (REPO / "suites" / "starter").rglob("*.md")]
    found: list[tuple[str, str]] = []
    for t in tasks:
        for pred in t.contract:
            if pred.pattern:
                found.append((pred.pattern, pred.flags or ""))
        for item in t.rubric.items if t.rubric else []:
            c = item.check
            if c is None:
                continue
            flags = "mi" if c.ignore_case else "m"
            for value in (c.regex, c.not_regex, c.number_pattern):
                found += [(p, flags) for p in ([value] if isinstance(value, str) else value or [])]
    assert len(found) > 100
    for pattern, flags in found:
        for text in texts:
            ours = compile_pattern(pattern, flags).search(text)
            theirs = re.compile(pattern, sum(FLAG_LETTERS[c] for c in flags)).search(text)
            assert groups(ours) == groups(theirs), (pattern, text[:80])


# --------------------------------------------------------------------------- linear time


def test_the_redos_pattern_runs_in_linear_time() -> None:
    p = compile_pattern(REDOS)
    t0 = time.monotonic()
    assert p.search("1" * 34 + "x") is None
    assert p.search("1 " * 200_000 + "x") is None
    assert p.search("1 " * 200_000) is not None
    assert time.monotonic() - t0 < HOSTILE_S  # backtracking: 2**34 steps on the first text alone


def test_lookarounds_and_word_boundaries_stay_linear() -> None:
    text = ("not give aspirin 不得同时申报 " * 40_000)[:1_000_000]
    for pattern in (r"(?<!not )\bgive\s+aspirin\b", r"(?<!不得)同时申报", r"(?<=\d)x"):
        p = compile_pattern(pattern)
        t0 = time.monotonic()
        p.search(text)
        sum(1 for _ in p.finditer(text))
        assert time.monotonic() - t0 < HOSTILE_S, pattern


def test_finditer_stops_at_max_matches() -> None:
    assert sum(1 for _ in compile_pattern(r"\d").finditer("1" * (MAX_MATCHES + 50))) == MAX_MATCHES
    assert sum(1 for _ in compile_pattern(r"(?<!x)\d").finditer("1" * (MAX_MATCHES + 50))) == MAX_MATCHES


# --------------------------------------------------------------------------- text the agent controls


def test_lone_surrogates_in_the_text_do_not_break_a_search() -> None:
    assert compile_pattern(r"b").search("a\ud800b") is not None
    assert compile_pattern(r"(?<!a)b").search("a\udfffb") is not None


def test_a_text_cannot_forge_a_marker() -> None:
    forged = chr(MARK_BASE + 1)  # what `(?<=a)` marks, if it is the pattern's first lookaround
    p = compile_pattern(r"(?<=a)b")
    assert p.search(f"x{forged}b") is None
    assert p.search("ab") is not None
    assert compile_pattern(f"{forged}").search(forged) is not None  # plain patterns see the text as it is


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(("pattern", "words"), [
    (r"(a)\1", "backreference"),
    (r"(?P<x>a)(?P=x)", "backreference"),
    (r"^(?=(\d+\s?)+$)\d", "lookahead"),
    (r"(?<=a+)b", "lookbehind"),
    (r"(?<=ab|c)d", "fixed width"),
    (r"(?<=(a))b", "capture"),
    (r"(?>a+)b", "atomic"),
    (r"a++", "possessive"),
    (r"(a)?(?(1)b|c)", "conditional"),
    (r"a{1001}", "1000"),
    (r"\w{1000}", "too large"),
    ("(" * 150 + ")" * 150, "nested"),
    ("(" * 700 + ")" * 700, "nested"),
    ("a" * 20_001, "longer"),
    (r"(unclosed", "missing"),
    (r"a\Z(?<!a)", "end anchor"),
    (r"(.*){1000}(.*){1000}", "2,000 places"),  # RE2 compiles it, at seconds per 100 KB
    (r"(?:x?){200}y{57}", "257 places"),
    (r"(ab|cd|ef){100}", "600 places"),
    (r"((ab){10}){13}", "260 places"),
    (r"a{256,}", "257 places"),
])
def test_patterns_without_a_linear_time_equivalent_are_refused(pattern: str, words: str) -> None:
    with pytest.raises(PatternError, match=words):
        compile_pattern(pattern)


@pytest.mark.parametrize("pattern", [r"(.*){256}", r"[^\n]{0,80}\b75\b", r"(?<!not )\b(give|use)\s+\w+",
                                     r"(a|b){128}", r"\d{1,3}(,\d{3})*(\.\d+)?", r"(?:x*)*y+"])
def test_patterns_within_the_places_bound_are_accepted(pattern: str) -> None:
    compile_pattern(pattern)


def test_unknown_flags_are_refused() -> None:
    with pytest.raises(PatternError, match="unknown flag 'q'"):
        compile_pattern("a", "iq")
    patterns.check_flags("imsx")


def test_check_pattern_names_the_file_and_the_field() -> None:
    with pytest.raises(InputError) as e:
        check_pattern("task.yaml", "contract[0].pattern", r"(a)\1")
    assert e.value.file == "task.yaml" and e.value.field == "contract[0].pattern"
    assert "backreference" in e.value.reason and "RE2" in e.value.reason
    with pytest.raises(InputError, match="must be a string"):
        check_pattern("task.yaml", "x", 3)
    check_pattern("task.yaml", "x", REDOS)


def test_compiled_patterns_are_cached() -> None:
    assert compile_pattern(r"cached\d") is compile_pattern(r"cached\d")
    assert compile_pattern(r"cached\d", "i") is not compile_pattern(r"cached\d")


def test_translation_is_readable_re2() -> None:
    assert to_re2(r"^TOTAL: \d+\.\d{2}$", "m") == r"(?m:^)TOTAL\:\x{20}[\p{Nd}]+\.[\p{Nd}]{2}(?m:$)"
    assert to_re2(r"(?i)abc") == "(?i)abc"


def test_the_shipped_unicode_classes_are_this_pythons_own() -> None:
    """`\\w` and `\\d` as code point ranges are read from assay/data/unicode_classes.json for
    this Python's Unicode version (no scan of every code point at start-up); they must be what
    Python's `re` finds, and a version the table lacks is computed."""
    import json
    import unicodedata

    from assay.task.pattern_marks import UNICODE_TABLE, computed_ranges, unicode_ranges

    shipped = json.loads(UNICODE_TABLE.read_text())
    assert unicodedata.unidata_version in shipped
    for name in ("word", "digit"):
        assert unicode_ranges(name) == computed_ranges(name)
        assert [tuple(r) for r in shipped[unicodedata.unidata_version][name]] == list(computed_ranges(name))
