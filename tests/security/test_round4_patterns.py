"""Round 4 red team, class 3 (task-supplied patterns in linear time): linear in the text, but
with a factor the task chooses.

RE2 runs in time proportional to the text's length times the pattern's program size, and the
checks at validation (no repetition over 1,000, a program within 8 MiB) still let a pattern
of 21 characters, `(.*){1000}(.*){1000}`, take minutes on a few MB (about 6 s per 100 KB
here). In a contract predicate or a rubric check that costs a worker its 30 s limit (a
scored fault for whoever wrote a big file); in a scenario's truth framing, which
`grade/kpi.py::framing` runs on the event loop (`grade/grader.py::_scenario` calls
`score_scenario` directly), it holds every run of the campaign."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from assay.task.patterns import compile_pattern
from tests.helpers import answer_task, assay

pytestmark = pytest.mark.slow

SLOW = r"(.*){1000}(.*){1000}"


def test_control_the_classic_redos_pattern_is_fast_on_re2() -> None:
    t0 = time.monotonic()
    assert compile_pattern(r"^(\d+\s?)+$").search("1" * 100_000 + "x") is None
    assert time.monotonic() - t0 < 1.0


def test_a_pattern_whose_cost_per_character_is_thousands_is_refused_or_fast(tmp_path: Path) -> None:
    folder = answer_task(tmp_path / "t")
    text = (folder / "task.yaml").read_text().replace("pattern: ^42\\s*$", f"pattern: '{SLOW}'")
    assert SLOW in text
    (folder / "task.yaml").write_text(text)
    r = assay("validate", str(folder), cwd=tmp_path)
    assert "Traceback" not in r.stderr
    if r.returncode == 2:  # refused at validation, naming the field: what a correct harness may do
        assert "contract[0]" in r.stderr
        return
    t0 = time.monotonic()
    compile_pattern(SLOW).search("x" * 100_000 + "!")
    assert time.monotonic() - t0 < 1.0, "accepted, and 100 KB takes seconds"
