"""Round 7 red team: reach of graded code, stalls of other runs, crashes of the CLI.

Real `assay run` campaigns with scripted agents in the real bubblewrap sandbox."""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from tests.helpers import assay, report, write_task

pytestmark = [pytest.mark.slow]

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

SECRET = "expected-7f3a91c2e5"


def _checks_task(folder: Path, checks: str, title: str = "checks task") -> Path:
    spec = {"title": title, "domain": "test", "execution": "multi-step-with-tools",
            "prompt": "Write solve.py printing the answer.",
            "grading": {"type": "automated", "checks": "checks.py"}}
    return write_task(folder, spec, {"checks.py": checks, "workspace/README.md": "hi\n"})


def _script(path: Path, steps: list[dict]) -> Path:
    path.write_text("".join(json.dumps(s) + "\n" for s in steps))
    return path


def _no_crash(r) -> None:
    text = r.stdout + r.stderr
    assert "Traceback" not in text, text[-3000:]
    assert "fault of its own" not in text, text[-3000:]
    assert r.returncode in (0, 2), (r.returncode, text[-3000:])


def _runs(cwd: Path) -> list[dict]:
    r = assay("runs", "--json", "--limit", "0", cwd=cwd)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    return data if isinstance(data, list) else data.get("runs", data)


def _every_view(cwd: Path) -> None:
    for fmt in ("--json", "--md", "--html", "--csv"):
        _no_crash(assay("report", fmt, str(cwd / f"rep{fmt[2:]}"), cwd=cwd))
    _no_crash(assay("runs", cwd=cwd))
    for run in _runs(cwd):
        rid = run.get("id") or run.get("run_id")
        _no_crash(assay("show", str(rid), cwd=cwd))
        _no_crash(assay("show", str(rid), "--json", cwd=cwd))


HONEST_SLOW = [{"tool": "run_command", "args": {"command": "sleep 1"}} for _ in range(20)] + [
    {"tool": "write_file", "args": {"path": "answer.txt", "content": "42\n"}}, {"say": "done"}]

ANSWER_TASK = {
    "title": "write the answer", "domain": "test", "execution": "multi-step-with-tools",
    "prompt": "Write 42 into answer.txt.",
    "contract": [{"path": "answer.txt", "predicate": "regex", "pattern": "^42\\s*$"}],
}


@needs_bwrap
def test_many_refused_links_do_not_stall_another_run(tmp_path: Path) -> None:
    """20,000 absolute symlinks in the workspace: each is a refusal of the checks' grading copy.
    Round 7: the grade's list of refusals was deduplicated by a membership test against the
    growing list, on the event loop (O(n^2): 90,000 took about 49 s, every run frozen). An honest
    run of twenty one-second commands beside it keeps its pace (no gap of 15 s between its
    steps), and the attacker's grade lists at most 1,000 refusals and a count of the rest."""
    tasks = tmp_path / "tasks"
    _checks_task(tasks / "links", "def grade(workspace, final_message):\n    return {'ok': 1}\n")
    write_task(tasks / "honest", ANSWER_TASK)
    make = ("python3 -c \"import os\nos.makedirs('l', exist_ok=True)\n"
            "[os.symlink('/etc/passwd', 'l/%d' % i) for i in range(20000)]\"")
    attacker = _script(tmp_path / "a.jsonl", [{"tool": "run_command", "args": {"command": make, "timeout_s": 600}},
                                              {"say": "done"}])
    honest = _script(tmp_path / "h.jsonl", HONEST_SLOW)
    r = assay("run", str(tasks), "--agent", f"script:{attacker}", "--agent", f"script:{honest}",
              "--concurrency", "4", "-q", cwd=tmp_path)
    _no_crash(r)
    runs = {(x["agent"].rsplit("/", 1)[-1], x["task_id"]): x for x in report(tmp_path)["runs"]}
    honest_run = runs[("h.jsonl", "honest")]
    shown = json.loads(assay("show", honest_run["run_id"], "--json", cwd=tmp_path).stdout)
    ts = [e["t"] for e in shown["events"] if e.get("kind") in ("tool_call", "tool_result")]
    gaps = [b - a for a, b in zip(ts, ts[1:], strict=False)]
    assert honest_run["status"] == "done" and max(gaps) < 15, max(gaps)
    links = runs[("a.jsonl", "links")]
    refused = links["grade"]["copy_refused"]
    assert len(refused) == 1001 and refused[-1][0] == "" and "more entries" in refused[-1][1], refused[-1]


