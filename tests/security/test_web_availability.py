"""`assay serve` stays up for everyone (issue 25, part 7, and two attacks on the web app).

Each test starts the real `assay serve` in a subprocess on a free 127.0.0.1 port and attacks it:

- 20,000 half-open connections (a TCP connect, part of a request line, then nothing) from one
  address, and 10,000 from 200 addresses, against a server whose descriptor limit is 4,096:
  `/healthz` (from another loopback address) keeps answering, the server never runs out of
  descriptors, and its log stays small, with no traceback;
- a slowloris client (a header byte a second) and a slow body are dropped after their
  timeouts, while a normal keep-alive client is not disturbed;
- a play action that runs long (`sleep 30`) delays neither `/healthz` nor another person's
  session, and SIGTERM during it stops the server within a few seconds;
- a session whose worker is frozen (SIGSTOP: it stands for anything that holds the worker's
  process, such as a pattern run in C or a blocked system call) still answers its page from
  the server's mirror; an action in it ends at its limit with a 504 saying why, the session
  is replayed and goes on; SIGTERM stops the server within a few seconds even then;
- a `run_command` with a 300-character `cwd` is a tool error shown to the person, and the
  run goes on and is graded (not void).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import clean_env, free_port, stop_process
from tests.security._cases import answer_task
from tests.security._support import bwrap_ok, reap, workdir

SERVER_NOFILE = 4096  # the server's descriptor limit (soft and hard): the floods are several times it
PROBE_BOUND_S = 5.0  # every /healthz during an attack answers within this
LOG_BOUND = 100_000  # bytes of server log an attack may cause at most
PROBE_FROM = "127.0.0.2"  # another user: a loopback address of its own (all of 127/8 is this machine)

needs_bwrap = pytest.mark.skipif(not bwrap_ok(), reason="bubblewrap is not installed")


# --------------------------------------------------------------------------- the server


def _limit_descriptors() -> None:  # runs in the child between fork and exec
    resource.setrlimit(resource.RLIMIT_NOFILE, (SERVER_NOFILE, SERVER_NOFILE))


@contextlib.contextmanager
def served(tag: str, *, suite: bool = True) -> Iterator[dict[str, Any]]:
    """`assay serve` (descriptor limit `SERVER_NOFILE`) over a fresh folder with the answer task."""
    with workdir(tag) as wd:
        args: list[str] = []
        if suite:
            answer_task(wd / "suite" / "answer")
            args = ["--suite", str(wd / "suite")]
        port = free_port()
        log = wd / "serve.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen([sys.executable, "-m", "assay.cli", "serve", "--host", "127.0.0.1", "--port",
                                     str(port), *args], cwd=wd, env=clean_env(), stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, preexec_fn=_limit_descriptors)
        try:
            deadline = time.monotonic() + 60
            while health(port, timeout=5)[0] != 200:
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
                time.sleep(0.1)
            yield {"base": f"http://127.0.0.1:{port}", "port": port, "proc": proc, "log": log, "cwd": wd}
        finally:
            if proc.poll() is None:
                stop_process(proc, timeout=20)
            reap(str(wd))


def health(port: int, timeout: float = PROBE_BOUND_S) -> tuple[int, float]:
    """GET /healthz on a new connection from `PROBE_FROM`: (status or 0 when none came, seconds)."""
    t0 = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(PROBE_FROM, 0)) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            head = s.recv(64)
        status = int(head.split()[1]) if head.startswith(b"HTTP/1.1 ") else 0
    except (OSError, ValueError, IndexError):
        status = 0
    return status, time.monotonic() - t0


_PROBER = """
import os, socket, sys, time
port, pid, source, bound = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
while True:
    t0 = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=bound, source_address=(source, 0)) as s:
            s.sendall(b"GET /healthz HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nConnection: close\\r\\n\\r\\n")
            head = s.recv(64)
        status = int(head.split()[1]) if head.startswith(b"HTTP/1.1 ") else 0
    except (OSError, ValueError, IndexError):
        status = 0
    try:
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        fds = 0
    print(status, round(time.monotonic() - t0, 3), fds, flush=True)
    time.sleep(0.2)
