"""Every JSON document a command writes has its schema in docs/schemas/, generated from the
model the command builds it from; a shipped file that no longer matches its model fails here."""

from __future__ import annotations

import json

import pytest

from assay.campaign.schemas import SCHEMA_DIR, SCHEMAS, schema, schema_file, schema_text
from tests.shipped_schemas import shipped_validator


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_each_shipped_schema_is_the_one_its_model_generates(name: str) -> None:
    assert schema_file(name).read_text(encoding="utf-8") == schema_text(name), \
        "run `python -m assay.campaign.schemas` to write them again"
    generated = schema(name)
    assert generated["$id"] == name
    assert generated["properties"]["schema"]["const"] == name  # a document names its own schema
    shipped_validator(name)  # and the file is a valid JSON Schema


def test_no_schema_file_is_left_without_a_model() -> None:
    assert sorted(p.name for p in SCHEMA_DIR.glob("*.json")) == sorted(schema_file(n).name for n in SCHEMAS)


def test_a_document_of_the_wrong_shape_is_refused() -> None:
    validator = shipped_validator("assay.dry-run/1")
    good = {"schema": "assay.dry-run/1", "campaign": "c",
            "agents": [{"agent": "a", "to_do": 1, "done": 0, "input_tokens": 0, "output_tokens": 0,
                        "cost_usd": None, "basis": []}]}
    assert not list(validator.iter_errors(good))
    for bad in ({**good, "schema": "assay.dry-run/2"}, {**good, "agents": [{"agent": "a"}]},
                {**good, "extra": 1}):
        assert list(validator.iter_errors(json.loads(json.dumps(bad))))
