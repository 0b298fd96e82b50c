"""Several `assay run` processes on one campaign in one store (a SQLite file and a real
PostgreSQL): every run key runs once, a worker killed with SIGKILL has its runs taken over,
and the report is the one a single process gives."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, inspect, text

from assay.env.bwrap import bwrap_available
from tests.helpers import answer_task, assay

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")

N_TASKS = 10
SRC = str(Path(__file__).resolve().parents[2] / "src")  # this checkout's assay, whatever the cwd


def _suite(tmp_path: Path, sleep_s: float) -> tuple[Path, Path]:
    """Ten quick tasks and a script agent that sleeps a little (so runs overlap), then writes
    44: right for one task only, so scores differ."""
    os.chmod(tmp_path, 0o711)
    tasks = tmp_path / "tasks"
    for i in range(N_TASKS):
        answer_task(tasks / f"t{i}", want=str(40 + i))
    script = tmp_path / "slow.jsonl"
    cmd = f"sleep {sleep_s}"
    script.write_text("\n".join(json.dumps(x) for x in [
        {"tool": "run_command", "args": {"command": cmd}},
        {"tool": "write_file", "args": {"path": "answer.txt", "content": "44\n"}},
        {"say": "done"},
    ]) + "\n")
    return tasks, script


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "ASSAY_"))}
    env["PYTHONPATH"] = SRC
    env.update(extra)
    return env


def _run_cmd(tasks: Path, script: Path, url: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "assay.cli", "run", str(tasks), "--agent", f"script:{script}",
            "--agent", "reference", "--concurrency", "2", "--store", url, "--create", "-q", *extra]


def _rows(url: str) -> list[tuple[str, str, int]]:
    eng = create_engine(url)
    try:
        with eng.connect() as c:
            return [(d, s, a) for d, s, a in c.execute(text("select key_digest, status, attempt from runs"))]
    finally:
        eng.dispose()


def _view(url: str, cwd: Path) -> dict[str, Any]:
    """The report, without what differs between any two runs (ids, times)."""
    out = cwd / f"report-{time.monotonic_ns()}.json"
    r = assay("report", "--store", url, "--json", str(out), cwd=cwd, env={"PYTHONPATH": SRC})
    assert r.returncode == 0, r.stderr
    rep = json.loads(out.read_text())
    runs = sorted((x["task_id"], x["agent"], x["level"], x["epoch"], x["attempt"], x["status"], x["score"],
                   x["passed"]) for x in rep["runs"])
    return {"runs": runs, "leaderboard": [{k: v for k, v in row.items() if "ci" not in k and "duration" not in k}
                                          for row in rep.get("leaderboard", [])]}


@pytest.fixture(params=["sqlite", "postgres"])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/shared/assay.db"
    return str(request.getfixturevalue("pg_url"))


@pytest.mark.parametrize("workers", [2, 3])
def test_workers_run_every_key_once(tmp_path: Path, shared_url: str, workers: int) -> None:
    tasks, script = _suite(tmp_path, 0.6)
    procs = [subprocess.Popen(_run_cmd(tasks, script, shared_url), cwd=tmp_path, env=_env(), text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(workers)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0] * workers, [o[1] for o in outs]
    rows = _rows(shared_url)
    per_key = Counter(d for d, _, _ in rows)
    assert len(per_key) == 2 * N_TASKS and set(per_key.values()) == {1}, per_key
    assert all(s == "done" and a == 1 for _, s, a in rows)
    summaries = [o[1].strip().splitlines()[-1] for o in outs]
    ran = [int(s.split(" runs this time")[0]) for s in summaries]
    # the work was shared (a worker that started last may find nothing left) and no key ran twice
    assert sum(ran) == 2 * N_TASKS and sum(n > 0 for n in ran) >= 2, summaries
    assert all("done by another worker" in s for s, n in zip(summaries, ran, strict=True) if n > 0), summaries
    # The report is the one a single process gives.
    single = f"sqlite:///{tmp_path}/single/assay.db"
    r = subprocess.run(_run_cmd(tasks, script, single), cwd=tmp_path, env=_env(), text=True, capture_output=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    assert _view(shared_url, tmp_path) == _view(single, tmp_path)
    assert {s for _, s, _ in _rows(shared_url)} == {"done"}


def _wait_for_leases(url: str, n: int, timeout: float = 120) -> None:
    eng = create_engine(url)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            try:
                with eng.connect() as c:
                    held = c.execute(text("select count(*) from leases")).scalar_one()
                    stored = c.execute(text("select count(*) from runs")).scalar_one()
            except Exception:  # the store is being created by the worker: look again
                held, stored = 0, 0
            if held >= n and stored >= 1:
                return
            time.sleep(0.1)
    finally:
        eng.dispose()
    raise AssertionError(f"no {n} leases held within {timeout}s")


@pytest.mark.parametrize("where", ["this-machine", "another-machine"])
def test_a_worker_killed_mid_run_is_taken_over(tmp_path: Path, shared_url: str, where: str) -> None:
    """Worker A is killed with SIGKILL while it holds leases; worker B, running at the same time,
    takes A's runs over (at once when A was a process of this machine, after the lease's TTL
    when A's lease names another host: A then runs in a UTS namespace of its own) and the
    campaign ends complete, every key finished once."""
    if where == "another-machine" and (os.geteuid() != 0 or shutil.which("unshare") is None):
        pytest.skip("needs root and unshare(1) for a UTS namespace")
    tasks, script = _suite(tmp_path, 2.0)
    ttl = {"ASSAY_LEASE_TTL_S": "2"}
    cmd_a = _run_cmd(tasks, script, shared_url)
    if where == "another-machine":
        cmd_a = ["unshare", "--uts", "sh", "-c", 'hostname worker-a && exec "$@"', "sh", *cmd_a]
    a = subprocess.Popen(cmd_a, cwd=tmp_path, env=_env(**ttl), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         start_new_session=True)
    try:
        _wait_for_leases(shared_url, 1)
        b = subprocess.Popen(_run_cmd(tasks, script, shared_url), cwd=tmp_path, env=_env(**ttl), text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(1.0)
        eng = create_engine(shared_url)
        with eng.connect() as c:
            held_by_a = c.execute(text("select count(*) from leases where holder like :h"),
                                  {"h": f"%:{a.pid}:%"}).scalar_one()
        eng.dispose()
        os.killpg(a.pid, signal.SIGKILL)
        a.wait(timeout=30)
        assert held_by_a >= 1
        out, err = b.communicate(timeout=600)
    finally:
        if a.poll() is None:
            os.killpg(a.pid, signal.SIGKILL)
            a.wait(timeout=30)
    assert b.returncode == 0, err
    rows = _rows(shared_url)
    done = Counter(d for d, s, _ in rows if s == "done")
    assert len(done) == 2 * N_TASKS and set(done.values()) == {1}, done
    assert {s for _, s, _ in rows} == {"done"}  # A's killed runs were never stored, nothing half-written
    r = assay("run", str(tasks), "--agent", f"script:{script}", "--agent", "reference", "--store", shared_url, "-q",
              cwd=tmp_path, env={"PYTHONPATH": SRC})
    assert r.returncode == 0 and "0 runs this time, 20 already done" in r.stderr, r.stderr


def test_a_postgresql_store_in_a_fresh_folder_runs_tasks_with_a_workspace(tmp_path: Path, pg_url: str) -> None:
    """The run folders' parent (./.assay) is created for a store that is not a SQLite file."""
    os.chmod(tmp_path, 0o711)
    answer_task(tmp_path / "tasks" / "t1")
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    r = assay("run", str(tmp_path / "tasks"), "--agent", "reference", "--store", pg_url, "-q", cwd=fresh,
              env={"PYTHONPATH": SRC})
    assert r.returncode == 0, r.stderr
    (row,) = _rows(pg_url)
    assert row[1] == "done"
    assert (fresh / ".assay" / "runs").is_dir()