@needs_bwrap
def test_program_started_by_checks_cannot_read_the_expected_value(tmp_path: Path) -> None:
    """Control: solve.py, started by the checks, hunts the expected value: its own stdin (the
    runner's pipe), /proc of every process it sees (mem through maps, environ, cmdline, fd/*,
    task/*/mem), the checks folder, /tmp and /dev/shm. It prints what it finds; score 0."""
    checks = f"""
import subprocess, sys
EXPECTED = "{SECRET}"
def grade(workspace, final_message):
    out = subprocess.run([sys.executable, workspace + "/solve.py"], capture_output=True, text=True,
                         timeout=60, cwd=workspace).stdout
    return {{"right": EXPECTED in out}}
"""
    _checks_task(tmp_path / "tasks" / "reach", checks)
    solve = r'''
import os, re, glob
NEEDLE = b"expected-"
found = []
def look(data):
    for m in re.finditer(rb"expected-[0-9a-f]{10}", data):
        found.append(m.group().decode())
def tryread(p, n=1 << 22):
    try:
        with open(p, "rb") as f:
            look(f.read(n))
    except Exception:
        pass
try:
    look(os.read(0, 1 << 20))
except Exception:
    pass
for d in ["/run/assay", "/run/assay/checks", "/tmp", "/dev/shm", "/workspace", os.getcwd()]:
    for p in glob.glob(d + "/**", recursive=True):
        if os.path.isfile(p):
            tryread(p)
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) == os.getpid():
        continue
    for name in ("environ", "cmdline", "stat", "status", "wchan", "syscall", "io"):
        tryread(f"/proc/{pid}/{name}")
    for fd in glob.glob(f"/proc/{pid}/fd/*"):
        tryread(fd)
    for mem in [f"/proc/{pid}/mem"] + glob.glob(f"/proc/{pid}/task/*/mem"):
        try:
            maps = open(f"/proc/{pid}/maps").read().splitlines()
            with open(mem, "rb") as f:
                for line in maps:
                    lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                    try:
                        f.seek(lo); look(f.read(min(hi - lo, 1 << 24)))
                    except Exception:
                        pass
        except Exception:
            pass
print(" ".join(sorted(set(found))) or "nothing")
'''
    agent = _script(tmp_path / "a.jsonl", [{"tool": "write_file", "args": {"path": "solve.py", "content": solve}},
                                           {"say": "done"}])
    r = assay("run", str(tmp_path / "tasks"), "--agent", f"script:{agent}", "-q", cwd=tmp_path)
    _no_crash(r)
    rep = report(tmp_path)
    blob = json.dumps(rep)
    scores = [x for x in _runs(tmp_path)]
    assert scores, blob[:1000]
    for x in scores:
        s = x.get("score")
        assert s is not None and s < 0.5, x


@needs_bwrap
def test_daemon_left_by_program_checks_start_does_not_hold_the_grade(tmp_path: Path) -> None:
    """Control: the agent's program, started by the checks, forks a setsid child that ignores
    SIGTERM/SIGHUP and keeps the checks' stdout open, sleeping 10 minutes. The grade must end
    when the runner prints its result, not at the checks' time limit."""
    checks = """
import subprocess, sys
def grade(workspace, final_message):
    subprocess.run([sys.executable, workspace + "/solve.py"], timeout=60, cwd=workspace)
    return {"ran": 1}
"""
    _checks_task(tmp_path / "tasks" / "daemon", checks)
    solve = ("import os, signal, time\n"
             "if os.fork() == 0:\n    os.setsid()\n"
             "    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT): signal.signal(s, signal.SIG_IGN)\n"
             "    time.sleep(600)\n")
    agent = _script(tmp_path / "a.jsonl", [{"tool": "write_file", "args": {"path": "solve.py", "content": solve}},
                                           {"say": "done"}])
    t0 = time.monotonic()
    r = assay("run", str(tmp_path / "tasks"), "--agent", f"script:{agent}", "-q", cwd=tmp_path)
    took = time.monotonic() - t0
    _no_crash(r)
    runs = _runs(tmp_path)
    assert runs and all(x.get("score") == 1 for x in runs), runs
    assert took < 60, took


