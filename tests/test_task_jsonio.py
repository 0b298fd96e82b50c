"""Tests of assay.task.formats.jsonio: JSON from task and result files, read within limits."""

from __future__ import annotations

import random
import time

import pytest

from assay.errors import InputError
from assay.jsonlimits import MAX_DEPTH, deep_at
from assay.task.formats.jsonio import JSONSyntaxError, loads_json, loads_jsonl_line
from tests.helpers import HOSTILE_S


def reference_depth_at(text: str, limit: int) -> int | None:
    """The same scan, one character at a time."""
    level, in_string, escaped = 0, False, False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            level += 1
            if level > limit:
                return i
        elif ch in "]}" and level:
            level -= 1
    return None


def test_deep_at_agrees_with_a_character_by_character_scan() -> None:
    rnd = random.Random(7)
    for _ in range(20_000):
        text = "".join(rnd.choice('[]{}"\\a\n') for _ in range(rnd.randint(0, 30)))
        assert deep_at(text, 3) == reference_depth_at(text, 3), text


@pytest.mark.parametrize("text", [
    '"' + '\\"' * 200_000,  # an unterminated string of escaped quotes: a naive regex rescans it from each quote
    "a" * 5_000_000,
    '["' + "a" * 5_000_000 + "]",
    "[]" * 1_000_000,
    '"' + "\\" * 1_000_001,
])
def test_deep_at_is_linear_on_texts_that_trap_a_regex(text: str) -> None:
    t0 = time.monotonic()
    assert deep_at(text) is None
    assert time.monotonic() - t0 < HOSTILE_S  # a regex's rescans from each quote: hours


def test_brackets_in_strings_do_not_count() -> None:
    assert deep_at('{"a": "' + "[" * 1000 + '"}') is None
    assert loads_json('{"a": "' + "[" * 1000 + '"}', "f.json") == {"a": "[" * 1000}


def test_too_deep_is_refused_with_the_line_and_column_before_parsing() -> None:
    text = '{\n  "x": ' + "[" * 200_000 + "]" * 200_000 + "}"
    t0 = time.monotonic()
    with pytest.raises(InputError) as e:
        loads_json(text, "people.json", field="scenario.stakeholders")
    assert time.monotonic() - t0 < HOSTILE_S
    assert (e.value.file, e.value.field, e.value.line, e.value.column) == ("people.json", "scenario.stakeholders", 2,
                                                                           7 + MAX_DEPTH)  # `{` is a level
    assert "nested deeper than 64" in e.value.reason
    assert loads_json("[" * MAX_DEPTH + "]" * MAX_DEPTH, "f.json") is not None


def test_a_huge_integer_is_refused() -> None:
    with pytest.raises(InputError, match="more than 4,300 digits"):
        loads_json('{"n": ' + "7" * 50_000 + "}", "f.json")
    with pytest.raises(InputError, match="past a float's range"):  # no weight, score or count is that wide
        loads_json('{"n": ' + "7" * 4000 + "}", "f.json")
    assert loads_json('{"n": ' + "7" * 300 + "}", "f.json")["n"] > 0


def test_non_finite_numbers_are_refused_when_asked() -> None:
    assert loads_json("[NaN]", "f.json") != [0]  # accepted by default (task validation reports the field)
    for text in ("[NaN]", "[Infinity]", "[-Infinity]", "[1e999]"):
        with pytest.raises(InputError, match="not a finite number"):
            loads_json(text, "f.json", finite=True)
    assert loads_json("[1.5, 2]", "f.json", finite=True) == [1.5, 2]


def test_a_syntax_error_names_line_and_column() -> None:
    with pytest.raises(JSONSyntaxError) as e:
        loads_json('{\n "a": }', "f.json")
    assert (e.value.line, e.value.column) == (2, 7) and "line 2, column 7" in e.value.reason
    with pytest.raises(JSONSyntaxError) as e:
        loads_jsonl_line('{"a": }', "rows.jsonl", 12)
    assert e.value.line == 12


def test_size_and_encoding() -> None:
    with pytest.raises(InputError, match="more than the 10 read"):
        loads_json("[" + "1," * 10 + "1]", "f.json", max_chars=10)
    assert loads_json('\ufeff{"a": 1}'.encode("utf-8"), "f.json") == {"a": 1}
    assert loads_json('{"a": "é"}'.encode("utf-16"), "f.json") == {"a": "é"}
    with pytest.raises(InputError, match="not UTF-8"):
        loads_json(b'{"a": "\xff"}', "f.json")
