"""The README's main command, on the bundled starter suite, exactly as a newcomer runs it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from assay.env.bwrap import bwrap_available
from tests.helpers import REPO, assay, report

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")


def test_assay_run_starter_suite(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o711)
    r = assay("run", str(REPO / "suites" / "starter"), "-q", "--concurrency", "4", cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "leaderboard" in r.stdout
    assert (tmp_path / ".assay" / "assay.db").is_file()
    rep = report(tmp_path)
    runs = rep["runs"]
    assert runs and all(run["status"] == "done" for run in runs)
    by_agent: dict[str, list[dict]] = {}
    for run in runs:
        by_agent.setdefault(run["agent"], []).append(run)
    assert {"noop", "reference"} <= set(by_agent)
    assert all(run["passed"] for run in by_agent["reference"]), [
        (x["task_id"], x["score"]) for x in by_agent["reference"] if not x["passed"]]
    assert not any(run["passed"] for run in by_agent["noop"])
    assert all(run["sandbox"] == "bwrap" for run in runs)
    # Running it again resumes: nothing new is run.
    r2 = assay("run", str(REPO / "suites" / "starter"), "-q", "--json", "again.json", cwd=tmp_path)
    assert r2.returncode == 0, r2.stderr
    assert "0 runs this time" in r2.stderr.replace("\n", " ")
    again = json.loads((tmp_path / "again.json").read_text())
    assert {x["run_id"] for x in again["runs"]} == {x["run_id"] for x in runs}


def test_a_suite_in_a_private_folder_runs_every_kind(tmp_path: Path) -> None:
    """A suite kept in a 0700 folder (a clone under /root, a `mktemp -d`): the sandbox uid cannot
    read it, so everything a sandboxed process needs is staged into the run's own folder and no
    run is void (a scenario's case code, a native scenario, a contract task's checks)."""
    import shutil

    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    os.chmod(private, 0o700)
    suite = private / "starter"
    shutil.copytree(REPO / "suites" / "starter", suite)
    work = private / "work"
    work.mkdir()
    r = assay("run", str(suite), "--agent", "reference", "--agent", "noop", "--task", "refund-desk/base",
              "--task", "refund-desk-native/base", "--task", "text-mt-log-triage", "-q", "--json", "r.json",
              cwd=work)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    runs = json.loads((work / "r.json").read_text())["runs"]
    assert len(runs) == 6 and all(x["status"] == "done" for x in runs), [
        (x["task_id"], x["agent"], x.get("void_reason")) for x in runs if x["status"] != "done"]
    assert all(x["passed"] for x in runs if x["agent"] == "reference")
