"""Category 9: small leaks.

- the host path of the workspace (and of the run folder) is not visible in
  /proc/self/mountinfo from inside the sandbox;
- a seccomp filter blocks ptrace, keyctl/add_key, bpf, userfaultfd and the mount APIs
  (probed with raw syscalls through ctypes from inside; each probe is first run on the host as
  an unprivileged user, so only syscalls that *would* work unfiltered are held to "blocked");
- kill -9 of the campaign while it grades leaves no grade worker, case service or delivered
  code running (found by the work folder's path on their command lines);
- the stakeholder server answers absurd input (5,000-digit numbers, 100,000-deep JSON) with a
  clean refusal and keeps serving, both driven directly and from inside the sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import REPO
from tests.security._cases import answer_task, labels_case
from tests.security._support import (
    bwrap_ok,
    cli,
    cmd,
    marked_pids,
    outputs,
    reap,
    report_json,
    run_dir_of,
    runs_by_name,
    script,
    show,
    workdir,
)

# isort: split
# --- the internal API used here (the stakeholder server driven directly): keep it in this block
from assay.people.ledger import Ledger
from assay.people.routing import make_router
from assay.people.server import StakeholderServer
from assay.people.world import StakeholderWorld
from assay.task.people import load_npcs

needs_bwrap = pytest.mark.skipif(not bwrap_ok(), reason="bubblewrap is not installed")

# --------------------------------------------------------------------------- mountinfo


@needs_bwrap
def test_mountinfo_does_not_show_host_paths() -> None:
    with workdir("leak-mounts") as wd:
        labels_case(wd / "labels")  # a scenario: the workspace and the socket folder are both bound
        spec = script(wd, "snoop", [cmd("cat /proc/self/mountinfo; echo ---; cat /proc/1/mountinfo /proc/mounts"),
                                    {"say": "done"}])
        r = cli("run", str(wd / "labels"), "--agent", spec, cwd=wd, timeout=120)
        assert r.returncode in (0, 1), r.tail()
        (run,) = report_json(wd)["runs"]
        out = outputs(show(wd, run["run_id"])["events"])[0]
        assert "/workspace" in out, out  # the probe saw the mount table
        rd = run_dir_of(wd, run["run_id"])
        shown = [p for p in (str(wd), str(rd) if rd else None, "/.assay/runs/", "/var/tmp/assay-runs") if p and p in out]
        lines = [ln for ln in out.splitlines() if any(p in ln for p in shown)]
        assert not shown, "the sandbox's mount table shows host paths:\n" + "\n".join(lines)


SNOOP_APP = """\
import os


def answer():
    seen = open("/proc/self/mountinfo").read() + "\\n" + os.getcwd()
    leaked = any(s in seen for s in ("/.assay/", "assay-runs", "/grade-", "/pilot-"))
    return 1 if leaked else 7
"""


@needs_bwrap
def test_delivered_code_does_not_see_the_run_folder_in_its_mount_table() -> None:
    """The grade's copy of the workspace is bound at a neutral path: code the grader runs sees
    neither the store's location nor the run folder (its answer is right only when it sees none)."""
    import shutil

    with workdir("leak-grade-mounts") as wd:
        shutil.copytree(REPO / "tests" / "fixtures" / "native-scenario" / "tiny-native", wd / "tiny")
        spec = script(wd, "snoop", [{"tool": "write_file", "args": {"path": "system/app.py", "content": SNOOP_APP}},
                                    {"say": "done"}])
        r = cli("run", str(wd / "tiny"), "--agent", spec, "--task", "tiny/base", cwd=wd, timeout=180)
        assert r.returncode in (0, 1), r.tail()
        (run,) = report_json(wd)["runs"]
        assert run["status"] == "done", run
        assert run["grade"]["kpi"] == 0, ("delivered code saw the run folder or the store in its mount table: "
                                          f"{run['grade']}")


# --------------------------------------------------------------------------- seccomp

PROBE = r"""
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def call(nr, *args):
    ctypes.set_errno(0)
    conv = [ctypes.c_long(a) if isinstance(a, int) else ctypes.c_char_p(a) for a in args]
    return [libc.syscall(ctypes.c_long(nr), *conv), ctypes.get_errno()]


res = {  # x86_64 syscall numbers
    "ptrace": call(101, 0, 0, 0, 0),                  # PTRACE_TRACEME
    "keyctl": call(250, 0, -3, 0),                   # KEYCTL_GET_KEYRING_ID(session)
    "add_key": call(248, b"user", b"k", b"v", 1, -3),
    "bpf": call(321, 9999, 0, 0),                    # an unknown command: EINVAL unless filtered
    "userfaultfd": call(323, 0x80000 | 1),           # O_CLOEXEC | UFFD_USER_MODE_ONLY
    "open_tree": call(428, -100, b"/", 0),           # no OPEN_TREE_CLONE: an O_PATH fd, unprivileged
    "fsopen": call(430, b"tmpfs", 0),
    "mount": call(165, b"none", b"/tmp", b"tmpfs", 0, 0),
    "umount2": call(166, b"/tmp", 2),
    "unshare_user": call(272, 0x10000000),           # CLONE_NEWUSER
}
for line in open("/proc/self/status"):
    if line.startswith("Seccomp:"):
        res["seccomp_mode"] = line.split()[1]
print("PROBE " + json.dumps(res))
"""

