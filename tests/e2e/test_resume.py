"""kill -9 in the middle of a campaign, run it again: exactly one finished run per key."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from assay.env.bwrap import bwrap_available
from tests.helpers import answer_task, assay, report

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")


def test_kill_minus_nine_then_resume(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o711)
    tasks = tmp_path / "tasks"
    for i in range(8):
        answer_task(tasks / f"t{i}", want=str(40 + i))
    marker = f"resume-{os.getpid()}-{tmp_path.name}"
    script = tmp_path / "slow.jsonl"
    script.write_text("\n".join(json.dumps(x) for x in [
        {"tool": "run_command", "args": {"command": f"sleep 1.5; echo {marker}"}},
        {"tool": "write_file", "args": {"path": "answer.txt", "content": "nope"}},
        {"say": "done"},
    ]) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAY_")}
    cmd = [sys.executable, "-m", "assay.cli", "run", str(tasks), "--agent", f"script:{script}", "--agent", "noop",
           "--concurrency", "2", "-q"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    db = tmp_path / ".assay" / "assay.db"
    deadline = time.monotonic() + 60
    import sqlite3

    stored = 0
    while time.monotonic() < deadline:
        time.sleep(0.3)
        if db.exists():
            try:
                with sqlite3.connect(db) as c:
                    stored = c.execute("select count(*) from runs").fetchone()[0]
            except sqlite3.Error:
                continue
            if stored >= 3:
                break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert 3 <= stored < 16, f"kill came too late or too early ({stored} runs stored)"
    r = assay("run", str(tasks), "--agent", f"script:{script}", "--agent", "noop", "--concurrency", "4", "-q",
              cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rep = report(tmp_path)
    keys = [(x["task_id"], x["agent"], x["level"], x["epoch"]) for x in rep["runs"]]
    assert len(keys) == 16 and len(set(keys)) == 16
    assert all(x["status"] == "done" for x in rep["runs"])
    with sqlite3.connect(db) as c:
        done = c.execute("select key_digest, count(*) from runs where status='done' group by key_digest").fetchall()
        (integrity,) = c.execute("pragma integrity_check").fetchone()
    assert integrity == "ok"
    assert len(done) == 16 and all(n == 1 for _, n in done)
    # No sandbox process outlived the killed scheduler.
    leftover = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    assert not leftover
