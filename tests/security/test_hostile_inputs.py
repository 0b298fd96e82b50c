"""Hostile task and result files are refused up front, fast (issue 25, parts 3 and 4).

A suite or an upstream results file comes from the internet. Two ways it could stall or crash
the harness (one asyncio process serving a whole campaign) are attacked here, through the CLI:

- **Patterns.** A task's regular expressions (contract `regex` and `number` predicates, rubric
  checks `regex`, `not_regex` and `number_pattern`, stakeholder `triggers`/`requires`, truth
  `framing`) used to run on Python's backtracking `re`: `^(\\d+\\s?)+$` against `"1"*34 + "x"`
  takes about 2^34 steps and froze every run of the campaign. They now run on RE2, in time
  linear in the text. A pattern RE2 cannot run (lookaround, backreferences: the features that
  need backtracking) is refused at `assay validate` and `assay run` with exit 2, naming the
  file, the field and the reason.
- **Parsers.** A YAML alias bomb under 1 KB (a "billion laughs"), 200,000 nested brackets, or
  a 50,000-digit integer, in a task file, a stakeholder spec or a file given to `assay import`,
  is refused with exit 2 and one line naming the file and the reason: no RecursionError
  traceback, no minutes of work, nothing stored.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import REPO
from tests.security._cases import PEOPLE, labels_case
from tests.security._support import (
    CliResult,
    bwrap_ok,
    cli,
    cmd,
    report_json,
    runs_by_name,
    script,
    workdir,
    write_yaml,
)

needs_bwrap = pytest.mark.skipif(not bwrap_ok(), reason="bubblewrap is not installed")

REDOS = r"^(\d+\s?)+$"
"""Catastrophic for a backtracking engine, linear for RE2."""
SLOW_TEXT = "1" * 34 + "x"
"""The text that makes REDOS take about 2^34 steps in Python's `re`."""
UNSUPPORTED = {
    "lookahead": (r"^(?=(\d+\s?)+$)\d", ("lookahead", "re2")),
    "backreference": (r"^(\d+)(\s?\1)+$", ("backreference", "re2")),
}
"""ReDoS patterns RE2 cannot run (they need backtracking), with words the refusal must use."""
DEPTH = 200_000
BIG_INT = "7" * 50_000


def assert_refused(r: CliResult, file: Path, words: tuple[str, ...], *, field: str | None = None,
                   seconds: float = 20) -> str:
    """Exit 2 within `seconds`, a message naming the file (and the field) and the reason, no traceback."""
    assert not r.timed_out, "the command did not finish: " + r.tail(600)
    msg = r.stdout + r.stderr
    assert r.returncode == 2, f"expected exit 2 (bad input), got {r.returncode}: " + r.tail(600)
    assert "Traceback" not in msg, msg[-3000:]
    assert file.name in msg, f"the message does not name the file {file.name}: {msg[-1500:]}"
    if field is not None:
        assert field in msg, f"the message does not name the field {field}: {msg[-1500:]}"
    assert any(w in msg.lower() for w in words), f"the message gives no reason ({'/'.join(words)}): {msg[-1500:]}"
    assert r.seconds < seconds, f"refused only after {r.seconds:.1f} s"
    errors = [ln for ln in msg.splitlines() if ln.strip()]
    assert len(errors) <= 3, "expected one clear line, got:\n" + "\n".join(errors[:20])
    return msg


def stored_runs(wd: Path) -> int:
    db = wd / ".assay" / "assay.db"
    if not db.exists():
        return 0
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        return int(con.execute("SELECT count(*) FROM runs").fetchone()[0]) if "runs" in tables else 0
    finally:
        con.close()


# --------------------------------------------------------------------------- task builders


def rubric_task(folder: Path, check: dict[str, Any]) -> Path:
    """A single-step rubric task whose one item is decided by `check` (no judge needed)."""
    return write_yaml(folder, {
        "title": "count", "domain": "test", "execution": "single-step",
        "prompt": "List the numbers, separated by spaces.",
        "rubric": {"items": [{"id": "numbers", "text": "Lists numbers.", "weight": 10, "tag": "FI", "check": check},
                             {"id": "any", "text": "Says something.", "weight": 1, "tag": "IF",
                              "check": {"min_chars": 1}}]},
    }) / "task.yaml"


