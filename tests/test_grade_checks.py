"""Tests of the deterministic rubric item checks (assay.grade.checks)."""

from __future__ import annotations

import pytest

from assay.grade.checks import count_words, evaluate_check, find_headings
from assay.grade.numbers import parse_numbers
from assay.task.model import MachineCheck


def check(**kw: object) -> MachineCheck:
    return MachineCheck(**kw)


# ---------------------------------------------------------------- regex / not_regex

def test_regex_met_and_unmet() -> None:
    assert evaluate_check(check(regex=r"net pay"), "Your NET PAY is 100")[0]
    met, reason = evaluate_check(check(regex=r"gross pay"), "Your net pay is 100")
    assert not met
    assert "regex" in reason and "gross pay" in reason


def test_regex_list_needs_every_pattern() -> None:
    c = check(regex=[r"\bapple\b", r"\bpear\b"])
    assert evaluate_check(c, "apple and pear")[0]
    assert not evaluate_check(c, "apple only")[0]


def test_regex_case_sensitive_when_asked() -> None:
    c = check(regex=r"IRS", ignore_case=False)
    assert evaluate_check(c, "file with the IRS")[0]
    assert not evaluate_check(c, "file with the irs")[0]


def test_regex_is_multiline() -> None:
    assert evaluate_check(check(regex=r"^Total$"), "line\nTotal\nmore")[0]


def test_not_regex() -> None:
    c = check(not_regex=[r"guarantee", r"risk[- ]free"])
    assert evaluate_check(c, "returns are uncertain")[0]
    met, reason = evaluate_check(c, "a risk-free return")
    assert not met
    assert "not_regex" in reason


def test_invalid_regex_raises() -> None:
    with pytest.raises(ValueError, match="invalid regex"):
        evaluate_check(check(regex="("), "x")


# ---------------------------------------------------------------- numbers

@pytest.mark.parametrize(("text", "expected"), [
    ("1,234.5", [1234.5]),
    ("１２，３４５", [12345.0]),
    ("１２．５％", [12.5]),
    ("12.5%", [12.5]),
    ("-42 and −7 and －3", [-42.0, -7.0, -3.0]),
    ("3.2万元", [32000.0]),
    ("3.2 万元", [3.2]),
    ("1.5亿", [150000000.0]),
    ("2024-05-01", [2024.0, 5.0, 1.0]),
    ("10-20 units", [10.0, 20.0]),
    ("$1,234,567", [1234567.0]),
    ("1,2345", [1.0, 2345.0]),
    ("version 1.2.3", [1.2, 3.0]),
    ("no digits here", []),
])
def test_parse_numbers(text: str, expected: list[float]) -> None:
    assert parse_numbers(text) == pytest.approx(expected)


def test_number_absolute_tolerance() -> None:
    c = check(number=1234.5, tolerance=1)
    assert evaluate_check(c, "The total is $1,235.")[0]
    met, reason = evaluate_check(c, "The total is $1,240.")
    assert not met
    assert "1,234.5" in reason and "1,240" in reason


def test_number_exact_default() -> None:
    assert evaluate_check(check(number=12.5), "rate 12.5%")[0]
    assert not evaluate_check(check(number=12.5), "rate 12.6%")[0]


def test_number_relative_tolerance() -> None:
    c = check(number=10000, tolerance=0.01, relative=True)
    assert evaluate_check(c, "about 10,090")[0]
    assert not evaluate_check(c, "about 10,200")[0]


def test_number_chinese_multiplier() -> None:
    assert evaluate_check(check(number=32000), "年度应纳税额约3.2万元")[0]
    assert not evaluate_check(check(number=32000), "约 3.2 万元")[0]


def test_number_negative() -> None:
    assert evaluate_check(check(number=-5), "change: −5%")[0]
    assert not evaluate_check(check(number=-5), "range 0-5")[0]


def test_number_pattern_reads_only_captured_group() -> None:
    c = check(number=300, number_pattern=r"tax due[^0-9]*([0-9,.]+)")
    assert evaluate_check(c, "Income 300. Tax due: 450")[0] is False
    assert evaluate_check(c, "Income 900. Tax due: $300")[0]
    met, reason = evaluate_check(c, "Income 300 only")
    assert not met and "number_pattern" in reason


def test_number_pattern_without_group_uses_whole_match() -> None:
    c = check(number=4, number_pattern=r"\d+\s*g/day")
    assert evaluate_check(c, "max 4 g/day, tablets 500 mg")[0]


def test_number_pattern_alone_requires_a_number() -> None:
    c = check(number_pattern=r"dose:\s*(\S+)")
    assert evaluate_check(c, "dose: 5mg")[0]
    assert not evaluate_check(c, "dose: none")[0]


# ---------------------------------------------------------------- headings

def test_headings_forms() -> None:
    answer = "# Summary\nRisks:\n**Next Steps**\n## 2. Calculation\n税额计算：\n"
    c = check(headings=["summary", "Risks", "next steps", "Calculation", "税额计算"])
    assert evaluate_check(c, answer)[0]


