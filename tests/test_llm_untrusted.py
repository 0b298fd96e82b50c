"""Agent-controlled text in model prompts (judges, the LLM router): the cut, the boundary token, the fence, the note."""

from __future__ import annotations

import re

import pytest

from assay.llm import untrusted
from assay.llm.untrusted import (
    ANSWER_TOKENS,
    boundary,
    cut_answer,
    cut_text,
    estimate_tokens,
    fence,
    untrusted_note,
)


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
    """An answer is cut to ANSWER_TOKENS estimated tokens: 60,000 ASCII characters, as before."""
    c = cut_answer("x" * 1_000_000)
    assert ANSWER_TOKENS == 15_000 and (c.head, c.tail) == (40_000, 20_000) and len(c.text) < 60_100
    assert cut_answer("x" * 60_000).was_cut is False and cut_answer("x" * 60_001).was_cut is True


def test_a_cjk_answer_is_cut_by_tokens_not_characters() -> None:
    """A CJK character is about a token, four ASCII ones about one: 60,000 CJK characters would
    be four times the tokens of 60,000 English ones, and overflow a judge that holds those."""
    assert estimate_tokens("abcd") == 1 and estimate_tokens("的的") == 2 and estimate_tokens("ab的") == 2
    c = cut_answer("我不知道。" + "的" * 70_000 + "完")
    assert (c.head, c.tail) == (10_000, 5_000) and c.text.startswith("我不知道。") and c.text.endswith("的完")
    assert c.info()["left_out"] == 70_006 - 15_000 and estimate_tokens(c.text) < ANSWER_TOKENS + 20
    mixed = cut_answer("a" * 40_000 + "的" * 10_000, 10_000)  # head: 26,666 token quarters of ASCII
    assert (mixed.head, mixed.tail) == (26_666, 3_333)
    assert cut_answer("的" * 100, 10).info() == {"chars": 100, "shown": 10, "head": 6, "tail": 4, "left_out": 90}


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
