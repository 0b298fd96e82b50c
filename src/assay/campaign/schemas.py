"""The JSON Schemas assay ships, one per versioned JSON document (one with a `schema` field) a
command writes, each generated from the pydantic model that document is built from, so the
file in docs/schemas/ and the output cannot drift apart (tests/test_schemas.py checks both). `python -m assay.campaign.schemas`
writes them all again after a model changes.

It sits in the campaign layer because it names models of the layers below it (report, grade,
campaign) and nothing else imports it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from assay.campaign.service import DryRun
from assay.grade.calibration import Calibration
from assay.report.model import Compare, Noise, Report

__all__ = ["SCHEMAS", "SCHEMA_DIR", "schema", "schema_file", "schema_text", "write_all"]

SCHEMAS: dict[str, type[BaseModel]] = {
    "assay.report/1": Report,  # assay report --json, assay run --json
    "assay.compare/1": Compare,  # assay compare --json
    "assay.calibration/1": Calibration,  # assay calibrate --json
    "assay.dry-run/1": DryRun,  # assay run --dry-run --json
    "assay.noise/1": Noise,  # assay noise --json
}
"""Every shipped schema's id (the document's own `schema` field) and the model behind it."""

SCHEMA_DIR = Path(__file__).resolve().parents[3] / "docs" / "schemas"
"""Where the repository ships them."""


def schema(name: str) -> dict[str, Any]:
    """The JSON Schema of the document `name` (a key of SCHEMAS), with `$id` set to it."""
    generated = SCHEMAS[name].model_json_schema(by_alias=True)
    generated["$id"] = name
    return generated


def schema_file(name: str) -> Path:
    """`assay.report/1` ships as docs/schemas/assay.report-1.json."""
    return SCHEMA_DIR / (name.replace("/", "-") + ".json")


def schema_text(name: str) -> str:
    """A schema as its file ships it."""
    return json.dumps(schema(name), indent=2, sort_keys=True) + "\n"


def write_all() -> list[Path]:
    """Write every schema file; the paths written."""
    SCHEMA_DIR.mkdir(parents=True, exist_ok=True)
    written = []
    for name in SCHEMAS:
        path = schema_file(name)
        path.write_text(schema_text(name), encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    for written_path in write_all():
        print(written_path)
