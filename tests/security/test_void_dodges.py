"""An agent cannot turn its failures into void runs (issue 25, part 1; SPEC "who failed decides").

Void runs are left out of every score, so a run that fails *because of what the agent
delivered* must be a scored failure, with the fault in the grade: never void. Each attack
here is one that did void its run before: checks that time out on the agent's program (and
its resume), a `nan` where the checks parse a number, a 300,000-deep JSON artifact and a
50,000-digit integer under the `json` predicate, and the bundled refund-desk grader fed an
unreadable result by the delivered code at exit. Each campaign has an honest agent beside
the attacker, whose result must be what it is without the attack. Every test drives
`assay run` as a user does and reads the report JSON.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import REPO
from tests.security._cases import answer_task
from tests.security._support import (
    bwrap_ok,
    cli,
    cmd,
    report_json,
    runs_by_name,
    script,
    show,
    workdir,
    write_yaml,
)

pytestmark = [pytest.mark.skipif(not bwrap_ok(), reason="bubblewrap is not installed"), pytest.mark.slow]

BOUND_S = 120


def _campaign(wd: Path, paths: list[Path], agents: dict[str, list[dict[str, Any]]], *extra: str,
              env: dict[str, str] | None = None) -> dict[str, Any]:
    args = ["run", *[str(p) for p in paths], "--concurrency", "2", "-q", *extra]
    for name, lines in agents.items():
        args += ["--agent", script(wd, name, lines)]
    r = cli(*args, cwd=wd, timeout=BOUND_S, env=env)
    assert not r.timed_out and "Traceback" not in r.stderr, r.tail()
    return {"cli": r, "runs": runs_by_name(report_json(wd)), "args": args}


def _scored_failure(run: dict[str, Any], part: str, why: str) -> None:
    """The run is done and scores 0, with the fault of `part` and a reason holding `why`."""
    assert run["status"] == "done", f"the attack made its run {run['status']} ({run['void_reason']})"
    assert run["score"] == 0.0 and run["passed"] is False, run
    faults = run["grade"].get("faults") or []
    assert any(f["part"].split(":")[0] == part and why in f["reason"] for f in faults), faults


# --------------------------------------------------------------------------- checks that time out, and resume

SOLVE_CHECKS = '''\
import subprocess


def grade(workspace, final_message):
    """Runs the agent's solve.py (no timeout of its own) and compares what it prints."""
    p = subprocess.run(["python3", "solve.py"], cwd=workspace, capture_output=True, text=True)
    return {"correct": 1.0 if p.stdout.strip() == "42" else 0.0}
