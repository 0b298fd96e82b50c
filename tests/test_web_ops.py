"""`assay.web.ops.run_server`'s stop: SIGTERM ends the process within a few seconds even while
sync routes are busy in their threads (which asyncio's teardown and the interpreter's exit
would wait for), with exit status 0 and a line saying how many requests it cut short; a stop
with nothing in flight ends as before, without that line."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from assay.web.ops import GRACEFUL_S, STRAGGLERS_S
from tests.helpers import clean_env, free_port

SERVER = """
import sys, time
from fastapi import FastAPI
from assay.web.ops import run_server

app = FastAPI()

@app.get("/slow")
def slow() -> dict[str, str]:  # a sync route: it runs in a thread, which no stop can cut short
    time.sleep(60)
    return {}

@app.get("/ok")
def ok() -> dict[str, str]:
    return {}

print("stopped by", run_server(app, "127.0.0.1", int(sys.argv[1])), flush=True)
"""


def _serve(tmp_path: Path) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    proc = subprocess.Popen([sys.executable, str(script), str(port)], env=clean_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"{base}/ok", timeout=5).read()
            return proc, base
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.1)


def _stop(proc: subprocess.Popen[str]) -> tuple[float, str]:
    t = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError("SIGTERM did not stop the server in 30 s") from None
    return time.monotonic() - t, out


def test_sigterm_ends_the_process_while_sync_routes_are_busy(tmp_path: Path) -> None:
    proc, base = _serve(tmp_path)

    def ask() -> None:
        try:
            urllib.request.urlopen(f"{base}/slow", timeout=60).read()
        except OSError:  # cut off by the stop: what this test expects
            return

    for _ in range(3):
        threading.Thread(target=ask, daemon=True).start()
    time.sleep(1.0)
    took, out = _stop(proc)
    assert took < GRACEFUL_S + STRAGGLERS_S + 2.0, (took, out)
    assert proc.returncode == 0, out
    assert "3 request(s) still running in a thread at the stop: cut short" in out, out
    assert "stopped by SIGTERM" in out, out  # run_server returned, and its caller had its say


def test_sigterm_with_nothing_in_flight_ends_as_before(tmp_path: Path) -> None:
    proc, _base = _serve(tmp_path)
    took, out = _stop(proc)
    assert took < 2.0 and proc.returncode == 0, (took, out)
    assert "stopped by SIGTERM" in out and "cut short" not in out, out
