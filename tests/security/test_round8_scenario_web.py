"""Eighth fresh review: FDE-Gym scenario tasks and the web workbench (issue 25 point 1).

The rule under attack: a run is void only when the harness failed. What follows from what the
agent delivered (its `system/`, its `deliverables/`, its question log) is a scored failure, and
nothing an agent delivers may stall the other runs of the campaign or the web app.

Every attack is driven as a user drives assay: the `assay` CLI (`_support.cli`), the report
JSON, `assay show --json`, and HTTP to `assay serve` on 127.0.0.1. Each test asserts what must
hold when the defence works, so a failing test is a hole.

The scenario cases are small native scenarios written into the test's work folder:
`labels_case` (`_cases.py`: the grader reads `predictions.json`, truth framing rules) and
`system_case` below (the grader runs the delivered `system/predict.py` with `sys.executable`
on held-out inputs, as the bundled refund-desk grader does with `refunds.decide()`).
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import served
from tests.security._cases import INPUTS, PEOPLE, labels_case, labels_ws_json
from tests.security._support import (
    bwrap_ok,
    cli,
    cmd,
    outputs,
    report_json,
    runs_by_name,
    script,
    show,
    workdir,
    write_yaml,
)

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not bwrap_ok(), reason="bubblewrap is not installed")]


# --------------------------------------------------------------------------- a case that runs system/

SYS_GRADER = '''\
"""Run the delivered system/predict.py on the held-out inputs (as real graders do) and score it."""
import json
import subprocess
import sys
from pathlib import Path


def grade(ws, ctx):
    labels = json.loads((Path(ctx["held_out"]) / "labels.json").read_text())
    inputs = json.loads((Path(ctx["held_out"]) / "inputs.json").read_text())
    system = Path(ws) / "system"
    p = subprocess.run([sys.executable, str(system / "predict.py")], cwd=str(system), input=json.dumps(inputs),
                       capture_output=True, text=True, errors="replace")
    try:
        preds = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"kpi": 0.0, "kpi_oracle": 1.0, "incidents": [f"predict.py gave no predictions (exit {p.returncode})"],
                "summary": "no predictions"}
    hits = sum(1 for a, b in zip(preds, labels) if a == b) if isinstance(preds, list) else 0
    return {"kpi": hits / len(labels), "kpi_oracle": 1.0, "incidents": [], "summary": f"{hits}/{len(labels)} right"}
'''

PREDICT_OK = '''\
import json, sys
nums = json.loads(sys.stdin.read())
print(json.dumps(["odd" if n % 2 else "even" for n in nums]))
'''

SYS_ORACLE = '''\
"""Reference: deliver a system/predict.py that labels parity."""
import sys
from pathlib import Path
ws = Path(sys.argv[1])
(ws / "system").mkdir(exist_ok=True)
(ws / "system" / "predict.py").write_text(__PREDICT__)
'''.replace("__PREDICT__", repr(PREDICT_OK))


def system_case(folder: Path) -> Path:
    """A native scenario (task id `FOLDERNAME/base`) graded by running the delivered system."""
    held = [n + 100 for n in INPUTS]
    sc = {"rules": "v2", "stakeholders": "people.json", "grader": "grade.py", "held_out": "held_out/",
          "baseline": 0, "reference": "solutions/oracle.py", "truth": {"key_stakeholder_facts": ["F_parity"]}}
    files = {
        "people.json": json.dumps(PEOPLE, indent=1),
        "held_out/labels.json": json.dumps(["odd" if n % 2 else "even" for n in held]),
        "held_out/inputs.json": json.dumps(held),
        "workspace/data/inputs.json": json.dumps(INPUTS),
        "workspace/system/predict.py": "print('[]')\n",
        "workspace/README.md": "Make system/predict.py read a JSON list of numbers on stdin and print their "
                               "parity labels as a JSON list.\n",
        "solutions/oracle.py": SYS_ORACLE,
        "grade.py": SYS_GRADER,
    }
    spec = {"title": "Deliver a parity system", "domain": "testing",
            "briefs": {"L0": "Fix system/predict.py.", "L3": "See README.md. Olga owns the labels."},
            "scenario": sc}
    return write_yaml(folder, spec, files)


def write(path: str, content: str) -> dict[str, Any]:
    return {"tool": "write_file", "args": {"path": path, "content": content}}


def ticker(n: int) -> list[dict[str, Any]]:
    """`n` short commands, each printing the sandbox clock: the gaps between them show how long
    the harness's event loop (which starts every command and reads its end) was held."""
    return [cmd("sleep 0.4; date +%s.%N") for _ in range(n)]


