"""Round 5 red team, class 6: the web app's availability for everyone. Written without reading
the other tests in tests/security/.

The attack: a run whose transcript is big (an agent wrote a few large files with write_file:
each call's arguments are up to 8 MiB, and a person's play action up to 1 MiB) is viewed by a
handful of visitors at once. Nobody needs to sign in to view a run on a local server."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from assay.env.sandbox import bwrap_available
from tests.helpers import assay, served, write_task

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")]

HEALTH_S = 5.0
"""What the web app's own availability defence promises a /healthz under attack."""
PAGE_S = 2.0
"""What it promises a page while a session's worker is busy (docs/SECURITY.md part 14)."""


def _big_run(tmp_path: Path) -> tuple[Path, str]:
    """A store with one run whose transcript holds 6 write_file calls of 6 MiB of markup-heavy text."""
    os.chmod(tmp_path, 0o711)
    cwd = tmp_path / "w"
    cwd.mkdir()
    os.chmod(cwd, 0o711)
    write_task(tmp_path / "suite" / "t1", {
        "title": "write", "domain": "test", "execution": "multi-step-with-tools",
        "prompt": "Write 42 into answer.txt.",
        "contract": [{"path": "answer.txt", "predicate": "regex", "pattern": "^42"}],
    }, {"workspace/README.md": "hi\n"})
    big = "<b>x</b>&" * (6 * 1024 * 1024 // 9)
    lines = [{"tool": "write_file", "args": {"path": f"f{i}.html", "content": big}} for i in range(6)]
    lines += [{"tool": "write_file", "args": {"path": "answer.txt", "content": "42\n"}}, {"say": "done"}]
    script = tmp_path / "big.jsonl"
    script.write_text("".join(json.dumps(x) + "\n" for x in lines))
    r = assay("run", str(tmp_path / "suite"), "--agent", f"script:{script}", "-q", cwd=cwd)
    assert r.returncode == 0, r.stdout[-1000:] + r.stderr[-1000:]
    rid = json.loads(assay("runs", "--json", cwd=cwd).stdout)["runs"][0]["run_id"]
    return cwd, rid


def _viewers(base: str, path: str, n: int, until: float, pause: float = 0.0) -> list[threading.Thread]:
    def view() -> None:
        while time.monotonic() < until:
            try:
                with urllib.request.urlopen(base + path, timeout=120) as r:
                    while r.read(1 << 20):
                        pass
            except OSError:
                time.sleep(0.5)
            time.sleep(pause)  # the app refuses more than 50 requests a second from one address

    threads = [threading.Thread(target=view, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    return threads


def _rss_mb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            return int(next(ln for ln in f if ln.startswith("VmRSS")).split()[1]) // 1024
    except (OSError, StopIteration):
        return 0


def _health_under(base: str, path: str, pid: int, seconds: float = 30) -> tuple[float, int]:
    """(the longest /healthz, the server's peak RSS in MB) while 8 visitors read `path` again
    and again for `seconds`."""
    until = time.monotonic() + seconds
    viewers = _viewers(base, path, 8, until)
    worst, rss = 0.0, 0
    time.sleep(1.0)
    while time.monotonic() < until:
        t = time.monotonic()
        with contextlib.suppress(OSError):  # a refused /healthz counts with the time it took
            urllib.request.urlopen(f"{base}/healthz", timeout=20).read()
        worst = max(worst, time.monotonic() - t)
        rss = max(rss, _rss_mb(pid))
        time.sleep(0.2)
    for v in viewers:
        v.join(timeout=0.1)
    return worst, rss


def test_viewers_of_a_big_run_do_not_make_the_app_unavailable(tmp_path: Path) -> None:
    cwd, rid = _big_run(tmp_path)
    with served(cwd) as (base, _port, proc):
        t0 = time.monotonic()
        with urllib.request.urlopen(f"{base}/runs/{rid}", timeout=120) as r:
            body = r.read()
        size = len(body)
        alone = time.monotonic() - t0
        worst, rss = _health_under(base, f"/runs/{rid}", proc.pid)
    assert worst < HEALTH_S, (f"/healthz took up to {worst:.1f} s; one view of the run alone: {alone:.1f} s, "
                              f"{size / 1e6:.0f} MB; server RSS up to {rss} MB")
    # The page is a bounded window: each big event clipped, saying so, the whole event a link away.
    assert size < 3_000_000, size
    assert rss < 1024, f"server RSS up to {rss} MB"
    assert b"bytes more of this event" in body and f"/api/runs/{rid}/events/".encode() in body


def test_readers_of_a_big_runs_json_do_not_make_the_app_unavailable(tmp_path: Path) -> None:
    """`/api/runs/{id}` is what `assay show --json` prints, whole: it is streamed from the store
    a page of events at a time, so eight readers of a 36 MiB transcript leave /healthz answering
    and each gets the whole run. Built whole per request it peaked at 1.66 GB here; streamed,
    1.13 GB (the threads that send the pieces keep freed memory in their malloc arenas)."""
    cwd, rid = _big_run(tmp_path)
    want = json.loads(assay("show", rid, "--json", cwd=cwd).stdout)
    with served(cwd) as (base, _port, proc):
        with urllib.request.urlopen(f"{base}/api/runs/{rid}", timeout=120) as r:
            got = json.loads(r.read())
        worst, rss = _health_under(base, f"/api/runs/{rid}", proc.pid)
    assert got == want
    assert worst < HEALTH_S, f"/healthz took up to {worst:.1f} s; server RSS up to {rss} MB"
    assert rss < 1400, f"server RSS up to {rss} MB"


def test_sigterm_stops_the_app_within_a_few_seconds_while_big_pages_render(tmp_path: Path) -> None:
    cwd, rid = _big_run(tmp_path)
    with served(cwd) as (base, _port, proc):
        until = time.monotonic() + 60
        _viewers(base, f"/runs/{rid}", 6, until)
        time.sleep(4.0)
        t = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):  # still running: the assertion below says so
            proc.wait(timeout=60)
        took = time.monotonic() - t
        code = proc.returncode
    assert took < 5.0, f"stopped {took:.1f} s after SIGTERM"
    assert code == 0, code


def test_control_viewers_of_ordinary_runs_leave_the_app_available(tmp_path: Path) -> None:
    """Control: eight visitors on the campaign page and the report API leave /healthz fast."""
    cwd, _rid = _big_run(tmp_path)
    with served(cwd) as (base, _port, _proc):
        until = time.monotonic() + 15
        _viewers(base, "/campaigns/default", 4, until, pause=0.5)
        _viewers(base, "/api/report", 4, until, pause=0.5)
        worst = 0.0
        while time.monotonic() < until:
            t = time.monotonic()
            urllib.request.urlopen(f"{base}/healthz", timeout=20).read()
            worst = max(worst, time.monotonic() - t)
            time.sleep(0.2)
    assert worst < HEALTH_S, worst


# --------------------------------------------------------------------------- a play session's own transcript


def _post(base: str, path: str, body: dict) -> dict:
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def test_control_polling_a_big_play_session_leaves_the_app_answering(tmp_path: Path) -> None:
    """Control: a visitor's own session of 60 write_file actions of 1 MiB (a ~115 MB transcript
    in the server) polled with ?since=0: each poll answers a window of about 1 MiB
    (`play_session.POLL_BYTES`; before, the whole transcript, and /healthz waited up to 2.8 s
    on a loaded machine), so /healthz asked while a poll is answered comes back within 2 s."""
    from tests.helpers import answer_task

    os.chmod(tmp_path, 0o711)
    cwd = tmp_path / "w"
    cwd.mkdir()
    os.chmod(cwd, 0o711)
    answer_task(tmp_path / "suite" / "t1")
    with served(cwd, "--suite", str(tmp_path / "suite")) as (base, _port, _proc):
        sid = _post(base, "/api/play", {"task_id": "t1", "name": "mallory"})["session"]
        deadline = time.monotonic() + 60
        while json.loads(urllib.request.urlopen(f"{base}/api/play/{sid}?since=999999", timeout=30).read())[
                "state"] != "running":
            assert time.monotonic() < deadline
            time.sleep(0.5)
        content = '"\\' * 240_000  # 480,000 characters; twice that once written as JSON
        for _ in range(60):
            out = _post(base, f"/api/play/{sid}/action", {"tool": "write_file",
                                                         "args": {"path": "f.txt", "content": content}})
            assert out["output"].startswith("wrote"), out
            time.sleep(0.03)  # under the app's 50 requests a second per address
        # One visitor's poll of its own page at a time; /healthz asked while the poll is being answered.
        worst, one = 0.0, 0.0
        for _ in range(5):
            t0 = time.monotonic()
            poll = threading.Thread(target=lambda: urllib.request.urlopen(f"{base}/api/play/{sid}?since=0",
                                                                          timeout=120).read(), daemon=True)
            poll.start()
            time.sleep(0.5)
            t = time.monotonic()
            urllib.request.urlopen(f"{base}/healthz", timeout=60).read()
            worst = max(worst, time.monotonic() - t)
            poll.join(timeout=120)
            one = max(one, time.monotonic() - t0)
            time.sleep(0.5)
    assert worst < PAGE_S, f"/healthz took up to {worst:.1f} s while one poll of the session ({one:.1f} s) was answered"
