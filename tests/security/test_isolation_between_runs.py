"""Category 5: one run cannot hurt another.

Runs of one campaign share one harness process. A run that exhausts what that process has
(file descriptors, memory, the store) must not void, stall or starve the other runs:
- thousands of connections held open to a scenario's `ask.sock` from inside the sandbox;
- a command printing gigabytes (output truncated, memory and disk bounded);
- a flood of huge stakeholder messages (the ledger and the transcript stay bounded).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.security._cases import answer_task, labels_case
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
)

pytestmark = pytest.mark.skipif(not bwrap_ok(), reason="bubblewrap is not installed")

MiB = 1024**2

FLOOD = """\
import errno, socket, sys, time
want, hold = int(sys.argv[1]), float(sys.argv[2])
socks, t0, last = [], time.time(), ""
while len(socks) < want and time.time() - t0 < 10:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setblocking(False)
    try:
        s.connect("/run/assay/ask.sock")
    except BlockingIOError:  # the listen backlog is full: wait for the server to accept more
        s.close()
        time.sleep(0.002)
        continue
    except OSError as e:
        s.close()
        last = repr(e)
        if e.errno in (errno.EMFILE, errno.ENFILE):
            break
        time.sleep(0.01)
        continue
    socks.append(s)
print("HELD", len(socks), "after", round(time.time() - t0, 1), "s", last, flush=True)
time.sleep(hold)
"""


@pytest.fixture(scope="module")
def socket_flood() -> Iterator[dict[str, Any]]:
    """One agent on two tasks (--concurrency 2): on the scenario it floods ask.sock with ~22,000
    held connections (two processes, each under its own open-file limit); on the contract task
    it does ordinary work, one step every two seconds, while the flood is on."""
    with workdir("iso-flood") as wd:
        labels_case(wd / "suite" / "labels")
        answer_task(wd / "suite" / "answer")
        branch = ("if [ -S /run/assay/ask.sock ]; then "
                  "python3 flood.py 11000 6 & python3 flood.py 11000 6 & wait; echo FLOOD-ATTEMPTED; "
                  "else sleep 2; echo step0 > progress.txt; fi")
        lines = [{"tool": "write_file", "args": {"path": "flood.py", "content": FLOOD}}, cmd(branch, 120)]
        lines += [cmd(f"[ -S /run/assay/ask.sock ] || {{ sleep 2; echo step{i} >> progress.txt; }}") for i in range(1, 7)]
        lines += [cmd("[ -S /run/assay/ask.sock ] || echo 42 > answer.txt"), {"say": "done"}]
        spec = script(wd, "agent", lines)
        r = cli("run", str(wd / "suite"), "--agent", spec, "--concurrency", "2", cwd=wd, timeout=240)
        runs = runs_by_name(report_json(wd)) if (wd / ".assay" / "assay.db").exists() else {}
        flood_out = ""
        if "agent@labels/base" in runs:
            flood_out = outputs(show(wd, runs["agent@labels/base"]["run_id"])["events"])[1]
        yield {"cwd": wd, "cli": r, "runs": runs, "flood": flood_out}


def test_connection_flood_was_mounted(socket_flood: dict[str, Any]) -> None:
    assert "FLOOD-ATTEMPTED" in socket_flood["flood"], socket_flood["flood"] or socket_flood["cli"].tail()


def test_connection_flood_does_not_void_other_runs(socket_flood: dict[str, Any]) -> None:
    r = socket_flood["cli"]
    assert not r.timed_out, r.tail()
    run = socket_flood["runs"].get("agent@answer")
    assert run is not None, r.tail()
    held = re.findall(r"HELD (\d+)", socket_flood["flood"])
    assert run["status"] == "done" and run["passed"] is True, (
        f"the other run of the campaign ended {run['status']} ({run['end_reason']}: {run.get('void_reason')}) "
        f"while the scenario run held {'+'.join(held) or '?'} connections to ask.sock")


def test_connection_flood_does_not_void_the_flooding_run_itself(socket_flood: dict[str, Any]) -> None:
    run = socket_flood["runs"].get("agent@labels/base")
    assert run is not None and run["status"] == "done", run


# --------------------------------------------------------------------------- output floods


@pytest.fixture(scope="module")
def output_flood() -> Iterator[dict[str, Any]]:
    with workdir("iso-output") as wd:
        answer_task(wd / "suite" / "answer")
        spec = script(wd, "loud", [cmd("yes 'all work and no play makes jack a dull boy' | head -c 2000000000; "
                                       "echo; echo FLOOD-END", 180),
                                   cmd("echo 42 > answer.txt"), {"say": "done"}])
        r = cli("run", str(wd / "suite"), "--agent", spec, cwd=wd, timeout=240, measure_rss=True)
        (run,) = report_json(wd)["runs"]
        events = show(wd, run["run_id"])["events"]
        db = wd / ".assay" / "assay.db"
        size = sum(p.stat().st_size for p in db.parent.glob("assay.db*"))
        yield {"cli": r, "run": run, "out": outputs(events)[0], "db_bytes": size}


def test_gigabytes_of_output_are_truncated(output_flood: dict[str, Any]) -> None:
    r = output_flood["cli"]
    assert not r.timed_out and r.returncode == 0, r.tail()
    out = output_flood["out"]
    assert "truncated" in out and len(out) < 100_000, out[:300]
    assert output_flood["run"]["passed"] is True


def test_gigabytes_of_output_keep_memory_and_disk_bounded(output_flood: dict[str, Any]) -> None:
    rss = output_flood["cli"].max_rss_bytes
    assert rss is not None and rss < 1024 * MiB, f"peak memory of the harness: {rss}"
    assert output_flood["db_bytes"] < 20 * MiB, f"the store grew to {output_flood['db_bytes'] / MiB:.0f} MiB"


# --------------------------------------------------------------------------- stakeholder floods

ASK_FLOOD = """\
import json, socket
big = "label " + "x" * (100 * 1024)
ok = 0
for i in range(120):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("/run/assay/ask.sock")
    s.sendall((json.dumps({"op": "ask", "to": "owner", "question": big + str(i)}) + "\\n").encode())
    s.shutdown(socket.SHUT_WR)
    data = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
    s.close()
    ok += bool(data)