def contract_task(folder: Path, predicate: dict[str, Any]) -> Path:
    return write_yaml(folder, {
        "title": "count", "domain": "test", "execution": "single-step",
        "prompt": "List the numbers, separated by spaces.", "answer_path": "answer.txt",
        "contract": [{"path": "answer.txt", **predicate}],
    }) / "task.yaml"


def scenario_with_people(folder: Path, people: dict[str, Any] | str) -> Path:
    """The labels scenario with its stakeholder spec replaced (a dict, or raw text)."""
    labels_case(folder)
    text = people if isinstance(people, str) else json.dumps(people, indent=1)
    (folder / "people.json").write_text(text)
    return folder / "people.json"


def people_with_trigger(pattern: str, key: str = "triggers") -> dict[str, Any]:
    spec = json.loads(json.dumps(PEOPLE))
    spec["npcs"][0]["topics"][0][key] = [pattern]
    return spec


# Each: (build(suite, pattern) -> the file holding the pattern, the field the message must name)
PatternCase = Callable[[Path, str], tuple[Path, str]]


def contract_regex(suite: Path, pattern: str) -> tuple[Path, str]:
    return contract_task(suite / "t", {"predicate": "regex", "pattern": pattern}), "contract[0].pattern"


def contract_number(suite: Path, pattern: str) -> tuple[Path, str]:
    return contract_task(suite / "t", {"predicate": "number", "pattern": pattern}), "contract[0].pattern"


def schema_pattern(suite: Path, pattern: str) -> tuple[Path, str]:
    schema = {"type": "object", "properties": {"v": {"type": "string", "pattern": pattern}}}
    return (contract_task(suite / "t", {"path": "out.json", "predicate": "json", "schema": schema}),
            "contract[0].schema.properties.v.pattern")


def schema_pattern_properties(suite: Path, pattern: str) -> tuple[Path, str]:
    schema = {"type": "object", "patternProperties": {pattern: {"type": "number"}}, "additionalProperties": False}
    return (contract_task(suite / "t", {"path": "out.json", "predicate": "json", "schema": {"allOf": [schema]}}),
            f"contract[0].schema.allOf[0].patternProperties.{pattern}")


def rubric_regex(suite: Path, pattern: str) -> tuple[Path, str]:
    return rubric_task(suite / "t", {"regex": pattern}), "rubric.items[0].check.regex"


def rubric_not_regex(suite: Path, pattern: str) -> tuple[Path, str]:
    return rubric_task(suite / "t", {"not_regex": [r"\d", pattern]}), "rubric.items[0].check.not_regex[1]"


def rubric_number_pattern(suite: Path, pattern: str) -> tuple[Path, str]:
    return rubric_task(suite / "t", {"number": 1, "number_pattern": pattern}), "rubric.items[0].check.number_pattern"


def stakeholder_trigger(suite: Path, pattern: str) -> tuple[Path, str]:
    return scenario_with_people(suite / "labels", people_with_trigger(pattern)), "npcs[0].topics[0].triggers[0]"


def stakeholder_requires(suite: Path, pattern: str) -> tuple[Path, str]:
    return (scenario_with_people(suite / "labels", people_with_trigger(pattern, "requires")),
            "npcs[0].topics[0].requires[0]")