"""


class Prober:
    """/healthz every 0.2 s from another process (so the attack's own work in this process
    cannot slow the probes down) while an attack runs; also the server's open descriptors."""

    def __init__(self, port: int, pid: int) -> None:
        self.port = port
        self.pid = pid
        self.results: list[tuple[int, float]] = []
        self.max_fds = 0
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> Prober:
        self._proc = subprocess.Popen([sys.executable, "-c", _PROBER, str(self.port), str(self.pid), PROBE_FROM,
                                       str(PROBE_BOUND_S)], stdout=subprocess.PIPE, text=True)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._proc is not None
        time.sleep(0.5)
        self._proc.terminate()
        out, _ = self._proc.communicate(timeout=30)
        for line in out.splitlines():
            st, took, fds = line.split()
            self.results.append((int(st), float(took)))
            self.max_fds = max(self.max_fds, int(fds))

    def check(self, what: str) -> None:
        bad = [(st, round(t, 2)) for st, t in self.results if st != 200 or t > PROBE_BOUND_S]
        assert self.results and not bad, f"/healthz during {what}: {len(bad)} of {len(self.results)} probes " \
                                         f"failed or were slow: {bad[:10]}"


def check_log(log: Path) -> str:
    text = log.read_text(errors="replace")
    assert len(text.encode()) < LOG_BOUND, f"the server log grew to {len(text.encode())} bytes:\n{text[-3000:]}"
    assert "Traceback" not in text, text[-5000:]
    return text


