"""Campaigns that stop on evidence, through the CLI: `--until-decided` and `--until-ci` stop when
the evidence is in, decide right, and leave exactly the runs they say; a partly run campaign
resumes where it was, and one killed (SIGKILL) mid-round resumes to the same decision state;
`--pool` is reproducible from its seed; two workers on one campaign share its rounds; bad flag
combinations exit 2 (the Ray backend: tests/test_campaign_ray.py).

The agents are a task's `reference` policy (passes every task) and its `literal` policy, which
passes 3 tasks in 4 of this suite: B - A is +0.25 on the suite, known in advance."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from assay.report.model import Compare, Report
from tests.helpers import answer_task, assay, clean_env

N_TASKS = 40
PAIR = ("--agent", "literal", "--agent", "reference")
APART = ("--agent", "noop", "--agent", "reference")


def _suite(root: Path, *, literal_fails_every: int = 4, n: int = N_TASKS) -> Path:
    tasks = root / "tasks"
    for i in range(n):
        folder = answer_task(tasks / f"t{i:02d}", want="42", literal={"artifacts": "lit"},
                             alternates={"same": {"artifacts": "lit"}})
        (folder / "lit").mkdir(exist_ok=True)
        (folder / "lit" / "answer.txt").write_text("41\n" if i % literal_fails_every == 0 else "42\n")
    return tasks


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _suite(tmp_path_factory.mktemp("evidence"))


def _report(cwd: Path, campaign: str) -> dict[str, Any]:
    out = cwd / f"{campaign}.report.json"
    r = assay("report", "--campaign", campaign, "--json", str(out), cwd=cwd)
    assert r.returncode == 0, r.stderr
    data: dict[str, Any] = json.loads(out.read_text())
    return data


def test_until_decided_stops_decides_right_and_stores_what_it_says(suite: Path, tmp_path: Path) -> None:
    r = assay("run", str(suite), *PAIR, "--until-decided", "-q", "--json", str(tmp_path / "run.json"), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    # Round 1 bets the floor both ways (e = 1.47); round 2 bets 0.5 on B: decided.
    assert "stopped: decided after round 2: B better" in r.stdout, r.stdout
    assert "round 1/10:" in r.stderr and "round 3/10" not in r.stderr
    report = json.loads((tmp_path / "run.json").read_text())
    Report.model_validate(report)
    ev = report["sequential"]
    assert ev["rule"] == "until-decided" and ev["rounds"] == 2 and ev["rounds_max"] == 10
    assert ev["paired"]["decision"] == "b_better" and ev["paired"]["decided_at"] == 2
    assert ev["paired"]["mean_diff"] == pytest.approx(0.25)
    assert ev["paired"]["e_value"] >= 20 and ev["paired"]["p_value"] <= 0.05
    assert "confidence sequence" in ev["interval"]
    assert ev["runs"] == 2 * 2 * N_TASKS
    stored = _report(tmp_path, "default")["runs"]
    assert len(stored) == ev["runs"] and {x["epoch"] for x in stored} == {1, 2}
    # SPEC's `adaptive` object, the same outcome in brief
    assert report["adaptive"] == {
        "mode": "until-decided", "decision": "b_better", "stopped_because": "decided", "rounds": 2,
        "runs": ev["runs"], "usd": ev["cost_usd"], "fixed_design_runs": ev["fixed_runs"],
        "half_width": {iv["agent"]: {iv["kind"]: iv["half_width"]} for iv in ev["intervals"]}}

    again = assay("run", str(suite), *PAIR, "--until-decided", "-q", cwd=tmp_path)  # the same state from the store
    assert again.returncode == 0 and "0 runs this time, 160 already done" in again.stderr, again.stderr
    assert "stopped: decided after round 2: B better" in again.stdout

    cmp_out = tmp_path / "cmp.json"
    c = assay("compare", "literal", "reference", "--detect", "0.1", "--json", str(cmp_out), cwd=tmp_path)
    assert c.returncode == 0, c.stderr
    assert "B better (round 2)" in c.stdout and "to detect 0.1:" in c.stdout, c.stdout
    cmp = json.loads(cmp_out.read_text())
    Compare.model_validate(cmp)
    assert cmp["sequential"]["decision"] == "b_better" and cmp["power"]["n"] == 80
    assert cmp["sequential"]["runs"] == ev["runs"] and "spent 160 runs" in c.stdout, c.stdout
    assert cmp["sequential"]["fixed_runs"] == 2 * cmp["sequential"]["fixed_pairs"]
    assert cmp["power"]["n_detect"] == pytest.approx(cmp["power"]["runs_detect"] / 2)


def test_margin_decides_equivalent(suite: Path, tmp_path: Path) -> None:
    r = assay("run", str(suite), "--agent", "literal", "--agent", "alternate:same", "--until-decided",
              "--margin", "0.3", "-q", "--json", str(tmp_path / "r.json"), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    ev = json.loads((tmp_path / "r.json").read_text())["sequential"]
    assert ev["paired"]["decision"] == "equivalent", ev
    lo, hi = ev["paired"]["ci"]
    assert -0.3 < lo <= 0 <= hi < 0.3
    assert len(_report(tmp_path, "default")["runs"]) == ev["runs"] == ev["rounds"] * 2 * N_TASKS


def test_a_partly_run_round_resumes_where_it_was(suite: Path, tmp_path: Path) -> None:
    # A campaign stopped mid-round 1: ten tasks of the first epoch are stored (the keys of a plain
    # run are those of round 1: the stopping flags are not in a run's key).
    ids = [a for i in range(10) for a in ("--task", f"t{i:02d}")]
    first = assay("run", str(suite), *PAIR, *ids, "-q", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    r = assay("run", str(suite), *PAIR, "--until-decided", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "140 runs this time, 20 already done" in r.stderr, r.stderr
    assert "stopped: decided after round 2: B better" in r.stdout
    assert len(_report(tmp_path, "default")["runs"]) == 160


def _stored(db: Path) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(db, timeout=5) as con:
        try:
            return int(con.execute("SELECT count(*) FROM runs").fetchone()[0])
        except sqlite3.OperationalError:  # the tables are not there yet
            return 0


def test_killed_mid_round_resumes_with_the_same_decision_state(tmp_path: Path) -> None:
    # noop fails every task the reference passes; on 10 tasks the test decides in round 2 of 10.
    tasks = _suite(tmp_path / "s", n=10)
    args = ("run", str(tasks), *APART, "--until-decided", "--concurrency", "1", "-q")
    whole = assay(*args, "--campaign", "whole", "--json", str(tmp_path / "whole.json"), cwd=tmp_path)
    assert whole.returncode == 0, whole.stderr
    expected = json.loads((tmp_path / "whole.json").read_text())["sequential"]
    assert expected["rounds"] == 2 and expected["runs"] == 40

    db = tmp_path / ".assay" / "assay.db"
    before = _stored(db)
    child = subprocess.Popen([sys.executable, "-m", "assay.cli", *args, "--campaign", "killed"], cwd=tmp_path,
                             env=clean_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while _stored(db) - before < 25 and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(child.pid, signal.SIGKILL)  # in round 2: round 1 is 20 runs
    assert child.wait(10) == -signal.SIGKILL
    kept = _stored(db) - before
    assert 20 < kept < 40, kept

    again = assay(*args, "--campaign", "killed", "--json", str(tmp_path / "killed.json"), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert f"{40 - kept} runs this time, {kept} already done" in again.stderr, again.stderr
    got = json.loads((tmp_path / "killed.json").read_text())["sequential"]
    for field in ("rounds", "stopped", "runs", "paired"):
        assert got[field] == expected[field], field
    assert len(_report(tmp_path, "killed")["runs"]) == 40


def test_pool_is_reproducible_from_the_seed(suite: Path, tmp_path: Path) -> None:
    # noop fails every task the reference passes: the test decides in round 3 of 8, on 15 tasks drawn.
    one = assay("run", str(suite), *APART, "--until-decided", "--pool", "--seed", "7", "--round-size", "5",
                "--campaign", "a", "-q", "--json", str(tmp_path / "a.json"), cwd=tmp_path)
    two = assay("run", str(suite), *APART, "--until-decided", "--pool", "--seed", "7", "--round-size", "5",
                "--campaign", "b", "-q", "--json", str(tmp_path / "b.json"), cwd=tmp_path)
    other = assay("run", str(suite), *APART, "--until-decided", "--pool", "--seed", "8", "--round-size", "5",
                  "--campaign", "c", "-q", cwd=tmp_path)
    assert one.returncode == two.returncode == other.returncode == 0, one.stderr + two.stderr + other.stderr

    def drawn(campaign: str) -> list[str]:
        return sorted({x["task_id"] for x in _report(tmp_path, campaign)["runs"]})

    assert drawn("a") == drawn("b") != drawn("c")
    ev = json.loads((tmp_path / "a.json").read_text())["sequential"]
    assert ev["pool"] and ev["seed"] == 7 and len(drawn("a")) == 5 * ev["rounds"] < N_TASKS
    assert ev["paired"]["decision"] == "b_better" and ev["rounds"] == 3  # e = 1.61, 4.3, 33
    # The campaign's order is kept with it: another seed on it is refused before anything runs.
    r = assay("run", str(suite), *APART, "--until-decided", "--pool", "--seed", "9", "--campaign", "a", cwd=tmp_path)
    assert r.returncode == 2 and "was started with --pool --seed 7" in r.stderr, r.stderr
    assert drawn("a") == drawn("b")


def test_until_ci_stops_at_the_width_or_the_epochs(suite: Path, tmp_path: Path) -> None:
    r = assay("run", str(suite), "--agent", "reference", "--until-ci", "0.05", "-q", "--json",
              str(tmp_path / "r.json"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    ev = report["sequential"]
    assert ev["stopped"].startswith("every interval has half-width <= 0.05")
    adaptive = report["adaptive"]
    assert adaptive["mode"] == "until-ci" and adaptive["decision"] is None and adaptive["stopped_because"] == "ci"
    assert all(w <= 0.05 for kinds in adaptive["half_width"].values() for w in kinds.values())
    assert all(iv["half_width"] <= 0.05 and iv["lo"] <= iv["mean"] <= iv["hi"] for iv in ev["intervals"])
    assert len(_report(tmp_path, "default")["runs"]) == ev["runs"] == ev["rounds"] * N_TASKS
    capped = assay("run", str(suite), "--agent", "literal", "--until-ci", "0.001", "--max-epochs", "2", "--campaign", "cap", "-q",
                   "--json", str(tmp_path / "cap.json"), cwd=tmp_path)
    assert capped.returncode == 0, capped.stderr
    capped_report = json.loads((tmp_path / "cap.json").read_text())
    ev = capped_report["sequential"]
    assert ev["stopped"] == "--max-epochs 2 reached" and ev["runs"] == 2 * N_TASKS
    assert capped_report["adaptive"]["stopped_because"] == "max_epochs"


def test_dry_run_states_the_power(suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    r = assay("run", str(suite), *PAIR, "--dry-run", "--detect", "0.1", "--json", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "power: the plan's 40 pairs detect a difference of" in r.stdout and "to detect 0.1:" in r.stdout
    power = json.loads(out.read_text())["power"]
    assert power["n"] == N_TASKS and power["sd_basis"].startswith("assumed")
    assert power["n_detect"] == 393  # (2.8016 * sqrt(0.5) / 0.1)^2 = 392.4


@pytest.mark.parametrize(("args", "flag"), [
    (("--until-ci", "0.05", "--until-decided"), "--until-ci"),
    (("--until-ci", "0.7"), "--until-ci"),
    (("--margin", "0.1"), "--margin"),
    (("--until-ci", "0.05", "--margin", "0.1"), "--margin"),
    (("--alpha", "0.1"), "--alpha"),
    (("--until-decided", "--alpha", "0"), "--alpha"),
    (("--max-epochs", "3"), "--max-epochs"),
    (("--until-ci", "0.05", "--pool", "--max-epochs", "3"), "--max-epochs"),
    (("--until-ci", "0.05", "--seed", "1"), "--seed"),
    (("--until-ci", "0.05", "--round-size", "4"), "--round-size"),
    (("--until-ci", "0.05", "--epochs", "3"), "--epochs"),
    (("--pool",), "--pool"),
    (("--detect", "0.1"), "--detect"),
    (("--dry-run", "--detect", "2"), "--detect"),
])
def test_bad_flag_combinations_exit_2(suite: Path, tmp_path: Path, args: tuple[str, ...], flag: str) -> None:
    r = assay("run", str(suite), *PAIR, *args, cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert flag in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / ".assay").exists()


def test_until_decided_needs_two_agents(suite: Path, tmp_path: Path) -> None:
    r = assay("run", str(suite), "--agent", "reference", "--until-decided", cwd=tmp_path)
    assert r.returncode == 2 and "--until-decided" in r.stderr and "two agents" in r.stderr


def test_two_workers_on_one_campaign_reach_the_decision_of_one(tmp_path: Path) -> None:
    """Two `assay run` processes on the same campaign and store (the several-workers set-up):
    they share the rounds (each round's keys are claimed, never run twice), both stop at the
    decision one worker alone reaches, and the store holds exactly the runs that decision took."""
    tasks = _suite(tmp_path / "s", n=10)
    args = ("run", str(tasks), *APART, "--until-decided", "--concurrency", "2", "-q")
    alone = assay(*args, "--campaign", "alone", "--json", str(tmp_path / "alone.json"), cwd=tmp_path)
    assert alone.returncode == 0, alone.stderr
    expected = json.loads((tmp_path / "alone.json").read_text())["sequential"]
    assert expected["rounds"] == 2 and expected["runs"] == 40

    workers = [subprocess.Popen([sys.executable, "-m", "assay.cli", *args, "--campaign", "shared"], cwd=tmp_path,
                                env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(2)]
    outs = [w.communicate(timeout=180) for w in workers]
    for w, (out, err) in zip(workers, outs, strict=True):
        assert w.returncode == 0, err[-3000:]
        assert "stopped: decided after round 2" in out, out
    ran = sum(int(err.rsplit(" runs this time", 1)[0].rsplit("\n", 1)[-1]) for _, err in outs)
    assert ran == 40, [err[-300:] for _, err in outs]  # each key run once, by one of them
    runs = _report(tmp_path, "shared")["runs"]
    assert len(runs) == 40 and {(r["task_id"], r["agent"], r["epoch"]) for r in runs} == \
        {(r["task_id"], r["agent"], r["epoch"]) for r in _report(tmp_path, "alone")["runs"]}
