"""The DareBench reader: fixture round trips, workload cells, implicit contracts, refusals."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from assay.errors import InputError
from assay.task import discover as discover_mod
from assay.task.formats.darebench import CELL_MAP_TABLE1, CELL_MAP_TABLE9, read_darebench
from assay.task.model import TOOL_NAMES
from tests.helpers import assay

ROOT = Path(__file__).resolve().parent
TASKS = ROOT / "fixtures" / "darebench" / "tasks"
ASSETS = ROOT / "fixtures" / "darebench" / "assets"
BAD = ROOT / "fixtures" / "bad" / "darebench"


def one(name: str):
    tasks = read_darebench(TASKS / name)
    assert len(tasks) == 1
    return tasks[0]


def test_finqa_hybrid_fenced_prompt() -> None:
    t = one("task_finqa_00.md")
    assert t.id == "task_finqa_00"
    assert t.source == "darebench"
    assert t.title.startswith("FinQA")
    # The ~~~text fence is stripped, and a '## ' line inside it did not split the body.
    assert not t.prompt.startswith("~~~")
    assert t.prompt.startswith("Net revenue analysis")
    assert "## Output requirements" in t.prompt
    assert t.prompt.rstrip().endswith("(prefer a single concise line).")
    assert t.budget.minutes == pytest.approx(8.0)
    assert t.tools == list(TOOL_NAMES)
    assert t.workspace == []
    assert (t.modality, t.execution) == ("text", "multi-step")
    g = t.grading
    assert g is not None
    assert (g.type, g.weight_automated, g.weight_judge) == ("hybrid", 0.6, 0.4)
    assert g.checks_style == "darebench"
    assert "def grade(transcript: list, workspace_path: str)" in (g.checks_code or "")
    assert "```" not in (g.checks_code or "")
    assert g.criteria == ["answer_correct: Model answer matches the reference (1.0) or not (0.0)",
                          "concise: The answer file holds the answer only"]
    assert g.judge_rubric is not None and "Reference answer: 94" in g.judge_rubric
    assert g.expected_behavior is not None and g.expected_behavior.startswith("The agent uses only")
    assert t.metadata["category"] == "finqa"
    assert t.metadata["level"] == "L2"
    assert t.metadata["source_benchmark"] == "finqa"
    assert "Written for assay" in t.metadata["notes"]
    assert t.levels == []  # DareBench's level is metadata only
    # Implicit artifact contract: answer.txt, not required (the check falls back to the last message).
    assert [(p.path, p.predicate, p.required) for p in t.contract] == [("answer.txt", "exists", False)]
    assert t.kinds == ["contract"]
    assert t.content_hash


def test_logiqa_automated_only() -> None:
    t = one("task_logiqa_00.md")
    assert (t.modality, t.execution) == ("text", "single-step")
    assert t.grading is not None and t.grading.type == "automated"
    assert (t.grading.weight_automated, t.grading.weight_judge) == (1.0, 0.0)
    assert t.grading.judge_rubric == "- answer_correct: answer.txt holds C"  # upstream's criteria fallback
    assert t.metadata["level"] is None
    assert t.requirements == []
    assert t.search == "none"
    # "Save your answer to answer.txt" (no backticks) is found too.
    assert [p.path for p in t.contract] == ["answer.txt"]
    assert t.budget.minutes == pytest.approx(2.0)


def test_agentvista_multimodal_assets_and_requirements() -> None:
    t = one("task_agentvista_00.md")
    assert (t.modality, t.execution) == ("multimodal", "multi-step-with-tools")
    assert len(t.workspace) == 1
    wf = t.workspace[0]
    assert wf.path == "image.png"
    assert wf.source == (ASSETS / "agentvista" / "00_0.png").resolve()
    assert wf.source.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert t.images == [wf.source]
    assert t.requirements == ["web_search"]
    assert t.search == "live"
    # image.png is an input, so only answer.txt is an output.
    assert [p.path for p in t.contract] == ["answer.txt"]
    assert t.grading is not None
    assert (t.grading.type, t.grading.weight_automated, t.grading.weight_judge) == ("hybrid", 0.2, 0.8)
    assert t.grading.criteria[0].startswith("**answer_written**")


def test_advancedif_content_files_and_zero_judge_weight() -> None:
    t = one("task_advancedif_00.md")
    assert [(w.path, w.content) for w in t.workspace] == [
        ("style.md", "Rules: exactly two lines, no more.\n"), ("notes/topic.txt", "autumn")]
    assert all(w.source is None for w in t.workspace)
    g = t.grading
    assert g is not None
    # hybrid with llm_judge: 0.0 is graded by its checks alone: no judge needed.
    assert (g.type, g.weight_automated, g.weight_judge) == ("automated", 1.0, 0.0)
    assert t.metadata["grading_type"] == "hybrid"
    assert [p.path for p in t.contract] == ["poem.txt"]
    assert t.images == []


def test_planner_sees_requirement_names() -> None:
    from assay.agent.search import search_skip_reason

    t = one("task_agentvista_00.md")
    assert t.requirements == ["web_search"] and t.search == "live"
    assert "needs web_search" in str(search_skip_reason(t, "off", "model"))
    assert search_skip_reason(t, "brave", "model") is None


def test_discover_finds_every_fixture() -> None:
    tasks = discover_mod.discover([TASKS.parent])
    assert sorted(t.id for t in tasks) == ["task_advancedif_00", "task_agentvista_00", "task_finqa_00",
                                           "task_logiqa_00"]


def _write(tmp: Path, name: str, front: str, body: str | None = None) -> Path:
    body = body if body is not None else (
        "\n## Prompt\n\nWrite the answer to `out.txt`.\n\n## Automated Checks\n\n```python\n"
        "def grade(transcript, workspace_path):\n    return {'ok': 1.0}\n```\n")
    p = tmp / name
    p.write_text(f"---\n{front}---\n{body}", encoding="utf-8")
    return p


def test_cell_tables_and_env_switch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert CELL_MAP_TABLE1["charxiv"] == ("multimodal", "single-step")
    assert CELL_MAP_TABLE1["hle"] == ("multimodal", "multi-step")
    assert CELL_MAP_TABLE9["charxiv"] == CELL_MAP_TABLE1["hle"]
    assert CELL_MAP_TABLE9["hle"] == CELL_MAP_TABLE1["charxiv"]
    assert {k: v for k, v in CELL_MAP_TABLE9.items() if k not in ("charxiv", "hle")} == \
        {k: v for k, v in CELL_MAP_TABLE1.items() if k not in ("charxiv", "hle")}
    assert len(CELL_MAP_TABLE1) == 22
    f = _write(tmp_path, "task_charxiv_03.md", "id: task_charxiv_03\ngrading_type: automated\n")
    monkeypatch.setenv("ASSAY_DAREBENCH_CELLS", "table1")
    assert (read_darebench(f)[0].modality, read_darebench(f)[0].execution) == ("multimodal", "single-step")
    monkeypatch.setenv("ASSAY_DAREBENCH_CELLS", "table9")
    assert read_darebench(f)[0].execution == "multi-step"
    monkeypatch.setenv("ASSAY_DAREBENCH_CELLS", "table7")
    with pytest.raises(InputError, match="ASSAY_DAREBENCH_CELLS"):
        read_darebench(f)
    # The setting is read from the environment (assay.config.settings), also in a fresh process.
    out = subprocess.run([sys.executable, "-c", "from assay.config import settings; print(settings().darebench_cells)"],
                         env={**os.environ, "ASSAY_DAREBENCH_CELLS": "table9"}, capture_output=True, text=True)
    assert out.stdout.strip() == "table9"


def test_front_matter_overrides_cell_and_id_from_stem(tmp_path: Path) -> None:
    f = _write(tmp_path, "task_osworld_01.md", "grading_type: automated\nmodality: multimodal\n"
                                               "execution: single-step\nenvironment:\n  requirements: [osworld]\n")
    t = read_darebench(f)[0]
    assert t.id == "task_osworld_01"
    assert (t.modality, t.execution) == ("multimodal", "single-step")
    assert t.requirements == ["osworld"]
    f2 = _write(tmp_path, "task_terminalbench2_07.md", "grading_type: automated\n")
    t2 = read_darebench(f2)[0]
    assert t2.metadata["source_benchmark"] == "terminalbench2"
    assert (t2.modality, t2.execution) == ("text", "multi-step-with-tools")
    f3 = _write(tmp_path, "custom.md", "grading_type: automated\nexecution: sideways\n")
    with pytest.raises(InputError, match="execution"):
        read_darebench(f3)


def test_llm_judge_type_and_nested_assets(tmp_path: Path) -> None:
    (tmp_path / "assets" / "x").mkdir(parents=True)
    (tmp_path / "assets" / "x" / "data.csv").write_text("a,b\n1,2\n")
    sub = tmp_path / "tasks" / "deep"
    sub.mkdir(parents=True)
    body = ("\n## Prompt\n\nUse `data.csv`; put the result in `report.md`.\n\n"
            "## LLM Judge Rubric\n\nJudge it.\n")
    f = _write(sub, "task_widesearch_02.md",
               "grading_type: llm_judge\nworkspace_files:\n  - source: x/data.csv\n    dest: data.csv\n", body)
    t = read_darebench(f)[0]
    assert t.grading is not None and t.grading.type == "judge"
    assert (t.grading.weight_automated, t.grading.weight_judge) == (0.0, 1.0)
    assert t.grading.checks_code is None
    assert t.workspace[0].source == (tmp_path / "assets" / "x" / "data.csv").resolve()
    assert [p.path for p in t.contract] == ["report.md"]


@pytest.mark.parametrize(("front", "body", "field"), [
    ("grading_type: automated\n", "\n## Prompt\n\nhi\n", "Automated Checks"),
    ("grading_type: llm_judge\n", "\n## Prompt\n\nhi\n", "LLM Judge Rubric"),
    ("grading_type: automated\n", "\n## Expected Behavior\n\nhi\n", "Prompt"),
    ("grading_type: automated\n",
     "\n## Prompt\n\nhi\n\n## Automated Checks\n\n```python\ndef grade(t, w):\n    return {\n```\n",
     "Automated Checks"),
    ("grading_type: hybrid\ngrading_weights: {automated: -1, llm_judge: 1}\n", None, "grading_weights.automated"),
    ("grading_type: automated\nworkspace_files:\n  - path: /etc/x\n    content: hi\n", None,
     "workspace_files[0].path"),
    ("grading_type: automated\nworkspace_files:\n  - source: ../../etc/passwd\n    dest: p\n", None,
     "workspace_files[0].source"),
    ("- just a list\n", None, None),
])
def test_refusals(tmp_path: Path, front: str, body: str | None, field: str | None) -> None:
    f = _write(tmp_path, "task_x_00.md", front, body)
    with pytest.raises(InputError) as ei:
        read_darebench(f)
    assert ei.value.file == str(f)
    if field is not None:
        assert field in (ei.value.field or "")


def test_syntax_error_in_checks_has_file_line(tmp_path: Path) -> None:
    body = "\n## Prompt\n\nhi\n\n## Automated Checks\n\n```python\ndef grade(t, w):\n    return {\n```\n"
    f = _write(tmp_path, "task_x_00.md", "grading_type: automated\n", body)
    with pytest.raises(InputError) as ei:
        read_darebench(f)
    lines = f.read_text().splitlines()
    assert ei.value.line is not None
    assert lines[ei.value.line - 1].strip() in ("return {", "```", "def grade(t, w):")


def _validate(path: Path) -> subprocess.CompletedProcess[str]:
    return assay("validate", str(path), cwd=ROOT.parent, env={"COLUMNS": "400"})


@pytest.mark.parametrize(("name", "field", "reason"), [
    ("bad_grading_type.md", "grading_type", "unknown grading type"),
    ("bad_dest_escape.md", "workspace_files[0].path", "escapes the workspace"),
    ("missing_asset.md", "workspace_files[0].source", "does not exist"),
    ("bad_yaml.md", "front matter", "does not parse as YAML"),
    ("negative_timeout.md", "timeout_seconds", "negative"),
])
def test_assay_validate_refuses_malformed(name: str, field: str, reason: str) -> None:
    r = _validate(BAD / name)
    err = re.sub(r"\s+", " ", r.stderr)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert name in err
    assert f"'{field}'" in err
    assert reason in err
    assert "Traceback" not in r.stderr + r.stdout


def test_bad_yaml_reports_file_line_and_column() -> None:
    with pytest.raises(InputError) as ei:
        read_darebench(BAD / "bad_yaml.md")
    lines = (BAD / "bad_yaml.md").read_text().splitlines()
    assert ei.value.line is not None and ei.value.column is not None
    # The error points into the file (front matter offset added), at or after the broken line.
    assert ei.value.line >= 5
    assert lines[4].startswith("environment:")


def test_assay_validate_accepts_fixture_folder() -> None:
    r = _validate(TASKS)
    assert r.returncode == 0, r.stderr
    assert "4 tasks valid" in r.stdout


@pytest.mark.parametrize(("text", "code"), [
    ("intro\n```python\ndef grade(t, w):\n    return {}\n```\nafter", "def grade(t, w):\n    return {}"),
    ("```py\n\n\nx = 1\n```", "x = 1"),  # blank lines after the fence are not code
    ("````python3\ncode\n```\nmore\n````\n", "code\n```\nmore"),  # closed by its own fence only
    ("```python\nunclosed\n~~~python\nok\n~~~\n", "ok"),  # the first block that closes
    ("```bash\nls\n```\n```python\nz=2\n```  \n", "z=2"),
    ("```python\n" * 25_000, None),  # 25,000 unclosed fences: one pass, no block
])
def test_the_checks_block_is_found_in_one_pass(text: str, code: str | None) -> None:
    from assay.task.formats.darebench import _python_block

    found = _python_block(text)
    assert (found[0] if found else None) == code
    if found:
        assert text[found[1]:].startswith(code or "")