def test_heading_missing_and_plain_line_not_heading() -> None:
    met, reason = evaluate_check(check(headings=["Summary", "Risks"]), "Summary\n# Risks\n")
    assert not met
    assert "Summary" in reason and "Risks" not in reason.split("missing")[1]


def test_heading_must_equal_not_contain() -> None:
    assert not evaluate_check(check(headings=["Risks"]), "## Risks and returns")[0]
    assert not evaluate_check(check(headings=["Risks"]), "- **Risks** are high")[0]


def test_find_headings() -> None:
    assert find_headings("## Plan ##\n**Bold**:\nnot a heading\n一、概述：") == {"plan", "bold", "概述"}


# ---------------------------------------------------------------- length

def test_chars_bounds_use_stripped_answer() -> None:
    assert evaluate_check(check(min_chars=3, max_chars=3), "   abc \n")[0]
    met, reason = evaluate_check(check(min_chars=5), "abc")
    assert not met and "min_chars" in reason
    met, reason = evaluate_check(check(max_chars=2), "abc")
    assert not met and "max_chars" in reason


def test_count_words_cjk() -> None:
    assert count_words("hello world") == 2
    assert count_words("你好世界") == 4
    assert count_words("你好，世界") == 4
    assert count_words("用GPT-4计算 ok") == 5
    assert count_words("   ") == 0


def test_words_bounds() -> None:
    assert evaluate_check(check(min_words=4, max_words=4), "经济补偿 ")[0]
    met, reason = evaluate_check(check(max_words=3), "one two three four")
    assert not met and "max_words" in reason
    met, reason = evaluate_check(check(min_words=3), "one two")
    assert not met and "min_words" in reason


# ---------------------------------------------------------------- combined

def test_combined_conditions_all_must_hold() -> None:
    c = check(regex=r"severance", not_regex=r"\bguarantee", number=45000, tolerance=1,
              headings=["Answer"], min_words=5)
    good = "## Answer\nThe severance due is 45,000 CNY in total."
    assert evaluate_check(c, good) == (True, "all conditions hold")
    met, reason = evaluate_check(c, good + " We guarantee it.")
    assert not met and reason.startswith("not_regex")
    met, reason = evaluate_check(c, "## Answer\nThe severance due is 40,000 CNY in total.")
    assert not met and "45,000" in reason


def test_reports_every_failed_condition() -> None:
    met, reason = evaluate_check(check(regex="x", min_chars=100), "y")
    assert not met
    assert "regex" in reason and "min_chars" in reason and reason.endswith(".")


def test_empty_check_is_vacuously_met() -> None:
    assert evaluate_check(check(), "") == (True, "all conditions hold")


def test_negative_item_semantics_met_means_bad_behaviour() -> None:
    fabricated = check(regex=r"Article 99\b")
    assert evaluate_check(fabricated, "Under Article 99 the employer must pay.")[0]
    assert not evaluate_check(fabricated, "")[0]
    overdose = check(number=8, tolerance=3.5, number_pattern=r"(\d+(?:\.\d+)?)\s*g\s*(?:per|a|/)\s*day")
    assert evaluate_check(overdose, "take up to 6 g per day")[0]
    assert not evaluate_check(overdose, "never exceed 4 g per day; tablets are 500 mg")[0]


@pytest.mark.parametrize("hidden", ["as\u200bpirin", "\u0430spirin", "as&shy;pirin", "a s p i r i n", "as**pi**rin"])
def test_a_penalty_or_a_not_regex_sees_through_what_a_reader_reads_through(hidden: str) -> None:
    """A word hidden from the pattern and not from a reader (a zero-width space, a Cyrillic а,
    a soft hyphen, spaced-out letters, emphasis inside the word) still hits a penalty checked by
    regex and still fails a `not_regex` (round 11); a positive regex is looked for as written."""
    from assay.grade.rubric import machine_verdicts
    from assay.task.model import Rubric, RubricItem, Task

    task = Task(id="t", prompt="p", rubric=Rubric(items=[
        RubricItem(id="good", text="names Canberra", weight=5, tag="FI", check=MachineCheck(regex="Canberra")),
        RubricItem(id="bad", text="recommends aspirin", weight=-5, tag="SF", check=MachineCheck(regex="aspirin")),
        RubricItem(id="clean", text="never says aspirin", weight=2, tag="SF", check=MachineCheck(not_regex="aspirin")),
    ]))
    got = machine_verdicts(task, f"Canberra. Take {hidden} daily.")
    assert (got["good"].hit, got["bad"].hit, got["clean"].hit) == (True, True, False), got
    honest = machine_verdicts(task, "Canberra. Take paracetamol daily.")
    assert (honest["good"].hit, honest["bad"].hit, honest["clean"].hit) == (True, False, True)
