"""Today's report equals the report of before issue 26 (the forked, summary-reading path): the
golden outputs in tests/fixtures/report_golden were written by that code over the varied store
of `tests.report_golden` (all three kinds, epochs, void and re-run attempts, a broken task,
labels, people, search modes, two campaigns); every case is run again through the CLI here.
JSON files compare value by value (floats to 1e-9 relative: sums in another order), text
(terminal, Markdown, CSV, warnings) exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.report_golden import CASES, GOLDEN, build_store, run_case, same


@pytest.fixture(scope="module")
def golden_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_store(tmp_path_factory.mktemp("golden") / "store")


@pytest.mark.parametrize("case", sorted(CASES))
def test_report_equals_the_golden_outputs(golden_store: Path, tmp_path: Path, case: str) -> None:
    got = run_case(case, golden_store, tmp_path)
    want = {p.name.removeprefix(f"{case}."): p.read_text() for p in GOLDEN.glob(f"{case}.*")}
    assert sorted(got) == sorted(want)
    for name, text in want.items():
        if name.endswith(".json"):
            diffs = same(json.loads(got[name]), json.loads(text))
            assert not diffs, f"{case} {name}: " + "; ".join(diffs[:20])
        else:
            assert got[name] == text, f"{case} {name} differs"
