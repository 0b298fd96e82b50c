"""The report's models and its shipped JSON Schema (issue 26, part 2): the schema in docs/ is
the one the models generate, and every report `assay report --json` writes over a varied store
(all kinds, labels, broken tasks, shared tasks, filters) validates against it and against the
models, which refuse any key they do not name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from assay.report.build import stored_report
from assay.report.model import SCHEMA, Compare, Report
from assay.store import Store
from tests.report_golden import CASES, build_store, run_case
from tests.shipped_schemas import shipped_validator


def _validator(name: str = SCHEMA) -> Any:
    return shipped_validator(name)


@pytest.mark.parametrize("case", ["compare", "compare_against"])
def test_assay_compare_json_validates_against_its_schema_and_model(golden_store: Path, tmp_path: Path,
                                                                   case: str) -> None:
    cmp = json.loads(run_case(case, golden_store, tmp_path)[f"{case}.json"])
    assert not [e.message for e in _validator("assay.compare/1").iter_errors(cmp)]
    assert Compare.model_validate(cmp).overall.n == cmp["overall"]["n"] > 0


@pytest.fixture(scope="module")
def golden_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_store(tmp_path_factory.mktemp("model") / "store")


@pytest.mark.parametrize("case", [c for c in sorted(CASES) if any(a.endswith(".json") for a in CASES[c])
                                  and CASES[c][0] == "report"])
def test_assay_report_json_validates_against_the_schema_and_the_models(golden_store: Path, tmp_path: Path,
                                                                       case: str) -> None:
    (name, text), = ((n, t) for n, t in run_case(case, golden_store, tmp_path).items() if n.endswith(".json"))
    rep = json.loads(text)
    errors = [e.message for e in _validator().iter_errors(rep)]
    assert not errors, f"{case}: {errors[:5]}"
    model = Report.model_validate(rep)
    assert model.schema_ == SCHEMA and len(model.agents) == len(rep["agents"]) > 0
    assert any(a.rubric is not None and a.rubric.tags for a in model.agents)


def test_the_html_reports_rows_and_skipped_files_validate(golden_store: Path) -> None:
    """The HTML's runs table rows (`details="table"`) and `skipped` rows fit the models too."""
    with Store(f"sqlite:///{golden_store / 'assay.db'}") as st:
        rep = stored_report(st, "c", details="table",
                                  skipped=[{"file": "t.yaml", "field": "prompt", "reason": "missing", "line": 3,
                                            "column": None}])
    assert rep["runs"] and not [e.message for e in _validator().iter_errors(rep)]
    assert Report.model_validate(rep).skipped[0].field == "prompt"


def test_a_key_the_models_do_not_name_is_refused(golden_store: Path) -> None:
    with Store(f"sqlite:///{golden_store / 'assay.db'}") as st:
        rep = stored_report(st, "c")
    rep["agents"][0]["rubric"]["surprise"] = 1.0
    with pytest.raises(ValidationError, match="surprise"):
        Report.model_validate(rep)
    assert list(_validator().iter_errors(rep)), "the schema refuses it too"