FILTERED = ["ptrace", "keyctl", "add_key", "bpf", "userfaultfd", "open_tree", "fsopen", "mount", "umount2"]


def _parse(out: str) -> dict[str, Any]:
    m = re.search(r"^PROBE (\{.*\})$", out, re.M)
    assert m, out
    return json.loads(m.group(1))


@pytest.fixture(scope="module")
def probe() -> Iterator[dict[str, Any]]:
    if not bwrap_ok():
        pytest.skip("bubblewrap is not installed")
    if os.uname().machine != "x86_64":
        pytest.skip("the probe uses x86_64 syscall numbers")
    with workdir("leak-seccomp") as wd:
        (wd / "probe.py").write_text(PROBE)
        os.chmod(wd / "probe.py", 0o644)
        # baseline: the same probe on the host as an unprivileged user, outside any sandbox
        base = subprocess.run(["/usr/bin/python3", str(wd / "probe.py")], capture_output=True, text=True, cwd="/",
                              user=65534, group=65534, extra_groups=[], timeout=30)
        answer_task(wd / "suite" / "answer")
        spec = script(wd, "probe", [{"tool": "write_file", "args": {"path": "probe.py", "content": PROBE}},
                                    cmd("python3 probe.py; echo 42 > answer.txt"), {"say": "done"}])
        r = cli("run", str(wd / "suite"), "--agent", spec, cwd=wd, timeout=120)
        assert r.returncode in (0, 1), r.tail()
        (run,) = report_json(wd)["runs"]
        inside = _parse(outputs(show(wd, run["run_id"])["events"])[1])
        yield {"inside": inside, "host": _parse(base.stdout)}


def test_a_seccomp_filter_is_installed(probe: dict[str, Any]) -> None:
    assert probe["inside"].get("seccomp_mode") == "2", (
        f"sandboxed commands run without a seccomp filter (Seccomp: {probe['inside'].get('seccomp_mode')})")


@pytest.mark.parametrize("name", FILTERED)
def test_dangerous_syscall_is_blocked(probe: dict[str, Any], name: str) -> None:
    rc, err = probe["inside"][name]
    host_rc, host_err = probe["host"][name]
    discriminating = host_err not in (errno.EPERM, errno.ENOSYS)
    assert rc == -1, f"{name}() succeeded inside the sandbox (returned {rc})"
    if discriminating:
        assert err in (errno.EPERM, errno.ENOSYS), (
            f"{name}() reached the kernel inside the sandbox (errno {errno.errorcode.get(err, err)}; an "
            f"unprivileged host process gets {errno.errorcode.get(host_err, host_err) if host_rc == -1 else 'success'}"
            f"): no filter stopped it")


def test_new_user_namespaces_are_refused(probe: dict[str, Any]) -> None:
    rc, err = probe["inside"]["unshare_user"]
    assert rc == -1, "unshare(CLONE_NEWUSER) succeeded inside the sandbox"


# --------------------------------------------------------------------------- kill -9 while grading


@needs_bwrap
def test_kill_9_during_grading_leaves_nothing_running() -> None:
    """A scenario with a case service and a grader that takes its time (both write pid files).
    kill -9 of `assay run` (the one process this test started) while grade() runs must take the
    grade worker, the prod service and the dev service with it."""
    with workdir("leak-kill9") as wd:
        marks = wd / "marks"
        marks.mkdir()
        labels_case(wd / "labels", marks_dir=marks, slow_grader=True, service=True)
        before = set(Path(tempfile.gettempdir()).glob("assay-svc-*"))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "ASSAY_"))}
        with open(wd / "run.log", "w") as log:
            p = subprocess.Popen([sys.executable, "-m", "assay.cli", "run", str(wd / "labels"), "--agent", "noop"],
                                 cwd=wd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 90
            while not list(marks.glob("grader-*.pid")):
                assert p.poll() is None, (wd / "run.log").read_text()[-2000:]
                assert time.monotonic() < deadline, "grading never started: " + (wd / "run.log").read_text()[-2000:]
                time.sleep(0.1)
            time.sleep(0.5)
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
            time.sleep(3)  # what dies with the harness is gone by now
            left = marked_pids(str(wd))
            described = {pid: Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:200].decode(errors="replace")
                         for pid in left if Path(f"/proc/{pid}/cmdline").exists()}
            pid_files = {f.name: int(f.read_text()) for f in marks.glob("*.pid")}
            alive = {n: pid for n, pid in pid_files.items() if Path(f"/proc/{pid}").exists() and pid in left}
            assert not described and not alive, (
                f"after kill -9 of the campaign during grading, still running: {described or alive}")
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            reap(str(wd))
            # the prod socket folder of the killed grade (a short temp folder, because the run
            # folder's path is too long for a socket), left behind by the kill: ours to remove
            for d in set(Path(tempfile.gettempdir()).glob("assay-svc-*")) - before:
                if (d / "svc_marker.sock").exists():
                    subprocess.run(["rm", "-rf", "--one-file-system", str(d)], check=False)