def longest_gap(cwd: Path, run_id: str) -> float:
    stamps = [float(o.split()[-1]) for o in outputs(show(cwd, run_id)["events"])
              if o.startswith("[exit code 0]") and o.split()[-1].replace(".", "").isdigit()]
    assert len(stamps) >= 5, stamps
    return max(b - a for a, b in zip(stamps, stamps[1:], strict=False))


def grade_of(run: dict[str, Any]) -> dict[str, Any]:
    return run.get("grade") or {}


# --------------------------------------------------------------------------- 1. the question log


# A question log the agent replaced (it owns the workspace: `mv logs` works on the root-owned
# folder) by 16 MiB of short lines that each look like a signed line with a wrong mac. The ledger
# check parses and signs every line again and builds a problem string per line; it runs in
# `ScenarioRun.integrity()`, called synchronously at the start of `DeliveredCopy.grade_case`, on
# the campaign's event loop.
FORGED_LOG = ("mv logs logs.orig && mkdir logs && python3 -c \"import sys; "
              "sys.stdout.write('{\\\"mac\\\":\\\"0\\\"}\\n' * (16 * 1024 * 1024 // 12))\" > logs/ask.jsonl")


def test_a_flood_of_forged_log_lines_does_not_stall_another_run() -> None:
    with workdir("r8-ledger") as d:
        labels_case(d / "suite" / "lab")
        forger = script(d, "forger", [cmd(FORGED_LOG), {"say": "done"}])
        other = script(d, "other", [*ticker(14), write("predictions.json", labels_ws_json()), {"say": "done"}])
        r = cli("run", str(d / "suite"), "--agent", forger, "--agent", other, "--concurrency", "2", "-q",
                cwd=d, timeout=150)
        assert r.returncode == 0, r.tail()
        runs = runs_by_name(report_json(d))
        g = grade_of(runs["forger"])
        # the forgery is the forger's own scored failure: an integrity incident, never void
        assert runs["forger"]["status"] == "done", runs["forger"]
        assert any(str(i).startswith("integrity:") for i in g.get("incidents", [])), g
        assert len(g["incidents"]) <= 60, len(g["incidents"])
        assert runs["other"]["status"] == "done" and runs["other"]["score"] == pytest.approx(1.0)
        # ... and it costs the other run nothing: its commands follow each other every ~0.5 s
        gap = longest_gap(d, runs["other"]["run_id"])
        assert gap < 3.0, (f"the other run's commands stood still for {gap:.1f} s while the forged question log "
                           "was checked on the event loop")


# --------------------------------------------------------------------------- 2. the hand-over


# 500 files of 1 MB of bytes that are not UTF-8 in deliverables/ (the most `_handover` reads:
# 500 files of at most HANDOVER_FILE_BYTES). Each byte decodes to U+FFFD; the texts go to the
# framing rules in a grading worker of 2 GiB, whose pickled argument is then about 1.5 GB.
HUGE_HANDOVER = ("python3 -c \"\nb = bytes([255]) * 1000000\n"
                 "for i in range(500): open('deliverables/r%04d.md' % i, 'wb').write(b)\n\"")


def test_a_huge_undecodable_handover_is_a_scored_failure_not_a_void_run() -> None:
    with workdir("r8-handover") as d:
        labels_case(d / "suite" / "lab")
        bloater = script(d, "bloater", [cmd(HUGE_HANDOVER), {"say": "done"}])
        honest = script(d, "honest", [write("predictions.json", labels_ws_json()),
                                      write("deliverables/NOTE.md", "Labels are parity.\n"), {"say": "done"}])
        r = cli("run", str(d / "suite"), "--agent", bloater, "--agent", honest, "--concurrency", "2", "-q",
                cwd=d, timeout=150)
        assert not r.timed_out, r.tail()  # (`assay run` exits 1 when a run is void: asserted below)
        rep = report_json(d)
        runs = runs_by_name(rep)
        assert runs["honest"]["status"] == "done" and runs["honest"]["score"] == pytest.approx(1.0)
        assert not rep.get("broken_tasks"), rep.get("broken_tasks")
        bl = runs["bloater"]
        why = ""
        if bl["status"] != "done":
            errs = [e["data"] for e in show(d, bl["run_id"])["events"] if e["kind"] == "error"]
            why = f"; errors: {errs[-2:]}"
        # what the agent handed over is the agent's: a scored 0 (a framing fault at most), never void
        assert bl["status"] == "done", f"the run whose hand-over broke the framing worker is {bl['status']}{why}"
        assert bl["score"] == pytest.approx(0.0)


