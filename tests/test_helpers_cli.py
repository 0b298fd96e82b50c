"""tests/helpers.py's `assay`: the CLI in the test's process answers as in a process of its
own (`assay_process`), and puts back what a command changes in the process."""

from __future__ import annotations

import gc
import json
import os
import signal
from pathlib import Path

import pytest

from tests.helpers import REPO, assay, assay_process, write_task

STARTER = REPO / "suites" / "starter" / "contract"


def test_the_same_output_and_exit_codes_as_a_process_of_its_own(tmp_path: Path) -> None:
    write_task(tmp_path / "bad", {"title": "t", "execution": "single-step"})  # no prompt: refused
    for args in (["tasks", str(STARTER), "--json"], ["validate", str(tmp_path / "bad")], ["--version"],
                 ["report", "--campaign", "none"]):
        here, there = assay(*args, cwd=tmp_path), assay_process(*args, cwd=tmp_path)
        assert (here.returncode, here.stdout, here.stderr) == (there.returncode, there.stdout, there.stderr), args
    assert json.loads(assay("tasks", str(STARTER), "--json", cwd=tmp_path).stdout)["tasks"]
    # Usage errors: the same code and error; the usage line names the program as click finds it
    # (`python -m assay.cli` in a process, the test runner's name here).
    for args, words in ((["run"], "Missing argument"), (["no-such-command"], "No such command")):
        here, there = assay(*args, cwd=tmp_path), assay_process(*args, cwd=tmp_path)
        assert here.returncode == there.returncode == 2 and words in here.stderr and words in there.stderr, args


def test_columns_reach_the_tables_as_in_a_process(tmp_path: Path) -> None:
    narrow = assay("tasks", str(STARTER), cwd=tmp_path, env={"COLUMNS": "60"})
    wide = assay("tasks", str(STARTER), cwd=tmp_path, env={"COLUMNS": "300"})
    assert narrow.returncode == wide.returncode == 0
    assert max(map(len, narrow.stdout.splitlines())) <= 60 < max(map(len, wide.stdout.splitlines()))
    assert narrow.stdout == assay_process("tasks", str(STARTER), cwd=tmp_path, env={"COLUMNS": "60"}).stdout


def test_what_a_command_changes_in_the_process_is_put_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASSAY_STORE", f"sqlite:///{tmp_path}/elsewhere.db")
    handler = signal.getsignal(signal.SIGINT)
    was_cwd, was_gc = os.getcwd(), gc.isenabled()
    r = assay("tasks", str(STARTER), "--json", cwd=tmp_path, env={"ASSAY_TEST_ONLY": "1"})
    assert r.returncode == 0
    assert os.getcwd() == was_cwd and gc.isenabled() == was_gc and signal.getsignal(signal.SIGINT) is handler
    assert os.environ["ASSAY_STORE"] == f"sqlite:///{tmp_path}/elsewhere.db" and "ASSAY_TEST_ONLY" not in os.environ


def test_the_command_sees_a_newcomers_environment_in_its_folder(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """No assay settings of the test's own environment reach the command: ASSAY_STORE pointing
    at another store would make `report` read it."""
    monkeypatch.setenv("ASSAY_STORE", f"sqlite:///{tmp_path}/elsewhere.db")
    r = assay("report", cwd=tmp_path)
    assert r.returncode == 2 and "no store here" in r.stderr and "elsewhere" not in r.stderr, r.stderr


def test_an_exception_nobody_catches_is_one_line_a_crash_log_and_exit_1(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from assay.task import discover as discover_module

    def boom(paths: object) -> None:
        raise RuntimeError("boom in discover")

    monkeypatch.setattr(discover_module, "discover", boom)
    r = assay("tasks", str(STARTER), cwd=tmp_path)
    assert r.returncode == 1 and r.stdout == ""
    assert "Traceback" not in r.stderr and "RuntimeError: boom in discover" in r.stderr
    log = Path(r.stderr.split("the details are in ")[1].strip())
    assert "Traceback (most recent call last):" in log.read_text()
    log.unlink()