# --------------------------------------------------------------------------- the stakeholder server

NPCS = REPO / "tests" / "fixtures" / "npcs" / "npcs.json"
PARAMS = {"cap": "500", "alice_patience": 6}
ABSURD = {
    "digits_5000_hours": b'{"op": "wait", "hours": ' + b"9" * 5000 + b"}\n",
    "digits_5000_day": b'{"op": "pilot", "day": ' + b"7" * 5000 + b"}\n",
    "deep_100k": b"[" * 100_000 + b"]" * 100_000 + b"\n",
    "deep_object": b'{"op": ' * 30_000 + b"1" + b"}" * 30_000 + b"\n",
}


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[StakeholderServer]:
    (tmp_path / "ws").mkdir()
    (tmp_path / "run").mkdir()
    world = StakeholderWorld(load_npcs(NPCS, PARAMS), make_router("lexical"),
                             ledger=Ledger.for_workspace(tmp_path / "ws", tmp_path / "run"))
    srv = StakeholderServer(world, tmp_path / "sock" / "ask.sock")
    await srv.start()
    yield srv
    await srv.stop()


async def _exchange(sock: Path, line: bytes) -> bytes:
    reader, writer = await asyncio.open_unix_connection(str(sock), limit=1 << 20)
    writer.write(line)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.readline(), 10)
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


@pytest.mark.parametrize("name", list(ABSURD))
async def test_stakeholder_server_refuses_absurd_input_cleanly(server: StakeholderServer, name: str,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    got = await _exchange(server.socket_path, ABSURD[name])
    assert got, f"{name}: the server closed the connection without an answer"
    reply = json.loads(got)
    assert reply.get("ok") is False and reply.get("error"), f"{name}: not a refusal: {reply}"
    assert "internal error" not in reply["error"], f"{name}: refused only by crashing: {reply}"
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert not tracebacks, f"{name}: the server logged a traceback: {tracebacks[0].getMessage()}"
    after = json.loads(await _exchange(server.socket_path, b'{"op": "who"}\n'))
    assert after.get("ok") is True, f"{name}: the server stopped answering: {after}"


ABSURD_CLIENT = r"""
import json, socket
cases = {
    "digits": b'{"op": "wait", "hours": ' + b"9" * 5000 + b"}\n",
    "deep": b"[" * 100000 + b"]" * 100000 + b"\n",
}
for name, line in cases.items():
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(20)
    s.connect("/run/assay/ask.sock")
    s.sendall(line)
    s.shutdown(socket.SHUT_WR)
    data = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    except OSError as e:
        data = repr(e).encode()
    print("REPLY", name, data.decode("utf-8", "replace").strip() or "<closed without a reply>", flush=True)
"""


@needs_bwrap
def test_absurd_stakeholder_input_from_inside_the_sandbox() -> None:
    with workdir("leak-absurd") as wd:
        labels_case(wd / "labels")
        spec = script(wd, "absurd", [{"tool": "write_file", "args": {"path": "absurd.py", "content": ABSURD_CLIENT}},
                                     cmd("python3 absurd.py", 60), cmd("bin/ask --who"), {"say": "done"}])
        r = cli("run", str(wd / "labels"), "--agent", spec, cwd=wd, timeout=120)
        assert r.returncode in (0, 1), r.tail()
        runs = runs_by_name(report_json(wd))
        out = outputs(show(wd, runs["absurd"]["run_id"])["events"])
        replies = dict(re.findall(r"^REPLY (\w+) (.*)$", out[1], re.M))
        assert set(replies) == {"digits", "deep"}, out[1]
        for name, text in replies.items():
            assert text.startswith("{") and json.loads(text).get("ok") is False, f"{name}: {text[:200]}"
        assert "Olga" in out[2], f"the stakeholder service stopped answering: {out[2]}"
        assert runs["absurd"]["status"] == "done", runs["absurd"]
        assert "Traceback" not in r.stderr, "the harness printed a traceback: " + r.stderr[-1500:]
