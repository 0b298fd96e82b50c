"""Category 2: no special files, no blocking reads.

FIFOs, sockets, device-like files and over-large files left in a workspace are refused
(recorded: the predicate or check fails) instead of opened. Nothing blocks: every campaign
here must finish within a time bound, and the other runs of the campaign must score as usual.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.security._cases import answer_task, labels_case
from tests.security._support import bwrap_ok, cli, cmd, report_json, runs_by_name, script, workdir

pytestmark = pytest.mark.skipif(not bwrap_ok(), reason="bubblewrap is not installed")

BENIGN = [cmd("sleep 2; echo 42 > answer.txt"), {"say": "wrote 42"}]
BOUND_S = 20  # every campaign here takes under 10 s when nothing blocks


def _campaign(tag: str, agents: dict[str, list[dict[str, Any]]], build: Any,
              timeout: float = BOUND_S) -> Iterator[dict[str, Any]]:
    with workdir(tag) as wd:
        paths = build(wd)
        args = ["run", *[str(p) for p in paths], "--concurrency", "2"]
        for name, lines in agents.items():
            args += ["--agent", script(wd, name, lines)]
        r = cli(*args, cwd=wd, timeout=timeout)
        runs = runs_by_name(report_json(wd)) if (wd / ".assay" / "assay.db").exists() else {}
        yield {"cwd": wd, "cli": r, "runs": runs}


def _pred(run: dict[str, Any], path: str) -> dict[str, Any]:
    preds = [p for p in run["grade"].get("predicates", []) if p["path"] == path]
    assert preds, f"no predicate result for {path}: {run}"
    return preds[0]


# --------------------------------------------------------------------------- a FIFO artifact


@pytest.fixture(scope="module")
def fifo_artifact() -> Iterator[dict[str, Any]]:
    agents = {"fifo": [cmd("mkfifo answer.txt && ls -la answer.txt"), {"say": "done"}], "benign": BENIGN}
    yield from _campaign("special-fifo", agents, lambda wd: [answer_task(wd / "suite" / "answer")])


def test_fifo_artifact_does_not_block_the_campaign(fifo_artifact: dict[str, Any]) -> None:
    r = fifo_artifact["cli"]
    assert not r.timed_out, (f"`assay run` was still running after {BOUND_S} s: grading opened the FIFO "
                             f"answer.txt and blocked (the whole campaign froze)")
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.tail()


def test_fifo_artifact_fails_its_predicate_with_a_reason(fifo_artifact: dict[str, Any]) -> None:
    run = fifo_artifact["runs"].get("fifo")
    assert run is not None, "the FIFO run was never stored (the campaign hung): " + fifo_artifact["cli"].tail(500)
    assert run["status"] == "done", run
    pred = _pred(run, "answer.txt")
    assert pred["ok"] is False and pred["reason"], pred


def test_fifo_artifact_other_run_scores(fifo_artifact: dict[str, Any]) -> None:
    run = fifo_artifact["runs"].get("benign")
    assert run is not None and run["status"] == "done" and run["passed"] is True, (
        f"the other run of the campaign did not score: {run}; " + fifo_artifact["cli"].tail(500))


# --------------------------------------------------------------------------- sockets and device-like files


@pytest.fixture(scope="module")
def socket_artifact() -> Iterator[dict[str, Any]]:
    agents = {
        "socket": [cmd("python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.bind('answer.txt')\" "
                       "&& ls -la answer.txt"), {"say": "done"}],
        "dev_link": [cmd("ln -s /dev/zero answer.txt; ln -s /dev/stdin sub"), {"say": "done"}],
        "proc_link": [cmd("ln -s /proc/self/fd/0 answer.txt"), {"say": "done"}],
        "benign": BENIGN,
    }
    yield from _campaign("special-socket", agents, lambda wd: [answer_task(wd / "suite" / "answer")])


def test_socket_artifact_fails_its_predicate_not_the_run(socket_artifact: dict[str, Any]) -> None:
    assert not socket_artifact["cli"].timed_out, socket_artifact["cli"].tail()
    run = socket_artifact["runs"]["socket"]
    assert run["status"] == "done", (
        f"a socket named like the artifact made the run {run['status']} ({run['end_reason']}: "
        f"{run.get('void_reason')}): grading opened it instead of refusing it")
    pred = _pred(run, "answer.txt")
    assert pred["ok"] is False and pred["reason"], pred


@pytest.mark.parametrize("attack", ["dev_link", "proc_link"])
def test_device_like_artifact_is_refused(socket_artifact: dict[str, Any], attack: str) -> None:
    run = socket_artifact["runs"][attack]
    assert run["status"] == "done", run
    assert _pred(run, "answer.txt")["ok"] is False


def test_special_files_leave_other_runs_alone(socket_artifact: dict[str, Any]) -> None:
    run = socket_artifact["runs"]["benign"]
    assert run["status"] == "done" and run["passed"] is True, run


# --------------------------------------------------------------------------- over-large files

SIZES_CHECK = '''\
import os


def grade(workspace, final_message):
    """no_big: 0 when the copy of the workspace handed to the checks holds a file over 100 MB."""
    big = 0.0
    for root, dirs, files in os.walk(workspace):
        for n in files:
            p = os.path.join(root, n)
            if not os.path.islink(p) and os.path.getsize(p) > 100 * 1024 * 1024:
                big = 1.0
    return {"no_big": 1.0 - big, "ran": 1.0}
'''


@pytest.fixture(scope="module")
def large_files() -> Iterator[dict[str, Any]]:
    # two sparse files of 1 GiB each (RLIMIT_FSIZE allows exactly that): no disk used in the
    # workspace, 2 GiB of zeros written by whatever copies them naively
    agents = {"sparse": [cmd("truncate -s 1G answer.txt && truncate -s 1G huge.bin && ls -ls"), {"say": "done"}],
              "benign": BENIGN}

    def build(wd: Any) -> list[Any]:
        return [answer_task(wd / "suite" / "answer"),
                answer_task(wd / "suite" / "checked", checks=SIZES_CHECK, contract_on=False)]

    yield from _campaign("special-large", agents, build)


def test_over_large_artifact_is_refused_by_the_predicate(large_files: dict[str, Any]) -> None:
    assert not large_files["cli"].timed_out, large_files["cli"].tail()
    run = large_files["runs"]["sparse@answer"]
    assert run["status"] == "done", run
    pred = _pred(run, "answer.txt")
    assert pred["ok"] is False and "large" in pred["reason"].lower(), pred


def test_over_large_files_are_not_copied_for_the_checks(large_files: dict[str, Any]) -> None:
    run = large_files["runs"]["sparse@checked"]
    assert run["status"] == "done", run
    checks = run["grade"].get("checks") or {}
    assert checks.get("ran") == 1.0, checks
    assert checks.get("no_big") == 1.0, (
        "two sparse 1 GiB files were copied in full (2 GiB of zeros) into the checks sandbox instead of "
        f"being refused: checks = {checks}")


def test_over_large_files_leave_other_runs_alone(large_files: dict[str, Any]) -> None:
    for task in ("answer", "checked"):
        run = large_files["runs"][f"benign@{task}"]
        assert run["status"] == "done" and run["passed"] is True, run


# --------------------------------------------------------------------------- scenarios: logs/ask.jsonl


BENIGN_LABELS = [cmd("sleep 2; python3 -c \"import json; n = json.load(open('data/inputs.json')); "
                     "json.dump(['odd' if x % 2 else 'even' for x in n], open('predictions.json', 'w'))\""),
                 {"say": "Labelled by parity."}]


@pytest.fixture(scope="module")
def fifo_log() -> Iterator[dict[str, Any]]:
    agents = {
        # the harness checks logs/ask.jsonl against its ledger when grading: make it a FIFO
        "fifo_log": [cmd("bin/ask owner 'What do the labels mean?'"),
                     cmd("rm -f logs/ask.jsonl && mkfifo logs/ask.jsonl && ls -la logs"), {"say": "done"}],
        "benign": BENIGN_LABELS,
    }
    yield from _campaign("special-fifolog", agents, lambda wd: [labels_case(wd / "labels")])


def test_fifo_question_log_does_not_block_the_campaign(fifo_log: dict[str, Any]) -> None:
    r = fifo_log["cli"]
    assert not r.timed_out, (f"`assay run` was still running after {BOUND_S} s: the ledger check opened the "
                             "FIFO logs/ask.jsonl and blocked the campaign")
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.tail()


def test_fifo_question_log_is_an_integrity_incident(fifo_log: dict[str, Any]) -> None:
    run = fifo_log["runs"].get("fifo_log")
    assert run is not None, "the run was never stored (the campaign hung)"
    assert run["status"] == "done", run
    assert any(i.startswith("integrity:") for i in run["grade"]["incidents"]), run["grade"]["incidents"]


def test_fifo_question_log_other_run_scores(fifo_log: dict[str, Any]) -> None:
    run = fifo_log["runs"].get("benign")
    assert run is not None and run["status"] == "done" and run["grade"]["kpi"] == 1.0, (
        f"the other run did not score: {run}; " + fifo_log["cli"].tail(500))


@pytest.fixture(scope="module")
def fifo_scenario() -> Iterator[dict[str, Any]]:
    agents = {
        # FIFOs wherever the grade copies or reads: deliverables/, the delivered file, data/
        "fifo_everywhere": [cmd("mkfifo deliverables/NOTE.md predictions.json data/more.json system.fifo"),
                            {"say": "done"}],
        "benign": BENIGN_LABELS,
    }
    yield from _campaign("special-fifoscen", agents, lambda wd: [labels_case(wd / "labels")])


def test_fifos_in_a_scenario_workspace_are_skipped(fifo_scenario: dict[str, Any]) -> None:
    assert not fifo_scenario["cli"].timed_out, "the campaign blocked on a FIFO: " + fifo_scenario["cli"].tail(500)
    run = fifo_scenario["runs"].get("fifo_everywhere")
    assert run is not None and run["status"] == "done", run
    assert run["grade"]["kpi"] == 0.0
    other = fifo_scenario["runs"]["benign"]
    assert other["status"] == "done" and other["grade"]["kpi"] == 1.0, other