# --------------------------------------------------------------------------- 3. slow delivered systems


def test_delivered_systems_that_hang_do_not_starve_the_other_runs() -> None:
    """Each scenario grade waits for its worker in a thread of the loop's default executor
    (`asyncio.to_thread(run.call_worker)`), which has min(32, cores + 4) threads; every file
    tool, store save and workspace set-up of every run goes through the same executor. As many
    runs as it has threads, each delivering a `predict.py` that sleeps, hold it until the grade
    timeout (600 s by default; 15 s here)."""
    n = min(32, (os.cpu_count() or 1) + 4)
    if n > 12:
        pytest.skip(f"{n} hanging runs would be needed on this machine")
    with workdir("r8-starve") as d:
        system_case(d / "suite" / "sysc")
        agents: list[str] = []
        for i in range(n):
            agents += ["--agent", script(d, f"hang{i}", [write("system/predict.py", "import time\ntime.sleep(3600)\n"),
                                                         {"say": "done"}])]
        agents += ["--agent", script(d, "honest", [cmd("sleep 4"), write("system/predict.py", PREDICT_OK),
                                                   {"tool": "read_file", "args": {"path": "system/predict.py"}},
                                                   {"say": "done"}])]
        t0 = time.monotonic()
        r = cli("run", str(d / "suite"), *agents, "--concurrency", str(n + 1), "-q", cwd=d, timeout=150,
                env={"ASSAY_GRADE_TIMEOUT_S": "15"})
        assert r.returncode == 0, r.tail()
        rep = report_json(d)
        runs = runs_by_name(rep)
        for i in range(n):  # a system that hangs is its own scored failure
            h = runs[f"hang{i}"]
            assert h["status"] == "done" and h["score"] == pytest.approx(0.0), h
            assert any("timed out" in f["reason"] for f in grade_of(h).get("faults", [])), grade_of(h)
        hon = runs["honest"]
        assert hon["status"] == "done" and hon["score"] == pytest.approx(1.0), hon
        # alone it takes ~5 s (4 s of sleep); it must not wait for the other runs' grade timeouts
        assert hon["duration_s"] < 11, (f"the honest run took {hon['duration_s']:.1f} s (campaign "
                                        f"{time.monotonic() - t0:.0f} s): its file tools waited for threads held "
                                        f"by {n} grades of hanging systems")


# --------------------------------------------------------------------------- 4. odd delivered systems


ODD_SYSTEMS: dict[str, list[dict[str, Any]]] = {
    # killed by a signal of its own
    "sigkill": [write("system/predict.py", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")],
    # NaN and infinities as predictions
    "nonfinite": [write("system/predict.py", "print('[NaN, Infinity, -Infinity, 1e999]')\n")],
    # 40 MB of bytes that are not UTF-8 on stdout and stderr, then a valid-looking last line
    "garbage": [write("system/predict.py", "import os\nfor fd in (1, 2):\n    os.write(fd, bytes([255, 254]) * 20_000_000)\n"
                                             "os.write(1, b'\\n[\"odd\"]\\n')\n")],
    # leaves a child in a new session that outlives it, holding stdout open
    "daemon": [write("system/predict.py", "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(3600)\n"
                                            "print('[]')\n")],
    # system/ replaced by a link to a host folder, and by nothing
    "link": [cmd("rm -rf system && ln -s /etc system")],
    "missing": [cmd("rm -rf system")],
    # the entry point a FIFO, and a folder of mode 000
    "fifo": [cmd("rm -f system/predict.py && mkfifo system/predict.py")],
    "locked": [cmd("chmod 000 system")],
    # a fork bomb bounded by the grade's pids ceiling
    "forks": [write("system/predict.py", "import os, time\nfor _ in range(2000):\n    try:\n        if os.fork() == 0:\n"
                                           "            time.sleep(30)\n            os._exit(0)\n    except OSError:\n"
                                           "        break\nprint('[]')\n")],
}


def test_odd_delivered_systems_are_scored_failures_and_the_task_stays_sound() -> None:
    with workdir("r8-odd") as d:
        system_case(d / "suite" / "sysc")
        agents: list[str] = []
        for name, lines in ODD_SYSTEMS.items():
            agents += ["--agent", script(d, name, [*lines, {"say": "done"}])]
        agents += ["--agent", script(d, "honest", [write("system/predict.py", PREDICT_OK), {"say": "done"}])]
        t0 = time.monotonic()
        r = cli("run", str(d / "suite"), *agents, "--concurrency", "5", "-q", cwd=d, timeout=150,
                env={"ASSAY_GRADE_TIMEOUT_S": "20"})
        took = time.monotonic() - t0
        assert r.returncode == 0, r.tail()
        rep = report_json(d)
        runs = runs_by_name(rep)
        assert not rep.get("broken_tasks"), rep.get("broken_tasks")
        assert runs["honest"]["status"] == "done" and runs["honest"]["score"] == pytest.approx(1.0)
        bad = {name: (runs[name]["status"], runs[name]["score"]) for name in ODD_SYSTEMS
               if runs[name]["status"] != "done" or (runs[name]["score"] or 0) > 0.15}
        assert not bad, f"odd systems that were void or scored: {bad}"
        assert took < 90, took


# --------------------------------------------------------------------------- 5. the workbench


def _post(base: str, path: str, body: dict[str, Any], timeout: float = 60) -> tuple[int, dict[str, Any], float]:
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read()), time.monotonic() - t0
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}"), time.monotonic() - t0


