"""A contract's JSON Schema checked with its patterns run by RE2 (`assay.task.json_schemas`)."""

from __future__ import annotations

import time
from typing import Any

import jsonschema
import pytest

from assay.errors import InputError
from assay.task.json_schemas import check_task_schema, schema_patterns, validator
from tests.helpers import HOSTILE_S


def valid(schema: dict[str, Any], doc: Any) -> bool:
    return validator(schema).is_valid(doc)


SCHEMAS: list[tuple[dict[str, Any], list[Any]]] = [
    ({"type": "string", "pattern": r"^\d{3}-\w+$"}, ["123-ab", "12-ab", "123-", "١٢٣-x", 5]),
    ({"type": "object", "patternProperties": {r"^x_\d+$": {"type": "number"}}, "additionalProperties": False},
     [{"x_1": 1}, {"x_1": "a"}, {"y": 1}, {}, {"x_12": 2, "x_a": 3}]),
    ({"type": "object", "properties": {"a": {"type": "string"}}, "patternProperties": {"^b": {"type": "integer"}},
      "additionalProperties": {"type": "boolean"}},
     [{"a": "s", "b1": 2, "c": True}, {"c": 1}, {"bb": 1.5}, {"a": 1}]),
    ({"type": "array", "items": {"type": "string", "pattern": "(?i)^yes|no$"}}, [["YES", "no"], ["maybe"], []]),
    ({"propertyNames": {"pattern": "^[a-z]+$"}}, [{"ab": 1}, {"Ab": 1}]),
]


@pytest.mark.parametrize(("schema", "docs"), SCHEMAS)
def test_verdicts_equal_jsonschemas_own(schema: dict[str, Any], docs: list[Any]) -> None:
    """On patterns both engines run alike, RE2 gives the verdict jsonschema's `re` gives."""
    for doc in docs:
        assert valid(schema, doc) == jsonschema.validators.validator_for(schema)(schema).is_valid(doc), (schema, doc)


@pytest.mark.parametrize(("schema", "verdict"), [
    ({"type": "string", "pattern": "^(a+)+$"}, False),
    ({"type": "object", "patternProperties": {"^(a+)+$": {"type": "number"}}}, True),  # the key does not match
    ({"type": "object", "patternProperties": {"^(a+)+$": {}}, "additionalProperties": False}, False),
])
def test_catastrophic_patterns_run_in_linear_time(schema: dict[str, Any], verdict: bool) -> None:
    """`^(a+)+$` on 5,000 a's and a '!' takes Python's `re` forever; RE2 answers at once."""
    hostile = "a" * 5000 + "!"
    doc = hostile if schema["type"] == "string" else {hostile: "x"}
    t0 = time.monotonic()
    assert valid(schema, doc) is verdict
    assert time.monotonic() - t0 < HOSTILE_S


def test_schema_patterns_walks_keywords_not_names() -> None:
    schema = {"properties": {"pattern": {"type": "string", "pattern": "p1"},
                             "patternProperties": {"type": "object"}},
              "anyOf": [{"patternProperties": {"p2": {"not": {"pattern": "p3"}}}}],
              "$defs": {"d": {"items": {"pattern": "p4"}}}, "const": {"pattern": "not one"}}
    assert sorted(schema_patterns(schema)) == [
        ("schema.$defs.d.items.pattern", "p4"),
        ("schema.anyOf[0].patternProperties.p2", "p2"),
        ("schema.anyOf[0].patternProperties.p2.not.pattern", "p3"),
        ("schema.properties.pattern.pattern", "p1"),
    ]


@pytest.mark.parametrize(("schema", "field", "words"), [
    ({"properties": {"v": {"pattern": r"(\d+)\1"}}}, "contract[0].schema.properties.v.pattern", "backreference"),
    ({"properties": {"v": {"pattern": 7}}}, "contract[0].schema.properties.v.pattern", "must be a string"),
    ({"type": 5}, "contract[0].schema.type", "not a valid json schema"),
    ({"properties": {"v": {"minLength": -1}}}, "contract[0].schema.properties.v.minLength", "not a valid json schema"),
    ({"patternProperties": {"^a": {}}, "unevaluatedProperties": False}, "contract[0].schema", "unevaluatedproperties"),
])
def test_a_schema_the_harness_will_not_run_is_refused_with_its_field(schema: dict[str, Any], field: str,
                                                                     words: str) -> None:
    with pytest.raises(InputError) as e:
        check_task_schema("task.yaml", "contract[0].schema", schema)
    assert e.value.field == field and words in e.value.reason.lower(), (e.value.field, e.value.reason)


def test_a_sound_schema_is_accepted() -> None:
    for schema, _ in SCHEMAS:
        check_task_schema("task.yaml", "contract[0].schema", schema)