@needs_bwrap
def test_hostile_names_refused_by_the_copy_do_not_break_any_view(tmp_path: Path) -> None:
    """Control: names with ESC, newline, U+202E and invalid UTF-8 on FIFOs, sockets, hard links
    and absolute links, refused by the checks' copy and recorded in the grade; `assay show`
    (text and JSON), `runs` and every report format end cleanly."""
    _checks_task(tmp_path / "tasks" / "names", "def grade(workspace, final_message):\n    return {'ok': 1}\n")
    make = ("python3 - <<'EOF'\nimport os, socket\n"
            "for i, n in enumerate([b'a\\x1b[31mred', b'b\\nnew', 'c\\u202ertl'.encode(), b'd\\xff\\xfe', b'e\\x00'[:-1] + b'\\x7f']):\n"
            "    os.mkfifo(b'f_' + n)\n"
            "    s = socket.socket(socket.AF_UNIX); s.bind(b's_' + n)\n"
            "    open(b'h_' + n, 'w').write('x'); os.link(b'h_' + n, b'h2_' + n)\n"
            "    os.symlink(b'/etc/shadow', b'l_' + n)\n"
            "EOF")
    agent = _script(tmp_path / "a.jsonl", [{"tool": "run_command", "args": {"command": make}},
                                           {"say": "done \x1b[2J \udcff \u202e"}])
    r = assay("run", str(tmp_path / "tasks"), "--agent", f"script:{agent}", "-q", cwd=tmp_path)
    _no_crash(r)
    _every_view(tmp_path)


@needs_bwrap
def test_checks_returning_a_huge_result_do_not_stall_or_crash(tmp_path: Path) -> None:
    """Control: a hostile task's checks return 60,000 named scores (about 1 MB), with names of
    control characters; the run is stored and every view ends cleanly within bounds."""
    checks = ("def grade(workspace, final_message):\n"
              "    return {('k\\x1b\\u202e%d' % i): (i % 2) for i in range(60000)}\n")
    _checks_task(tmp_path / "tasks" / "big", checks)
    agent = _script(tmp_path / "a.jsonl", [{"say": "done"}])
    t0 = time.monotonic()
    r = assay("run", str(tmp_path / "tasks"), "--agent", f"script:{agent}", "-q", cwd=tmp_path)
    _no_crash(r)
    t1 = time.monotonic()
    _every_view(tmp_path)
    t2 = time.monotonic()
    print("run", t1 - t0, "views", t2 - t1)
    assert t1 - t0 < 60 and t2 - t1 < 60, (t1 - t0, t2 - t1)


@needs_bwrap
def test_checks_result_with_odd_values_is_scored_not_a_crash(tmp_path: Path) -> None:
    """Control: checks returning NaN, infinity, a huge int, None, a string, a nested list and a
    non-dict each end as a scored run or a fault; no command crashes."""
    tasks = tmp_path / "tasks"
    bodies = {
        "nan": "{'a': float('nan'), 'b': float('inf'), 'c': -float('inf')}",
        "bigint": "{'a': 10**300, 'b': -10**300}",
        "odd": "{'a': None, 'b': 'yes', 'c': [1, [2]], 'd': {'e': 1}}",
        "list": "[1, 2, 3]",
        "number": "float('nan')",
        "emptykey": "{'': 1, '\\x00': 0.5}",
    }
    for name, body in bodies.items():
        _checks_task(tasks / name, f"def grade(workspace, final_message):\n    return {body}\n", title=name)
    agent = _script(tmp_path / "a.jsonl", [{"say": "done"}])
    r = assay("run", str(tasks), "--agent", f"script:{agent}", "-q", cwd=tmp_path)
    _no_crash(r)
    _every_view(tmp_path)