@pytest.mark.parametrize(("what", "field"), [("task", "id"), ("campaign", "--campaign")])
def test_strings_longer_than_the_store_keeps_are_refused_up_front(tmp_path: Path, pg_url: str, what: str,
                                                                   field: str) -> None:
    """PostgreSQL refuses a task id over 300 or a campaign name over 200 characters at save time;
    assay refuses them before anything runs (exit 2, naming the field)."""
    task_id = "t" * (301 if what == "task" else 10)
    answer_task(tmp_path / "tasks" / "t1", id=task_id)
    campaign = "c" * (201 if what == "campaign" else 5)
    r = assay("run", str(tmp_path / "tasks"), "--agent", "reference", "--store", pg_url, "--campaign", campaign,
              "-q", cwd=tmp_path, env={"PYTHONPATH": SRC})
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert field in r.stderr and "the store keeps at most" in r.stderr, r.stderr
    eng = create_engine(pg_url)
    assert inspect(eng).get_table_names() == []  # nothing written, not even the schema
    eng.dispose()


def test_ctrl_c_gives_the_leases_back(tmp_path: Path) -> None:
    """SIGINT: exit 130, finished runs kept, and no lease left for another worker to wait on."""
    tasks, script = _suite(tmp_path, 2.0)
    url = f"sqlite:///{tmp_path}/shared/assay.db"
    p = subprocess.Popen(_run_cmd(tasks, script, url), cwd=tmp_path, env=_env(), text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait_for_leases(url, 1)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=30)
    assert p.returncode == 130, err
    eng = create_engine(url)
    with eng.connect() as c:
        assert c.execute(text("select count(*) from leases")).scalar_one() == 0
        assert c.execute(text("select count(*) from runs where status = 'done'")).scalar_one() >= 1
    eng.dispose()