print("ASKED", ok, "x", len(big), "chars", flush=True)
"""


def test_stakeholder_message_flood_keeps_the_store_bounded() -> None:
    """120 questions of 100 KB each (12 MB): the ledger, the transcript and the store must keep
    what matters (the count, the cost), not every byte."""
    with workdir("iso-asks") as wd:
        labels_case(wd / "labels")
        flood = script(wd, "asker", [{"tool": "write_file", "args": {"path": "flood.py", "content": ASK_FLOOD}},
                                     cmd("python3 flood.py", 180), {"say": "done"}])
        benign = script(wd, "benign", [cmd("python3 -c \"import json; n = json.load(open('data/inputs.json')); "
                                           "json.dump(['odd' if x % 2 else 'even' for x in n], "
                                           "open('predictions.json', 'w'))\""), {"say": "done"}])
        r = cli("run", str(wd / "labels"), "--agent", flood, "--agent", benign, "--concurrency", "2", cwd=wd,
                timeout=300, measure_rss=True)
        assert not r.timed_out, r.tail()
        runs = runs_by_name(report_json(wd))
        out = outputs(show(wd, runs["asker"]["run_id"])["events"])[1]
        assert "ASKED 120" in out, out[:500]
        assert runs["benign"]["status"] == "done" and runs["benign"]["grade"]["kpi"] == 1.0, runs["benign"]
        assert runs["asker"]["status"] == "done", runs["asker"]
        size = sum(p.stat().st_size for p in (wd / ".assay").glob("assay.db*"))
        assert size < 4 * MiB, (f"12 MB of stakeholder messages grew the store to {size / MiB:.0f} MiB "
                                 f"(peak harness memory {(r.max_rss_bytes or 0) / MiB:.0f} MiB)")
