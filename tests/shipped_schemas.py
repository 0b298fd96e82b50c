"""Validation of a command's JSON output against the schema assay ships for it (by the
document's own `schema` field), for the tests that drive those commands."""

from __future__ import annotations

import json
from typing import Any

from jsonschema.validators import validator_for

from assay.campaign.schemas import SCHEMAS, schema_file


def shipped_validator(name: str) -> Any:
    """A validator for the shipped schema file of `name`, the schema itself checked first."""
    shipped = json.loads(schema_file(name).read_text(encoding="utf-8"))
    cls = validator_for(shipped)
    cls.check_schema(shipped)
    return cls(shipped)


def schema_errors(doc: dict[str, Any]) -> list[str]:
    """What is wrong with `doc` by its shipped schema and by its model ([] if nothing)."""
    name = doc.get("schema")
    assert name in SCHEMAS, f"no shipped schema named {name!r}"
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in shipped_validator(name).iter_errors(doc)]
    SCHEMAS[name].model_validate(doc)  # raises on what the schema lets through and the model does not
    return errors