def own_fd_room(reserve: int = 300) -> int:
    """Raise this process's soft descriptor limit to its hard one; how many sockets it may hold."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return max(100, resource.getrlimit(resource.RLIMIT_NOFILE)[0] - len(os.listdir("/proc/self/fd")) - reserve)


def half_open_flood(port: int, total: int, sources: list[str], time_bound_s: float) -> dict[str, int]:
    """`total` connections that each send part of a request line and then nothing, spread over
    `sources`; held open as far as this process's descriptor limit allows (the oldest are
    closed to make room beyond it)."""
    room = own_fd_room()
    held: list[socket.socket] = []
    counts = {"opened": 0, "refused_early": 0, "held_at_most": 0}
    deadline = time.monotonic() + time_bound_s
    for i in range(total):
        assert time.monotonic() < deadline, f"the flood did not finish in {time_bound_s} s ({i} connections)"
        if len(held) >= room:
            for s in held[:1000]:
                s.close()
            del held[:1000]
        s = socket.socket()
        s.settimeout(10)
        try:
            s.bind((sources[i % len(sources)], 0))
            s.connect(("127.0.0.1", port))
            s.send(b"GET /api/report HTTP/1.1\r\nHo")
        except OSError:  # reset by the server already (a cap): it holds nothing for this one
            counts["refused_early"] += 1
            s.close()
            continue
        counts["opened"] += 1
        held.append(s)
        counts["held_at_most"] = max(counts["held_at_most"], len(held))
    for s in held:
        s.close()
    return counts


# --------------------------------------------------------------------------- connections


def test_twenty_thousand_half_open_connections_from_one_address() -> None:
    with served("avail-flood", suite=False) as site:
        with Prober(site["port"], site["proc"].pid) as probe:
            counts = half_open_flood(site["port"], 20_000, ["127.0.0.1"], time_bound_s=240)
            time.sleep(1)
        probe.check("20,000 half-open connections")
        assert probe.max_fds < SERVER_NOFILE - 256, f"the server held {probe.max_fds} descriptors (limit " \
                                                    f"{SERVER_NOFILE})"
        assert health(site["port"])[0] == 200
        text = check_log(site["log"])
        assert "refused" in text, text[-2000:]
        print(f"flood: {counts}; probes {len(probe.results)}, slowest {max(t for _, t in probe.results):.2f} s; "
              f"server descriptors at most {probe.max_fds}; log {len(text)} bytes")


def test_ten_thousand_half_open_connections_from_two_hundred_addresses() -> None:
    """More half-open connections than the server's cap in all: the oldest of the busiest
    addresses make room, so another user still gets in."""
    sources = [f"127.1.{i // 100}.{i % 100 + 1}" for i in range(200)]
    with served("avail-spread", suite=False) as site:
        with Prober(site["port"], site["proc"].pid) as probe:
            counts = half_open_flood(site["port"], 10_000, sources, time_bound_s=240)
            time.sleep(1)
        probe.check("10,000 half-open connections from 200 addresses")
        assert probe.max_fds < SERVER_NOFILE - 256, probe.max_fds
        text = check_log(site["log"])
        assert "to make room" in text, text[-2000:]
        print(f"spread flood: {counts}; slowest probe {max(t for _, t in probe.results):.2f} s; "
              f"server descriptors at most {probe.max_fds}")


def _pipeline_flood(port: int, sources: list[str], per_source: int, requests: int, seconds: float) -> int:
    """From each source, `per_source` connections that pipeline `requests` GETs of a static file
    with a small receive window and never read an answer, reconnecting when reset, for
    `seconds`: the connections opened."""
    request = b"GET /static/workbench.js HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    opened = 0
    socks: list[socket.socket] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for s in [s for s in socks if s.fileno() == -1]:
            socks.remove(s)
        for source in sources:
            for _ in range(per_source - sum(1 for s in socks if s.getsockname()[0] == source)):
                s = socket.socket()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
                s.settimeout(0.5)
                try:
                    s.bind((source, 0))
                    s.connect(("127.0.0.1", port))
                    s.sendall(request * requests)
                except OSError:
                    s.close()
                    continue
                opened += 1
                socks.append(s)
        time.sleep(0.2)
        for s in list(socks):  # a reset one is closed here, so it is opened again next round
            try:
                s.setblocking(False)
                if s.recv(1, socket.MSG_PEEK) == b"":
                    s.close()
            except BlockingIOError:
                pass
            except OSError:
                s.close()
    for s in socks:
        s.close()
    return opened


def test_pipelined_requests_never_read_from_many_addresses_leave_healthz_answering() -> None:
    """Connections from eight addresses pipelining thousands of requests each and never reading
    the answers: past an address's request rate they are reset, and /healthz keeps answering."""
    sources = [f"127.0.3.{i}" for i in range(1, 9)]
    with served("avail-pipeline", suite=False) as site:
        with Prober(site["port"], site["proc"].pid) as probe:
            opened = _pipeline_flood(site["port"], sources, per_source=16, requests=3000, seconds=20)
        probe.check("pipelined requests never read, from 8 addresses")
        assert health(site["port"])[0] == 200
        text = check_log(site["log"])
        assert "requests at once" in text, text[-2000:]
        print(f"pipeline flood: {opened} connections; slowest probe {max(t for _, t in probe.results):.2f} s")


def _closed_after(s: socket.socket, drip: bytes, limit_s: float) -> float | None:
    """Send `drip` a byte a second; seconds until the server closed the connection (None: it did not)."""
    t0 = time.monotonic()
    s.settimeout(1.0)
    i = 0
    while time.monotonic() - t0 < limit_s:
        try:
            if s.recv(4096) == b"":
                return time.monotonic() - t0
        except TimeoutError:
            pass
        except OSError:  # reset
            return time.monotonic() - t0
        try:
            s.send(drip[i % len(drip):i % len(drip) + 1])
        except OSError:
            return time.monotonic() - t0
        i += 1
    return None


