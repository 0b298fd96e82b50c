"""Web (`assay serve`): the same attacks through `/api/play`, where one person's run shares the
server process with every other user.

- a FIFO as the artifact must not freeze the app for other users while the run is graded;
- a 1.1 GB `write_file` is refused (and the app stays up);
- `timeout_s` NaN is refused;
- the file tools do not read through a link to /etc/shadow.

The server is the real `assay serve` in a subprocess on a free 127.0.0.1 port.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import served
from tests.security._cases import answer_task
from tests.security._support import bwrap_ok, reap, shadow_line, workdir

pytestmark = pytest.mark.skipif(not bwrap_ok(), reason="bubblewrap is not installed")

GiB = 1024**3


@contextlib.contextmanager
def serve(tag: str) -> Iterator[dict[str, Any]]:
    with workdir(tag) as wd:
        answer_task(wd / "suite" / "answer")
        try:
            with served(wd, "--suite", str(wd / "suite")) as (base, port, proc):
                yield {"base": base, "cwd": wd, "proc": proc, "port": port}
        finally:
            reap(str(wd))


def get(url: str, timeout: float = 10) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def post(url: str, body: Any, timeout: float = 30) -> tuple[int, Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def start(base: str, name: str) -> str:
    status, body = post(base + "/api/play", {"task_id": "answer", "name": name, "campaign": "web"})
    assert status == 200, (status, body)
    sid = str(body["session"])
    deadline = time.monotonic() + 30
    while get(f"{base}/api/play/{sid}")[1]["state"] != "running":
        assert time.monotonic() < deadline, "the play session never started"
        time.sleep(0.2)
    return sid


def act(base: str, sid: str, body: dict[str, Any], timeout: float = 30) -> str:
    status, out = post(f"{base}/api/play/{sid}/action", body, timeout=timeout)
    assert status == 200, (status, out)
    return str(out["output"])


def wait_done(base: str, sid: str, limit_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + limit_s
    state: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            state = get(f"{base}/api/play/{sid}", timeout=5)[1]
        except OSError:  # includes timeouts: the app did not answer
            state = {"state": "unresponsive"}
        if state.get("state") in ("done", "error"):
            return state
        time.sleep(0.3)
    return state


def test_fifo_artifact_does_not_freeze_the_app_for_other_users() -> None:
    with serve("web-fifo") as site:
        base = site["base"]
        mallory = start(base, "mallory")
        out = act(base, mallory, {"tool": "run_command", "args": {"command": "mkfifo answer.txt && ls -la"}})
        assert "answer.txt" in out, out
        assert act(base, mallory, {"submit": "done"}) == "submitted"
        time.sleep(1.5)  # mallory's run is being graded now
        t0 = time.monotonic()
        try:
            status = get(base + "/api/campaigns", timeout=8)[0]
        except OSError as e:
            status = f"no answer ({e.__class__.__name__})"
        assert status == 200, (f"another user's request got {status} after {time.monotonic() - t0:.1f} s while "
                               "mallory's FIFO artifact was graded: the server is frozen")
        bob = start(base, "bob")
        act(base, bob, {"tool": "run_command", "args": {"command": "echo 42 > answer.txt"}})
        act(base, bob, {"submit": "done"})
        state = wait_done(base, bob, 30)
        assert state.get("state") == "done" and state["run"]["passed"] is True, state
        state = wait_done(base, mallory, 30)
        assert state.get("state") == "done", f"mallory's run never finished grading: {state.get('state')}"
        preds = state["run"]["grade"]["predicates"]
        assert preds and preds[0]["ok"] is False, preds


@pytest.fixture(scope="module")
def site() -> Iterator[dict[str, Any]]:
    with serve("web-tools") as s:
        yield s


def test_nan_timeout_is_refused(site: dict[str, Any]) -> None:
    sid = start(site["base"], "nan")
    req = urllib.request.Request(f"{site['base']}/api/play/{sid}/action", method="POST",
                                 headers={"Content-Type": "application/json"},
                                 data=b'{"tool": "run_command", "args": {"command": "sleep 0.2; echo ran-nan", '
                                      b'"timeout_s": NaN}}')
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            status, out = r.status, str(json.loads(r.read()).get("output", ""))
    except urllib.error.HTTPError as e:
        status, out = e.code, e.read().decode(errors="replace")
    assert status != 200 or (out.startswith("error") and "ran-nan" not in out), (
        f"timeout_s NaN was accepted and the command ran: {status} {out[:200]!r}")
    act(site["base"], sid, {"submit": ""})


def test_file_tools_do_not_follow_links_out(site: dict[str, Any]) -> None:
    sid = start(site["base"], "linker")
    act(site["base"], sid, {"tool": "run_command", "args": {"command": "ln -s /etc/shadow s; ln -s / root"}})
    outs = [act(site["base"], sid, {"tool": "read_file", "args": {"path": "s"}}),
            act(site["base"], sid, {"tool": "read_file", "args": {"path": "root/etc/shadow"}}),
            act(site["base"], sid, {"tool": "list_files", "args": {"path": "root"}})]
    line = shadow_line()
    for o in outs:
        assert o.startswith("error") and (line is None or line not in o), o[:300]
    act(site["base"], sid, {"submit": ""})


def test_write_file_over_one_gib_is_refused(site: dict[str, Any]) -> None:
    base, wd = site["base"], Path(site["cwd"])
    sid = start(base, "bigwriter")
    size = 1_100_000_000
    head = b'{"tool": "write_file", "args": {"path": "big.txt", "content": "'
    tail = b'"}}'
    chunk = b"A" * (8 * 1024 * 1024)
    conn = http.client.HTTPConnection("127.0.0.1", site["port"], timeout=180)
    status: Any = None
    out = ""
    try:
        conn.putrequest("POST", f"/api/play/{sid}/action")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(len(head) + size + len(tail)))
        conn.endheaders()
        conn.send(head)
        left = size
        while left:
            n = min(left, len(chunk))
            conn.send(chunk[:n])
            left -= n
        conn.send(tail)
        resp = conn.getresponse()
        status, raw = resp.status, resp.read()
        with contextlib.suppress(ValueError):
            out = str(json.loads(raw).get("output", ""))
    except OSError as e:  # the server refused the body and closed the connection: a refusal
        status = f"closed ({e.__class__.__name__})"
    finally:
        conn.close()
    big = [p for p in wd.rglob("big.txt") if p.is_file() and p.stat().st_size > GiB]
    assert not big, (f"a {size:,}-byte write_file through /api/play was written to {big[0]} "
                     f"(server answered {status}: {out[:120]!r})")
    assert status != 200 or out.startswith("error"), (status, out[:200])
    assert get(base + "/api/campaigns", timeout=10)[0] == 200, "the app did not survive the request"