def framing_rule(suite: Path, pattern: str) -> tuple[Path, str]:
    case = labels_case(suite / "labels")
    spec = yaml.safe_load((case / "task.yaml").read_text())
    spec["scenario"]["truth"]["framing"][0]["any"] = [pattern]
    (case / "task.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return case / "task.yaml", "scenario.truth.framing[0].any[0]"


PATTERN_CASES: list[PatternCase] = [contract_regex, contract_number, schema_pattern, schema_pattern_properties,
                                    rubric_regex, rubric_not_regex, rubric_number_pattern, stakeholder_trigger,
                                    stakeholder_requires, framing_rule]


# --------------------------------------------------------------------------- patterns RE2 cannot run


@pytest.mark.parametrize("kind", sorted(UNSUPPORTED))
@pytest.mark.parametrize("case", PATTERN_CASES, ids=[c.__name__ for c in PATTERN_CASES])
def test_validate_refuses_a_pattern_re2_cannot_run(case: PatternCase, kind: str) -> None:
    pattern, words = UNSUPPORTED[kind]
    with workdir("hostile-re") as wd:
        file, field = case(wd / "suite", pattern)
        r = cli("validate", str(wd / "suite"), cwd=wd, timeout=60)
        assert_refused(r, file, words, field=field)


@pytest.mark.parametrize("case", [contract_regex, rubric_number_pattern, stakeholder_trigger, framing_rule],
                         ids=["contract_regex", "rubric_number_pattern", "stakeholder_trigger", "framing_rule"])
def test_run_refuses_a_pattern_re2_cannot_run_and_stores_nothing(case: PatternCase) -> None:
    with workdir("hostile-re-run") as wd:
        file, field = case(wd / "suite", UNSUPPORTED["backreference"][0])
        r = cli("run", str(wd / "suite"), "--agent", "noop", cwd=wd, timeout=60)
        assert_refused(r, file, UNSUPPORTED["backreference"][1], field=field)
        assert stored_runs(wd) == 0, "refused, but runs were stored"


@pytest.mark.parametrize("case", PATTERN_CASES, ids=[c.__name__ for c in PATTERN_CASES])
def test_validate_accepts_the_redos_pattern_re2_runs_in_linear_time(case: PatternCase) -> None:
    with workdir("hostile-re-ok") as wd:
        case(wd / "suite", REDOS)
        r = cli("validate", str(wd / "suite"), cwd=wd, timeout=60)
        assert r.returncode == 0, r.tail(1500)


def test_validate_refuses_a_bad_flag_and_a_malformed_pattern() -> None:
    with workdir("hostile-re-flags") as wd:
        file = contract_task(wd / "flags" / "t", {"predicate": "regex", "pattern": "x", "flags": "iq"})
        assert_refused(cli("validate", str(wd / "flags"), cwd=wd, timeout=60), file, ("flag",),
                       field="contract[0].flags")
        file = rubric_task(wd / "open" / "t", {"regex": "(unclosed"})
        assert_refused(cli("validate", str(wd / "open"), cwd=wd, timeout=60), file, ("missing", "unterminated"),
                       field="rubric.items[0].check.regex")


# --------------------------------------------------------------------------- patterns RE2 runs: linear time


@needs_bwrap
def test_redos_patterns_run_in_linear_time_and_other_runs_are_stored() -> None:
    """A rubric check (regex, not_regex, number_pattern) and contract predicates (regex, number)
    with the ReDoS pattern, graded on the text that froze `re`, next to an honest agent."""
    with workdir("hostile-redos") as wd:
        rubric_task(wd / "suite" / "rubric", {"regex": REDOS, "not_regex": REDOS + "x", "number_pattern": REDOS})
        write_yaml(wd / "suite" / "contract", {
            "title": "count", "domain": "test", "execution": "single-step",
            "prompt": "List the numbers, separated by spaces.", "answer_path": "answer.txt",
            "contract": [{"path": "answer.txt", "predicate": "regex", "pattern": REDOS},
                         {"path": "answer.txt", "predicate": "number", "pattern": REDOS, "flags": "m"}],
        })
        hostile = script(wd, "hostile", [{"say": SLOW_TEXT}])
        honest = script(wd, "honest", [{"say": "1 2 3"}])
        r = cli("run", str(wd / "suite"), "--agent", hostile, "--agent", honest, cwd=wd, timeout=90)
        assert not r.timed_out and r.returncode in (0, 1), "the campaign stalled on the pattern: " + r.tail(1500)
        assert r.seconds < 60, f"the campaign took {r.seconds:.0f} s"
        runs = runs_by_name(report_json(wd))
        assert set(runs) == {"hostile@rubric", "hostile@contract", "honest@rubric", "honest@contract"}, runs
        assert all(run["status"] == "done" for run in runs.values()), runs
        assert runs["hostile@rubric"]["score"] < runs["honest@rubric"]["score"], runs
        assert runs["honest@contract"]["passed"] and not runs["hostile@contract"]["passed"], runs


@needs_bwrap
def test_redos_stakeholder_trigger_runs_in_linear_time() -> None:
    """A stakeholder trigger with the ReDoS pattern: the agent's question is the text that froze
    `re`, asked on the harness's event loop; the run ends, and another agent's run is stored."""
    with workdir("hostile-redos-ask") as wd:
        scenario_with_people(wd / "labels", people_with_trigger(REDOS))
        asker = script(wd, "asker", [cmd(f"bin/ask owner '{SLOW_TEXT}'; bin/ask owner '1 2 3'"), {"say": "done"}])
        quiet = script(wd, "quiet", [{"say": "done"}])
        r = cli("run", str(wd / "labels"), "--agent", asker, "--agent", quiet, cwd=wd, timeout=150)
        assert not r.timed_out and r.returncode in (0, 1), "the campaign stalled on the trigger: " + r.tail(1500)
        runs = runs_by_name(report_json(wd))
        assert set(runs) == {"asker", "quiet"}, runs
        assert all(run["status"] == "done" for run in runs.values()), runs


# --------------------------------------------------------------------------- YAML alias bomb


def alias_bomb(levels: int = 9, width: int = 9, indent: str = "        ") -> str:
    """A billion laughs in YAML: `width ** levels` strings from a text under 1 KB."""
    lines = [f'{indent}l0: &l0 ["lol"' + ', "lol"' * (width - 1) + "]"]
    for i in range(1, levels):
        lines.append(f"{indent}l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def test_yaml_alias_bomb_in_scenario_variant_params_is_refused_fast() -> None:
    with workdir("hostile-yaml") as wd:
        case = labels_case(wd / "suite" / "labels")
        bomb = alias_bomb()
        assert len(bomb) < 1024
        text = (case / "task.yaml").read_text() + "  variants:\n  - name: base\n    params:\n" + bomb.replace(
            " " * 8, " " * 6)
        (case / "task.yaml").write_text(text)
        r = cli("validate", str(wd / "suite"), cwd=wd, timeout=60)
        assert_refused(r, case / "task.yaml", ("alias",), field="scenario.variants[0].params", seconds=5)
        r = cli("run", str(wd / "suite"), "--agent", "noop", cwd=wd, timeout=60)
        assert_refused(r, case / "task.yaml", ("alias",), seconds=10)
        assert stored_runs(wd) == 0


def test_yaml_alias_bomb_in_a_native_task_and_a_manifest_is_refused_fast() -> None:
    with workdir("hostile-yaml2") as wd:
        task = contract_task(wd / "suite" / "t", {"predicate": "regex", "pattern": "1"})
        (task.parent / "task.yaml").write_text(task.read_text() + "metadata:\n" + alias_bomb(indent="  "))
        assert_refused(cli("validate", str(wd / "suite"), cwd=wd, timeout=60), task, ("alias",), seconds=5)
        contract_task(wd / "clean" / "t", {"predicate": "regex", "pattern": "1"})
        manifest = wd / "m.yaml"
        manifest.write_text("schema: assay.manifest/1\nnote:\n" + alias_bomb(indent="  ") + "tasks: [t]\n")
        r = cli("run", str(wd / "clean"), "--tasks-from", str(manifest), "--agent", "noop", cwd=wd, timeout=60)
        assert_refused(r, manifest, ("alias",), seconds=10)
        assert stored_runs(wd) == 0


# --------------------------------------------------------------------------- deep brackets, huge integers


def deep_json(depth: int = DEPTH) -> str:
    return "[" * depth + "]" * depth


PAYLOADS = {"deep": (deep_json(), ("nested", "deep")), "bigint": (BIG_INT, ("digits", "integer"))}


def omb_record(extra: str) -> str:
    """A OneMillion-Bench task record (with a graded response) whose `x` field is `extra` (raw JSON)."""
    rec = {"id": "omb-1", "question": "What is 2 + 2?", "subject": "math",
           "rubrics": [{"rubric_number": 1, "rubric_detail": "Says 4.", "rubric_weight": 5,
                        "rubric_tag": "Factual Information"}],
           "model_response": {"model_response_1": {"model_name": "m", "response_text": "4"}},
           "rubric_auto_score": {"judge": {"rubric_1_response_1_auto_score": 5}}}
    return json.dumps(rec)[:-1] + ', "x": ' + extra + "}"


def darebench_results(extra: str) -> str:
    return '{"model": "m", "tasks": [], "x": ' + extra + "}"


# Each: (build(work folder, payload) -> the file that holds it, the CLI arguments)
FileCase = Callable[[Path, str], tuple[Path, list[str]]]


def people_json(wd: Path, payload: str) -> tuple[Path, list[str]]:
    spec = json.dumps(PEOPLE)[:-1] + ', "x": ' + payload + "}"
    return scenario_with_people(wd / "suite" / "labels", spec), ["validate", str(wd / "suite")]


def native_task_yaml(wd: Path, payload: str) -> tuple[Path, list[str]]:
    task = contract_task(wd / "suite" / "t", {"predicate": "regex", "pattern": "1"})
    task.write_text(task.read_text() + "metadata: {x: " + payload + "}\n")
    return task, ["validate", str(wd / "suite")]


def native_task_as_json(wd: Path, payload: str) -> tuple[Path, list[str]]:
    """task.yaml written as JSON (YAML's flow style), as a JSON-minded tool would write it."""
    task = contract_task(wd / "suite" / "t", {"predicate": "regex", "pattern": "1"})
    spec = json.dumps(yaml.safe_load(task.read_text()))
    task.write_text(spec[:-1] + ', "metadata": {"x": ' + payload + "}}\n")
    return task, ["validate", str(wd / "suite")]


def omb_task_file(wd: Path, payload: str) -> tuple[Path, list[str]]:
    (wd / "suite").mkdir()
    f = wd / "suite" / "omb.json"
    f.write_text(omb_record(payload))
    return f, ["validate", str(wd / "suite")]


def healthbench_jsonl(wd: Path, payload: str) -> tuple[Path, list[str]]:
    (wd / "suite").mkdir()
    f = wd / "suite" / "hb.jsonl"
    row = {"prompt_id": "p1", "prompt": [{"role": "user", "content": "hi"}],
           "rubrics": [{"criterion": "greets", "points": 5, "tags": ["axis:completeness"]}]}
    f.write_text(json.dumps(row) + "\n" + json.dumps(row)[:-1] + ', "x": ' + payload + "}\n")
    return f, ["validate", str(wd / "suite")]


def import_omb(wd: Path, payload: str) -> tuple[Path, list[str]]:
    f = wd / "results.json"
    f.write_text(omb_record(payload))
    return f, ["import", "omb", str(f)]


def import_darebench(wd: Path, payload: str) -> tuple[Path, list[str]]:
    f = wd / "run1_m.json"
    f.write_text(darebench_results(payload))
    return f, ["import", "darebench", str(f)]


def fdegym_engagement(wd: Path, payload: str) -> tuple[Path, list[str]]:
    """An FDE-Gym case folder (the starter's scam-hold) whose engagement.json carries the payload."""
    case = wd / "suite" / "scam-hold"
    shutil.copytree(REPO / "suites" / "starter" / "scenarios" / "scam-hold", case, symlinks=True)
    f = case / "engagement.json"
    f.write_text(f.read_text().rstrip().rstrip("}") + ', "x": ' + payload + "}")
    return f, ["validate", str(wd / "suite")]


def import_fdegym(wd: Path, payload: str) -> tuple[Path, list[str]]:
    """An FDE-Gym run folder (docs' example) whose result.json carries the payload."""
    run = wd / "runs" / "refund-desk.v1-L3-model-a-1"
    shutil.copytree(REPO / "docs" / "examples" / "upstream" / "fdegym" / "runs" / run.name, run)
    f = run / "result.json"
    f.write_text(f.read_text().rstrip().rstrip("}") + ', "x": ' + payload + "}")
    return f, ["import", "fdegym", str(wd / "runs"), "--cases", str(REPO / "suites" / "starter" / "scenarios")]


def run_manifest(wd: Path, payload: str) -> tuple[Path, list[str]]:
    contract_task(wd / "suite" / "t", {"predicate": "regex", "pattern": "1"})
    f = wd / "m.json"
    f.write_text('{"schema": "assay.manifest/1", "tasks": ["t"], "x": ' + payload + "}")
    return f, ["run", str(wd / "suite"), "--tasks-from", str(f), "--agent", "noop"]


FILE_CASES: list[FileCase] = [people_json, native_task_yaml, native_task_as_json, omb_task_file, healthbench_jsonl,
                              fdegym_engagement, import_omb, import_darebench, import_fdegym, run_manifest]


@pytest.mark.parametrize("payload", sorted(PAYLOADS))
@pytest.mark.parametrize("case", FILE_CASES, ids=[c.__name__ for c in FILE_CASES])
def test_absurd_json_and_yaml_are_refused_cleanly(case: FileCase, payload: str) -> None:
    text, words = PAYLOADS[payload]
    with workdir("hostile-json") as wd:
        file, args = case(wd, text)
        r = cli(*args, cwd=wd, timeout=60)
        assert_refused(r, file, words, seconds=10)
        assert stored_runs(wd) == 0, "refused, but runs were stored"


def test_run_refuses_deep_people_json_and_stores_nothing() -> None:
    with workdir("hostile-json-run") as wd:
        file, _ = people_json(wd, deep_json())
        r = cli("run", str(wd / "suite"), "--agent", "noop", cwd=wd, timeout=60)
        assert_refused(r, file, ("nested", "deep"))
        assert stored_runs(wd) == 0