'''


def _writes(path: str, content: str) -> dict[str, Any]:
    return {"tool": "write_file", "args": {"path": path, "content": content}}


@pytest.fixture(scope="module")
def timeout_dodge() -> Iterator[dict[str, Any]]:
    with workdir("void-timeout") as wd:
        suite = write_yaml(wd / "suite" / "solve", {
            "title": "print the answer", "domain": "test", "execution": "multi-step-with-tools",
            "prompt": "Write solve.py that prints the answer.", "grading": {"type": "automated", "checks": "checks.py"}},
            {"checks.py": SOLVE_CHECKS, "workspace/README.md": "hello\n"})
        agents = {"dodger": [_writes("solve.py", "while True:\n    pass\n"), {"say": "done"}],
                  "wrong": [_writes("solve.py", "print(41)\n"), {"say": "done"}],
                  "right": [_writes("solve.py", "print(42)\n"), {"say": "done"}]}
        env = {"ASSAY_CHECK_TIMEOUT_S": "3"}
        first = _campaign(wd, [suite], agents, env=env)
        again = cli(*first["args"], cwd=wd, timeout=BOUND_S, env=env)
        yield {**first, "again": again, "again_runs": runs_by_name(report_json(wd)), "report": report_json(wd),
               "cwd": wd}


def test_checks_timing_out_on_the_agents_program_are_a_scored_zero(timeout_dodge: dict[str, Any]) -> None:
    runs = timeout_dodge["runs"]
    _scored_failure(runs["dodger"], "checks", "timed out after 3 s")
    assert timeout_dodge["cli"].returncode == 0, "no run may be void: " + timeout_dodge["cli"].tail()


def test_the_timeout_dodge_gains_nothing_over_an_honest_wrong_answer(timeout_dodge: dict[str, Any]) -> None:
    runs = timeout_dodge["runs"]
    assert (runs["wrong"]["score"], runs["right"]["score"]) == (0.0, 1.0)
    agents = {a["agent"].rsplit("/", 1)[-1]: a for a in timeout_dodge["report"]["agents"]}
    assert agents["dodger.jsonl"]["pass_rate"] == agents["wrong.jsonl"]["pass_rate"] == 0.0
    assert agents["dodger.jsonl"]["void"] == 0 and agents["dodger.jsonl"]["void_rate"] == 0.0
    assert timeout_dodge["report"]["broken_tasks"] == []  # no reference shows its grader failing: a fault is the agent's


def test_a_resume_does_not_void_the_dodge_again(timeout_dodge: dict[str, Any]) -> None:
    again = timeout_dodge["again"]
    assert again.returncode == 0 and "0 runs this time, 3 already done" in again.stderr, again.tail()
    assert timeout_dodge["again_runs"]["dodger"]["run_id"] == timeout_dodge["runs"]["dodger"]["run_id"]


def test_show_prints_the_fault(timeout_dodge: dict[str, Any]) -> None:
    r = cli("show", timeout_dodge["runs"]["dodger"]["run_id"], cwd=timeout_dodge["cwd"], timeout=60)
    assert r.returncode == 0 and "grading faults" in r.stdout and "timed out after 3 s" in r.stdout, r.tail()


# --------------------------------------------------------------------------- nan, deep JSON, huge integers

NUMBER_CHECKS = '''\
from pathlib import Path


def grade(workspace, final_message):
    """How close answer.txt is to 42 (1.0 when exact; 0 when there is none)."""
    answer = Path(workspace, "answer.txt")
    if not answer.is_file():
        return {"closeness": 0.0}
    x = float(answer.read_text().strip())
    return {"closeness": 1.0 - abs(x - 42) / 42}