def _get(base: str, path: str, timeout: float = 30) -> tuple[int, dict[str, Any], float]:
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(base + path, timeout=timeout) as r:
            return r.status, json.loads(r.read()), time.monotonic() - t0
    except urllib.error.HTTPError as e:
        return e.code, {}, time.monotonic() - t0


def _wait_state(base: str, sid: str, states: tuple[str, ...], limit: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + limit
    while True:
        _s, state, _t = _get(base, f"/api/play/{sid}")
        if state.get("state") in states or time.monotonic() > deadline:
            return state
        time.sleep(0.3)


def test_a_workbench_hand_over_cannot_void_the_persons_run_or_slow_another_user() -> None:
    """Two people in `assay serve` on a scenario: one hands over 500 MB of undecodable notes
    and submits; the other works on. The first person's run must be a scored failure, and the
    second person's actions and `/healthz` must keep answering at once."""
    with workdir("r8-web") as d:
        labels_case(d / "suite" / "lab")
        store = f"sqlite:///{d / '.assay' / 'assay.db'}"
        (d / ".assay").mkdir()
        with served(d, "--store", store, "--suite", str(d / "suite"), "--create") as (base, _port, _proc):
            sessions = {}
            for who in ("mallory", "alice"):
                s, started, _t = _post(base, "/api/play", {"task_id": "lab/base", "name": who, "campaign": "web"})
                assert s == 200, started
                sessions[who] = str(started["session"])
            for sid in sessions.values():
                assert _wait_state(base, sid, ("running", "done", "error"))["state"] == "running"
            m, a = sessions["mallory"], sessions["alice"]
            s, out, _t = _post(base, f"/api/play/{m}/action", {"tool": "run_command",
                                                                "args": {"command": HUGE_HANDOVER, "timeout_s": 120}})
            assert s == 200, out
            s, out, _t = _post(base, f"/api/play/{m}/action", {"submit": "done"})
            assert s == 200, out
            slow: list[str] = []
            t_end = time.monotonic() + 8
            while time.monotonic() < t_end:  # alice works while mallory's run is graded
                _s, _h, t = _get(base, "/healthz")
                if t > 2.0:
                    slow.append(f"/healthz {t:.1f} s")
                s, out, t = _post(base, f"/api/play/{a}/action", {"tool": "list_files", "args": {"path": "."}})
                if s != 200 or t > 5.0:
                    slow.append(f"alice's list_files: {s} in {t:.1f} s")
                time.sleep(0.3)
            state = _wait_state(base, m, ("done", "error"), limit=90)
            _post(base, f"/api/play/{a}/action", {"submit": "done"})
            _wait_state(base, a, ("done", "error"), limit=60)
        assert not slow, slow
        assert state["state"] == "done", state.get("error")
        run = state["run"]
        assert run["status"] == "done", f"the person's run whose hand-over was big is {run['status']}"
        assert not run["passed"]