def test_slowloris_and_slow_bodies_are_dropped_after_their_timeouts() -> None:
    with served("avail-slow", suite=False) as site:
        port = site["port"]
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            took = _closed_after(s, b"X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n", 20)
        assert took is not None and took < 8, f"a slowloris client was kept {took} s"
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"POST /api/play HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 1000\r\n\r\n{")
            took_body = _closed_after(s, b" ", 40)
        assert took_body is not None and took_body < 20, f"a slow body was kept {took_body} s"
        # a normal client, keep-alive, several requests on one connection, is not disturbed
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        for _ in range(3):
            conn.request("GET", "/healthz")
            r = conn.getresponse()
            assert r.status == 200 and json.loads(r.read())["status"] == "ok"
            time.sleep(1)
        conn.request("POST", "/api/play", body=b"{}", headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        assert r.status == 400, (r.status, r.read())
        r.read()
        conn.close()
        text = check_log(site["log"])
        assert "head did not arrive within" in text and "body did not arrive within" in text, text
        print(f"slowloris dropped after {took:.1f} s, slow body after {took_body:.1f} s")


# --------------------------------------------------------------------------- play sessions


def get(url: str, timeout: float = 10) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def post(url: str, body: Any, timeout: float = 60) -> tuple[int, Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def start(base: str, name: str) -> str:
    status, body = post(base + "/api/play", {"task_id": "answer", "name": name, "campaign": "web"})
    assert status == 200, (status, body)
    sid = str(body["session"])
    wait_state(base, sid, "running", 60)
    return sid


def wait_state(base: str, sid: str, want: str, limit_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + limit_s
    state: dict[str, Any] = {}
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            state = get(f"{base}/api/play/{sid}", timeout=5)[1]
        if state.get("state") == want:
            return state
        time.sleep(0.2)
    raise AssertionError(f"session {sid} never reached {want!r}: {state.get('state')!r} {state.get('error')!r}")


def act(base: str, sid: str, body: dict[str, Any], timeout: float = 60) -> str:
    status, out = post(f"{base}/api/play/{sid}/action", body, timeout=timeout)
    assert status == 200, (status, out)
    return str(out["output"])


def workers_of(pid: int) -> list[int]:
    """The play worker processes `pid` started."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid and b"assay.web.worker_main" in cmd:
            found.append(int(name))
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


def sigterm_stops_within(proc: subprocess.Popen[bytes], bound_s: float) -> float:
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=bound_s + 10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"SIGTERM did not stop the server in {bound_s + 10} s") from None
    took = time.monotonic() - t0
    assert took < bound_s, f"SIGTERM took {took:.1f} s to stop the server"
    assert proc.returncode == 0, proc.returncode
    return took


@needs_bwrap
def test_a_long_action_delays_no_one_else_and_sigterm_stops_at_once() -> None:
    with served("avail-long") as site:
        base = site["base"]
        ann = start(base, "ann")
        long_reply: dict[str, Any] = {}

        def long_action() -> None:
            try:
                long_reply["r"] = post(f"{base}/api/play/{ann}/action",
                                       {"tool": "run_command", "args": {"command": "sleep 30; echo slept"}}, timeout=60)
            except OSError as e:  # the server stopped under it
                long_reply["r"] = (0, repr(e))

        t = threading.Thread(target=long_action, daemon=True)
        t.start()
        time.sleep(1.5)  # ann's sleep runs now
        with Prober(site["port"], site["proc"].pid) as probe:
            t0 = time.monotonic()
            bob = start(base, "bob")
            assert "42" in act(base, bob, {"tool": "run_command", "args": {"command": "echo 42 > answer.txt; cat answer.txt"}})
            bob_took = time.monotonic() - t0
            view = get(f"{base}/api/play/{ann}", timeout=5)
            assert view[0] == 200 and view[1]["state"] == "running", view
            time.sleep(2)
        probe.check("ann's 30 s command")
        assert bob_took < 30, f"bob's start and one action took {bob_took:.1f} s while ann's command ran"
        assert t.is_alive(), "ann's 30 s command answered early"
        workers = workers_of(site["proc"].pid)
        assert len(workers) == 2, workers
        took = sigterm_stops_within(site["proc"], 5.0)
        t.join(15)
        assert long_reply["r"][0] != 200, f"ann's command cannot have finished: {long_reply}"
        time.sleep(0.5)
        assert not [w for w in workers if alive(w)], "a play worker outlived the server"
        text = check_log(site["log"])
        assert "assay web app stopped (SIGTERM)" in text, text[-2000:]
        print(f"bob started and acted in {bob_took:.1f} s during ann's sleep; SIGTERM stopped the server in "
              f"{took:.1f} s")


@needs_bwrap
def test_a_frozen_session_answers_its_page_times_out_its_action_and_goes_on() -> None:
    with served("avail-frozen") as site:
        base, pid = site["base"], site["proc"].pid
        ann = start(base, "ann")
        act(base, ann, {"tool": "write_file", "args": {"path": "notes.txt", "content": "kept\n"}})
        [worker] = workers_of(pid)
        bob = start(base, "bob")
        os.kill(worker, signal.SIGSTOP)  # ann's worker holds its process, as a pattern run in C would
        try:
            with Prober(site["port"], pid) as probe:
                t0 = time.monotonic()
                status, view = get(f"{base}/api/play/{ann}", timeout=10)
                assert status == 200 and view["busy"] is True and view["state"] == "running", view
                assert time.monotonic() - t0 < 5
                assert "hi" in act(base, bob, {"tool": "run_command", "args": {"command": "echo hi"}})
                t0 = time.monotonic()
                status, out = post(f"{base}/api/play/{ann}/action",
                                   {"tool": "run_command", "args": {"command": "echo never", "timeout_s": 2}})
                waited = time.monotonic() - t0
            probe.check("ann's frozen worker")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker, signal.SIGCONT)
        assert status == 504 and "limit" in out["detail"], (status, out)
        assert waited < 30, waited
        wait_state(base, ann, "running", 60)  # replayed from its recorded actions
        assert "kept" in act(base, ann, {"tool": "read_file", "args": {"path": "notes.txt"}})
        assert not alive(worker)
        # SIGTERM while a worker is frozen: it is killed after its grace, the server stops at once
        workers = workers_of(pid)  # ann's new one and bob's
        assert worker not in workers and len(workers) == 2, workers
        for w in workers:
            os.kill(w, signal.SIGSTOP)
        took = sigterm_stops_within(site["proc"], 5.0)
        time.sleep(0.5)
        assert not [w for w in workers if alive(w)], "a frozen worker outlived the server"
        text = check_log(site["log"])
        assert "ran past its limit" in text, text[-2000:]
        print(f"frozen worker: the action answered 504 after {waited:.1f} s; SIGTERM stopped the server in "
              f"{took:.1f} s with two frozen workers")


@needs_bwrap
def test_a_300_character_cwd_is_a_tool_error_and_the_run_goes_on() -> None:
    with served("avail-cwd") as site:
        base = site["base"]
        sid = start(base, "cwd")
        status, out = post(f"{base}/api/play/{sid}/action",
                           {"tool": "run_command", "args": {"command": "pwd", "cwd": "a" * 300}})
        assert status in (200, 400, 422), (status, out)
        said = str(out.get("output") if status == 200 else out.get("detail"))
        assert said.startswith("error") or status != 200, said
        assert "cwd" in said or "long" in said, said
        assert get(f"{base}/api/play/{sid}")[1]["state"] == "running"
        assert "42" in act(base, sid, {"tool": "run_command", "args": {"command": "echo 42 > answer.txt; cat answer.txt"}})
        assert act(base, sid, {"submit": "done"}) == "submitted"
        state = wait_state(base, sid, "done", 60)
        run = state["run"]
        assert run["status"] == "done" and run["passed"] is True, run
        check_log(site["log"])
        print(f"300-character cwd: {status} {said[:120]!r}")