'''


@pytest.fixture(scope="module")
def bad_numbers() -> Iterator[dict[str, Any]]:
    with workdir("void-numbers") as wd:
        number = answer_task(wd / "suite" / "number", checks=NUMBER_CHECKS, contract_on=False)
        parsed = write_yaml(wd / "suite" / "parsed", {
            "title": "write JSON", "domain": "test", "execution": "multi-step-with-tools",
            "prompt": "Write out.json.", "contract": [{"path": "out.json", "predicate": "json"}]},
            {"workspace/README.md": "hello\n"})
        deep = "python3 -c \"open('out.json','w').write('['*300000 + ']'*300000)\"; echo 42 > answer.txt"
        big = "python3 -c \"open('out.json','w').write('1'*50000)\"; echo nan > answer.txt"
        agents = {"nan": [cmd("echo nan > answer.txt; echo '{}' > out.json"), {"say": "done"}],
                  "deep": [cmd(deep), {"say": "done"}],
                  "bigint": [cmd(big), {"say": "done"}],
                  "honest": [cmd("echo 42 > answer.txt; echo '{\"a\": 1}' > out.json"), {"say": "done"}]}
        yield _campaign(wd, [number, parsed], agents)


def test_nan_where_checks_parse_a_number_is_a_scored_zero(bad_numbers: dict[str, Any]) -> None:
    run = bad_numbers["runs"]["nan@number"]
    _scored_failure(run, "checks", "not a finite number")
    assert run["grade"]["checks"] == {"closeness": 0.0}


@pytest.mark.parametrize(("agent", "why"), [("deep", "nested deeper than"), ("bigint", "digits")])
def test_deep_json_and_huge_integers_fail_the_json_predicate(bad_numbers: dict[str, Any], agent: str,
                                                             why: str) -> None:
    run = bad_numbers["runs"][f"{agent}@parsed"]
    assert run["status"] == "done" and run["score"] == 0.0 and run["passed"] is False, run
    pred = run["grade"]["predicates"][0]
    assert pred["ok"] is False and why in pred["reason"], pred


def test_the_honest_agent_scores_beside_the_attacks(bad_numbers: dict[str, Any]) -> None:
    runs = bad_numbers["runs"]
    assert runs["honest@number"]["score"] == 1.0 and runs["honest@parsed"]["score"] == 1.0
    assert not [r for r in runs.values() if r["status"] != "done"]
    assert bad_numbers["cli"].returncode == 0, bad_numbers["cli"].tail()


# --------------------------------------------------------------------------- the bundled refund-desk grader

REFUND = REPO / "suites" / "starter" / "scenarios" / "refund-desk"
AT_EXIT = ("\nimport atexit as _atexit, os as _os\n"
           "_atexit.register(lambda: _os.write(1, b'\\n@@RESULT@@' + b'[' * 200000))\n")


@pytest.fixture(scope="module")
def refund_attack() -> Iterator[dict[str, Any]]:
    with workdir("void-refund") as wd:
        append = ("python3 -c \"import sys; open('system/refunds.py', 'a').write(sys.argv[1])\" "
                  f"{_shell_quote(AT_EXIT)}")
        agents = {"unreadable": [cmd(append), {"say": "shipped"}], "idle": [{"say": "nothing to change"}]}
        yield {**_campaign(wd, [REFUND], agents, "--task", "refund-desk/base"), "cwd": wd}


def _shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def test_an_unreadable_result_from_the_delivered_code_is_a_scored_zero(refund_attack: dict[str, Any]) -> None:
    run = refund_attack["runs"]["unreadable"]
    _scored_failure(run, "kpi", "RecursionError")
    assert run["grade"]["solved"] is False and run["grade"]["kpi"] is None
    assert refund_attack["cli"].returncode == 0, refund_attack["cli"].tail()


def test_the_other_scenario_run_is_graded_as_usual(refund_attack: dict[str, Any]) -> None:
    idle = refund_attack["runs"]["idle"]
    assert idle["status"] == "done" and idle["grade"]["kpi"] is not None and not idle["grade"].get("faults"), idle


def test_show_json_keeps_the_fault(refund_attack: dict[str, Any]) -> None:
    rec = show(refund_attack["cwd"], refund_attack["runs"]["unreadable"]["run_id"])
    faults = rec["run"]["grade"]["faults"] if "run" in rec else rec["grade"]["faults"]
    assert faults and faults[0]["part"] == "kpi"


# --------------------------------------------------------------------------- a predicate that backtracks on the artifact

SCHEMA = {"type": "array", "uniqueItems": True}


@pytest.fixture(scope="module")
def backtracking() -> Iterator[dict[str, Any]]:
    """A task's JSON Schema check that is slow on an artifact the agent shapes for it, in the same
    campaign as an honest run. Patterns run on RE2 now (tests/test_task_json_schemas.py); what is
    left is jsonschema's own cost: `uniqueItems` compares objects pairwise, and 20,000 of them
    take hours."""
    with workdir("void-schema") as wd:
        suite = write_yaml(wd / "suite" / "schema", {
            "title": "write the records", "domain": "test", "execution": "multi-step-with-tools",
            "prompt": "Write records.json.",
            "contract": [{"path": "records.json", "predicate": "json", "json_schema": SCHEMA}]},
            {"workspace/README.md": "hello\n"})
        evil = json.dumps([{"a": i} for i in range(20_000)])
        agents = {"backtrack": [_writes("records.json", evil), {"say": "done"}],
                  "honest": [cmd("sleep 1"), _writes("records.json", '[{"a": 1}, {"a": 2}]'), {"say": "done"}]}
        yield _campaign(wd, [suite], agents, env={"ASSAY_PREDICATE_TIMEOUT_S": "3"})


def test_a_slow_schema_check_fails_the_predicate_not_the_campaign(backtracking: dict[str, Any]) -> None:
    run = backtracking["runs"]["backtrack"]
    _scored_failure(run, "predicate", "stopped after 3 s")
    assert backtracking["cli"].seconds < 60, backtracking["cli"].tail()


def test_the_honest_run_beside_the_backtracking_one_scores(backtracking: dict[str, Any]) -> None:
    assert backtracking["runs"]["honest"]["score"] == 1.0, backtracking["runs"]["honest"]
