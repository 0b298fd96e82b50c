"""Round 3, class 4: `assay serve` stays available.

The web app's caps are per client address, and on loopback every 127.x.y.z is an address of
its own: these floods come from many of them at once. Each test takes a few seconds.
"""

from __future__ import annotations

import json
import resource
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from assay.env.bwrap import bwrap_available
from tests.helpers import answer_task, clean_env, free_port, served, stop_process
from tests.security._round3 import home, run, script


def _healthy_within(base: str, seconds: float) -> float:
    """Seconds until /healthz answered ok (AssertionError past `seconds`)."""
    t0 = time.monotonic()
    while True:
        try:
            with urllib.request.urlopen(f"{base}/healthz", timeout=2) as r:
                if r.status == 200 and json.loads(r.read())["status"] == "ok":
                    return time.monotonic() - t0
        except OSError:
            pass
        assert time.monotonic() - t0 < seconds, f"/healthz did not answer within {seconds} s"
        time.sleep(0.2)


def _from(address: str, port: int, *, rcvbuf: int | None = None) -> socket.socket:
    s = socket.socket()
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind((address, 0))
    s.connect(("127.0.0.1", port))
    return s


def test_half_open_heads_from_80_loopback_addresses_leave_the_server_answering(tmp_path: Path) -> None:
    """1,280 connections, 16 from each of 80 addresses (under the per-address caps), each with a
    request head of 60 KB never finished: more than the server's 1,024 connections. The oldest
    are reset to make room, so a newcomer is served at once."""
    answer_task(tmp_path / "t")
    with served(tmp_path) as (base, port, _proc):
        socks = []
        try:
            for a in range(80):
                for _ in range(16):
                    try:
                        s = _from(f"127.0.{a // 250 + 1}.{a % 250 + 2}", port)
                        s.sendall(b"GET / HTTP/1.1\r\nX-Slow: " + b"a" * 60_000)
                    except OSError:  # reset by the server (a cap, an eviction): as a flood goes
                        continue
                    socks.append(s)
            assert _healthy_within(base, 5) < 5
        finally:
            for s in socks:
                s.close()
    assert "reset to make room" in (tmp_path / "serve.log").read_text()


@contextmanager
def _serve_with_few_descriptors(cwd: Path, limit: int) -> Iterator[tuple[str, int]]:
    """`assay serve` with a descriptor limit of `limit`, so its connection cap is small (netguard.open_cap)."""
    port = free_port()
    with open(cwd / "serve.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "assay.cli", "serve", "--host", "127.0.0.1", "--port",
                                 str(port)], cwd=cwd, env=clean_env(), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL,
                                preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)))
    try:
        _healthy_within(f"http://127.0.0.1:{port}", 30)
        yield f"http://127.0.0.1:{port}", port
    finally:
        stop_process(proc, timeout=20)


@pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")
def test_readers_that_never_read_a_large_page_do_not_hold_the_server(tmp_path: Path) -> None:
    """A stored run with a 3 MB final message; 90 connections from 3 addresses ask for it with a
    4 KB receive buffer and never read, more than the server's cap (66 connections at a
    descriptor limit of 900). The server answers /healthz while they are all still open."""
    cwd = home(tmp_path)
    t = answer_task(cwd / "t")
    agent = script(cwd / "big.jsonl", [{"say": "lorem ipsum dolor " * 170_000}])
    run_id = run(cwd, str(t), "--agent", agent)[("t", agent)]["run_id"]
    with _serve_with_few_descriptors(cwd, 900) as (base, port):
        socks = []
        try:
            for a in range(3):
                for _ in range(30):
                    try:
                        s = _from(f"127.0.9.{a + 2}", port, rcvbuf=4096)
                        s.sendall(f"GET /api/runs/{run_id} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
                    except OSError:
                        continue
                    socks.append(s)
            assert _healthy_within(base, 15) < 15
            time.sleep(1)
            assert _healthy_within(base, 3) < 3  # and stays so, the readers still open
        finally:
            for s in socks:
                s.close()
