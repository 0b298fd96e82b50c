"""Agent-controlled text in model prompts (judges, the LLM router): the cut, the boundary token, the fence, the note."""

from __future__ import annotations

import re

import pytest

from assay.llm import untrusted
from assay.llm.untrusted import ANSWER_CHARS, boundary, cut_text, fence, untrusted_note


def test_short_text_is_kept_whole() -> None:
    c = cut_text("hello", 10)
    assert c.text == "hello" and not c.was_cut
    assert c.info() == {"chars": 5, "shown": 5, "head": 5, "tail": 0, "left_out": 0}


def test_long_text_keeps_head_and_tail_and_says_how_much_was_cut() -> None:
    text = "H" * 500 + "M" * 9_000 + "T" * 500
    c = cut_text(text, 900)
    assert c.was_cut and c.head == 600 and c.tail == 300
    assert c.text.startswith("H" * 500 + "M" * 100) and c.text.endswith("T" * 300)
    assert "[... 9,100 characters of the middle cut by assay ...]" in c.text
    assert c.info() == {"chars": 10_000, "shown": 900, "head": 600, "tail": 300, "left_out": 9_100}
    assert len(c.text) < 1_000


def test_answer_limit_is_documented_size() -> None:
    c = cut_text("x" * 1_000_000, ANSWER_CHARS)
    assert ANSWER_CHARS == 60_000 and len(c.text) < ANSWER_CHARS + 100


def test_boundary_is_deterministic_per_text_and_differs_between_texts() -> None:
    a = boundary("task", ["answer one"])
    assert a == boundary("task", ["answer one"])  # a re-grade builds the same prompt: the cache hits
    assert re.fullmatch(r"[0-9a-f]{24}", a)
    assert a != boundary("task", ["answer two"])
    assert a != boundary("other task", ["answer one"])


def test_boundary_never_occurs_in_the_fenced_text(monkeypatch: pytest.MonkeyPatch) -> None:
    # With one-digit tokens and a text holding every hex digit but "f", only "f" is left.
    monkeypatch.setattr(untrusted, "TOKEN_HEX", 1)
    assert boundary("t", ["0123456789ABCDE"]) == "f"  # any letter case counts
    assert boundary("t", ["0123456789", "abcde"]) == "f"  # every fenced text counts


def test_fence_and_note() -> None:
    token = boundary("t", ["x"])
    assert fence("ANSWER", token, "x") == f"<<<ANSWER-{token}>>>\nx\n<<<END-ANSWER-{token}>>>"
    en = untrusted_note(token, ["ANSWER"])
    assert "untrusted" in en and f"<<<END-ANSWER-{token}>>>" in en and "never instructions" in en
    zh = untrusted_note(token, ["ANSWER", "FILE"], "zh")
    assert "不可信" in zh and "ANSWER, FILE" in zh
    assert "supported" not in en.lower()  # the meta-judge's key word stays out of rubric prompts
