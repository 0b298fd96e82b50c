"""Tests of assay.task.formats.yamlio: YAML task files read within limits (aliases, depth, size, digits)."""

from __future__ import annotations

import time

import pytest

from assay.errors import InputError
from assay.task.formats.yamlio import MAX_ALIAS_NODES, MAX_DEPTH, MAX_YAML_CHARS, load_yaml_text
from tests.helpers import HOSTILE_S


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    lines = ['  l0: &l0 ["lol"' + ', "lol"' * (width - 1) + "]"]
    lines += [f"  l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "scenario:\n variants:\n - name: base\n   params:\n" + "\n".join("   " + ln for ln in lines) + "\n"


def test_a_billion_laughs_is_refused_at_once_with_line_and_field() -> None:
    text = alias_bomb()
    assert len(text) < 1024
    t0 = time.monotonic()
    with pytest.raises(InputError) as e:
        load_yaml_text(text, "task.yaml")
    assert time.monotonic() - t0 < HOSTILE_S  # expanded, its 387 million nodes would take far longer
    assert e.value.file == "task.yaml" and e.value.line is not None and e.value.column is not None
    assert e.value.field is not None and e.value.field.startswith("scenario.variants[0].params.l")
    assert "alias" in e.value.reason and f"{MAX_ALIAS_NODES:,}" in e.value.reason


def test_aliases_of_a_big_string_are_refused_by_the_text_they_bring_in() -> None:
    """Few nodes, much text: aliases are counted by the characters they stand for too."""
    big = "x" * (MAX_YAML_CHARS // 3)
    text = "tags:\n  - &s " + big + "\n" + "  - *s\n" * 3
    assert len(text) < MAX_YAML_CHARS
    with pytest.raises(InputError) as e:
        load_yaml_text(text, "task.yaml")
    assert e.value.field == "tags[2]" and e.value.line == 4 and f"{MAX_YAML_CHARS:,} characters" in e.value.reason
    assert load_yaml_text("tags:\n  - &s " + big + "\n  - *s\n", "task.yaml")["tags"][1] == big


def test_anchors_used_for_shared_defaults_still_load() -> None:
    text = ("defaults: &d {tolerance: 0.01, relative: false}\n"
            "a: {<<: *d, number: 1}\nb: {<<: *d, number: 2}\nlist: &l [1, 2, 3]\nagain: *l\n")
    data = load_yaml_text(text, "task.yaml")
    assert data["a"] == {"tolerance": 0.01, "relative": False, "number": 1} and data["again"] == [1, 2, 3]


def test_a_cycle_of_aliases_is_refused() -> None:
    with pytest.raises(InputError, match="cycle") as e:
        load_yaml_text("a: &a [1, *a]\n", "task.yaml")
    assert e.value.field == "a[1]"


@pytest.mark.parametrize("text", [
    "x: " + "[" * 200_000 + "]" * 200_000 + "\n",
    "x: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n",
    "".join(" " * i + f"k{i}:\n" for i in range(MAX_DEPTH + 5)) + " " * (MAX_DEPTH + 5) + "v\n",
])
def test_deep_nesting_is_refused_fast(text: str) -> None:
    t0 = time.monotonic()
    with pytest.raises(InputError, match=f"nested deeper than {MAX_DEPTH}"):
        load_yaml_text(text, "task.yaml")
    assert time.monotonic() - t0 < HOSTILE_S


def test_nesting_up_to_the_limit_loads() -> None:
    assert load_yaml_text("x: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "\n", "t.yaml") is not None


def test_a_huge_integer_is_refused_with_its_line() -> None:
    with pytest.raises(InputError) as e:
        load_yaml_text("a: 1\nn: " + "7" * 50_000 + "\n", "task.yaml")
    assert e.value.line == 2 and "4,300 digits" in e.value.reason


def test_an_oversized_document_is_refused_unparsed() -> None:
    with pytest.raises(InputError, match="characters of YAML"):
        load_yaml_text("a: " + "x" * MAX_YAML_CHARS + "\n", "task.yaml")


def test_parse_errors_keep_their_line_and_column() -> None:
    with pytest.raises(InputError) as e:
        load_yaml_text("a: [1, 2\n", "task.yaml")
    assert e.value.line == 2 and "does not parse as YAML" in e.value.reason
    with pytest.raises(InputError, match="undefined alias"):
        load_yaml_text("a: *nope\n", "task.yaml")
