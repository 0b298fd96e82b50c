"""Containment tests for the sandbox: each escape attempt must fail safely.

Most checks run real commands in bubblewrap; they are skipped only when bwrap is absent.
Checks about the dedicated host uid need the harness to run as root, as it does in CI.
"""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from assay.agent.file_tools import edit_file, list_files, read_file
from assay.env.bwrap import bwrap_available
from assay.env.limits import Limits
from assay.env.sandbox import CommandResult, Sandbox
from assay.env.uids import UID_BASE, allocate_uid, release_uid, uid_processes
from assay.errors import HarnessError
from assay.fs.paths import PathError
from assay.fs.writes import QuotaError, write_file
from tests.helpers import HOSTILE_S, live_processes

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) not installed")
IS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not IS_ROOT, reason="dedicated sandbox uids need a root harness")
SECRET = "TOPSECRET-4f1c9"


@pytest.fixture
def base() -> Iterator[Path]:
    """A parent for workspaces that the sandbox uid can traverse (0711), as the harness makes it."""
    d = Path(tempfile.mkdtemp(prefix="assay-sbx-test-"))
    os.chmod(d, 0o711)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def outside() -> Iterator[Path]:
    """A world-readable host directory outside the workspace, holding a secret."""
    d = Path(tempfile.mkdtemp(prefix="assay-outside-"))
    os.chmod(d, 0o755)
    (d / "secret.txt").write_text(SECRET + "\n")
    os.chmod(d / "secret.txt", 0o644)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _make(base: Path, name: str = "ws", **kw: object) -> Sandbox:
    ws = base / name
    ws.mkdir()
    sb = Sandbox(ws, **kw)  # type: ignore[arg-type]
    sb.prepare()
    return sb


@pytest.fixture
async def sb(base: Path) -> AsyncIterator[Sandbox]:
    s = _make(base)
    yield s
    await s.close()


@pytest.fixture
async def unsafe(base: Path) -> AsyncIterator[Sandbox]:
    s = _make(base, "ws-unsafe", isolated=False)
    yield s
    await s.close()


def test_bwrap_available() -> None:
    assert bwrap_available() is True


async def test_basic_run_cwd_stdin_and_result(sb: Sandbox) -> None:
    (sb.workspace / "sub").mkdir()
    sb.prepare()
    r = await sb.run("pwd; id -un; cat; exit 3", cwd="sub", stdin=b"hello from stdin\n")
    assert isinstance(r, CommandResult)
    assert r.exit_code == 3 and not r.timed_out and not r.output_truncated
    assert r.output.splitlines() == ["/workspace/sub", "agent", "hello from stdin"]
    r = await sb.run(["python3", "-c", "import sys; print(sys.executable, sys.version_info[:2])"])
    assert r.output.strip() == "/usr/bin/python3 (3, 11)", r.output
    assert sb.inside_root == "/workspace"


async def test_cwd_cannot_escape(sb: Sandbox, outside: Path) -> None:
    for bad in ["..", "../..", "/", str(outside), "sub/../.."]:
        with pytest.raises(ValueError):
            await sb.run("true", cwd=bad)
    os.symlink(outside, sb.workspace / "out")
    with pytest.raises(PathError):
        await sb.run("true", cwd="out")


@needs_root
async def test_workspace_owned_by_dedicated_uid(sb: Sandbox, outside: Path) -> None:
    assert sb.uid >= UID_BASE
    (sb.workspace / "d").mkdir()
    (sb.workspace / "d" / "f.txt").write_text("x")
    os.symlink(outside / "secret.txt", sb.workspace / "link")
    os.link(outside / "secret.txt", sb.workspace / "hard")  # a hard link to a host file
    sb.prepare()
    st = os.stat(sb.workspace)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (sb.uid, sb.uid, 0o700)
    assert os.stat(sb.workspace / "d" / "f.txt").st_uid == sb.uid
    assert os.lstat(sb.workspace / "link").st_uid == sb.uid
    # Neither the symlink target nor the hard-linked host file was handed over.
    assert os.stat(outside / "secret.txt").st_uid == 0
    r = await sb.run("id -u; touch made-inside")
    assert r.exit_code == 0 and r.output.strip() == "1000"
    assert os.stat(sb.workspace / "made-inside").st_uid == sb.uid
    assert not uid_processes(sb.uid)


@needs_root
def test_prepare_refuses_unreachable_workspace(base: Path) -> None:
    hidden = base / "hidden"
    hidden.mkdir(mode=0o700)
    (hidden / "ws").mkdir()
    s = Sandbox(hidden / "ws")
    with pytest.raises(HarnessError, match="not reachable"):
        s.prepare()
    release_uid(s.uid)


async def test_cannot_read_outside(sb: Sandbox, outside: Path) -> None:
    secret = outside / "secret.txt"
    depth = "../" * 12
    r = await sb.run(f"cat {secret}; cat {depth}{str(secret).lstrip('/')}; ls /root; ls {outside}")
    assert SECRET not in r.output
    assert "No such file" in r.output
    r = await sb.run("ls /; ls /tmp; cat /etc/shadow; ls /home /root /run", timeout_s=10)
    assert SECRET not in r.output
    assert "shadow" not in r.output.replace("cat: /etc/shadow: No such file or directory", "")


async def test_symlink_made_inside_does_not_leak(sb: Sandbox, outside: Path) -> None:
    secret = outside / "secret.txt"
    r = await sb.run(f"ln -s {secret} link; ln -s / rootlink; ln -s ../../../../ up; "
                     f"cat link; cat rootlink{secret}; cat up{secret}; echo done")
    assert r.output.rstrip().endswith("done")
    assert SECRET not in r.output
    # The harness (root, no namespace) must not follow them either.
    for rel in ["link", f"rootlink{secret}", f"up{secret}", f"up{outside}/new.txt"]:
        with pytest.raises(PathError):
            read_file(sb.workspace, rel)
        with pytest.raises(PathError):
            write_file(sb.workspace, rel, "pwned")
    with pytest.raises(PathError):
        edit_file(sb.workspace, "link", SECRET, "pwned")
    listing = list_files(sb.workspace)
    assert f"link -> {secret}" in listing and "rootlink -> /" in listing
    assert SECRET not in listing
    assert secret.read_text() == SECRET + "\n"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


async def test_cannot_write_outside(sb: Sandbox, outside: Path) -> None:
    secret = outside / "secret.txt"
    r = await sb.run(f"echo pwned > {secret}; mkdir -p {outside} && echo pwned > {outside}/new.txt; "
                     f"echo pwned > ../escape.txt; echo pwned > /escape.txt; echo end")
    assert r.output.rstrip().endswith("end")
    assert secret.read_text() == SECRET + "\n"
    assert not (outside / "new.txt").exists()
    assert not (sb.workspace.parent / "escape.txt").exists()
    assert not Path("/escape.txt").exists()


async def test_usr_is_read_only(sb: Sandbox) -> None:
    r = await sb.run("touch /usr/assay-probe; echo x >> /usr/bin/python3; "
                     "mount -o remount,rw /usr; touch /usr/assay-probe2; echo end")
    assert "Read-only file system" in r.output or "Permission denied" in r.output
    assert not Path("/usr/assay-probe").exists() and not Path("/usr/assay-probe2").exists()
    # Host tools under /usr/local are hidden.
    r = await sb.run("ls -A /usr/local | wc -l; command -v docker || echo no-docker")
    assert r.output.split() == ["0", "no-docker"]


async def test_no_host_network(sb: Sandbox) -> None:
    hits = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal hits
        hits += 1
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        # Control: the listener is really there for host processes.
        _r, w = await asyncio.open_connection("127.0.0.1", port)
        w.close()
        await asyncio.sleep(0.05)
        assert hits == 1
        code = ("import socket\n"
                f"try:\n socket.create_connection(('127.0.0.1', {port}), timeout=3); print('CONNECTED')\n"
                "except OSError as e: print('refused', e)\n"
                "try:\n socket.getaddrinfo('example.com', 80); print('RESOLVED')\n"
                "except OSError as e: print('dns failed', e)\n"
                "try:\n socket.create_connection(('1.1.1.1', 53), timeout=3); print('INTERNET')\n"
                "except OSError as e: print('no route', e)\n")
        r = await sb.run(["python3", "-c", code], timeout_s=20)
        assert "refused" in r.output and "dns failed" in r.output and "no route" in r.output, r.output
        assert "CONNECTED" not in r.output and "RESOLVED" not in r.output and "INTERNET" not in r.output
        assert hits == 1
    finally:
        server.close()
        await server.wait_closed()


async def test_host_processes_invisible(sb: Sandbox) -> None:
    r = await sb.run("ls /proc | grep -E '^[0-9]+$' | wc -l; cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
    lines = r.output.splitlines()
    assert int(lines[0]) <= 8, r.output  # bwrap init, the shell, the pipeline: the host has ~100
    assert "pytest" not in r.output
    assert str(sb.workspace) not in r.output  # bwrap's options are not on pid 1's command line


async def test_host_environment_does_not_leak(base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASSAY_TEST_SECRET_TOKEN", "sk-do-not-leak-123")
    for isolated in (True, False):
        s = _make(base, f"ws-env-{isolated}", isolated=isolated, env={"TASK_VAR": "given"})
        try:
            r = await s.run("env")
        finally:
            await s.close()
        assert "sk-do-not-leak" not in r.output and "ASSAY_TEST_SECRET_TOKEN" not in r.output
        assert "TASK_VAR=given" in r.output
        assert f"HOME={s.inside_root}" in r.output
        names = {line.split("=", 1)[0] for line in r.output.splitlines()}
        assert names <= {"PATH", "HOME", "LANG", "TASK_VAR", "PWD", "SHLVL", "_"}, names


async def test_ro_bind(base: Path) -> None:
    sock_dir = base / "sockdir"
    sock_dir.mkdir(mode=0o755)
    (sock_dir / "info").write_text("shared")
    os.chmod(sock_dir / "info", 0o644)
    s = _make(base, ro_binds=[(sock_dir, "/run/assay")])
    try:
        r = await s.run("cat /run/assay/info; echo; touch /run/assay/x && echo WROTE")
    finally:
        await s.close()
    assert r.output.startswith("shared") and "WROTE" not in r.output
    assert not (sock_dir / "x").exists()
    with pytest.raises(ValueError):
        Sandbox(base / "ws", ro_binds=[(sock_dir, "/workspace/x")])


@needs_root
@pytest.mark.parametrize("isolated", [True, False])
async def test_no_process_left_behind(base: Path, isolated: bool) -> None:
    s = _make(base, isolated=isolated)
    try:
        t0 = time.monotonic()
        r = await s.run("setsid nohup sleep 1000 >/dev/null 2>&1 & nohup sleep 1001 & "
                        "(setsid sleep 1002 &) ; echo started")
        assert r.exit_code == 0 and "started" in r.output
        assert time.monotonic() - t0 < HOSTILE_S  # a child holding stdout does not make run() hang (1000 s)
        assert uid_processes(s.uid) == []
        r = await s.run("setsid sleep 1000 >/dev/null 2>&1 < /dev/null & disown; sleep 30", timeout_s=1)
        assert r.timed_out
        assert uid_processes(s.uid) == []
    finally:
        await s.close()
    assert uid_processes(s.uid) == []


@needs_root
async def test_close_kills_running_command(base: Path) -> None:
    s = _make(base)
    task = asyncio.create_task(s.run("sleep 100 & sleep 100"))
    await asyncio.sleep(0.5)
    assert uid_processes(s.uid)
    t0 = time.monotonic()
    await s.close()
    r = await asyncio.wait_for(task, 5)
    assert time.monotonic() - t0 < HOSTILE_S  # not the 100 s of the sleeps
    assert r.exit_code != 0
    assert uid_processes(s.uid) == []
    await s.close()  # idempotent
    with pytest.raises(RuntimeError):
        await s.run("true")


@needs_root
async def test_setuid_file_is_not_setuid_root(sb: Sandbox) -> None:
    r = await sb.run("cp /usr/bin/id ./myid && chmod 4755 ./myid; chown 0:0 ./myid; ls -ln myid; echo end")
    assert "end" in r.output
    st = os.stat(sb.workspace / "myid")
    assert st.st_uid == sb.uid != 0
    assert not (st.st_mode & stat.S_ISUID and st.st_uid == 0)
    # And the harness, writing as root, never leaves a setuid bit on what it writes.
    write_file(sb.workspace, "myid", "#!/bin/sh\n")
    st = os.stat(sb.workspace / "myid")
    assert not st.st_mode & (stat.S_ISUID | stat.S_ISGID)


async def test_memory_limit(base: Path) -> None:
    """One process over the limit: OOM-killed in the run's cgroup (with a note), or a
    MemoryError where memory falls back to RLIMIT_AS."""
    s = _make(base, limits=Limits(memory_bytes=256 * 1024**2))
    grouped = s.describe().startswith("memory 256 MiB for the whole run")
    try:
        r = await s.run(["python3", "-c", "b = bytearray(512 * 1024**2); print('ALLOCATED')"], timeout_s=30)
    finally:
        await s.close()
    assert r.exit_code != 0 and "ALLOCATED" not in r.output
    if grouped:
        assert r.exit_code == 137 and any("memory limit of 256 MiB" in n for n in r.notes), r
    else:
        assert "MemoryError" in r.output


@needs_root
async def test_memory_limit_holds_for_the_whole_run(base: Path) -> None:
    """Three processes of 100 MB each under a 256 MiB run limit: they cannot all hold their
    memory at once (RLIMIT_AS alone would let each have 256 MiB)."""
    s = _make(base, limits=Limits(memory_bytes=256 * 1024**2))
    if s.cgroup is None:
        await s.close()
        pytest.skip("no memory cgroup here: memory is bounded per process only")
    hog = "import time; b = b'x' * (100 * 1024**2); print('HELD', flush=True); time.sleep(1.5)"
    try:
        r = await s.run(f"for i in 1 2 3; do python3 -c \"{hog}\" & done; wait", timeout_s=30)
    finally:
        await s.close()
    assert r.output.count("HELD") < 3 or "Killed" in r.output, r
    assert any("memory limit" in n for n in r.notes), r
    assert not s.cgroup, "the run's cgroup was not removed at close"


async def test_ram_backed_mounts_are_bounded(sb: Sandbox) -> None:
    r = await sb.run("df -B1 --output=size /tmp /dev/shm | tail -2; touch /x /dev/x /usr/x 2>&1 | grep -c Read-only; "
                     "echo ok > /dev/null && echo null-ok")
    sizes = [int(x) for x in r.output.split()[:2]]
    assert sizes == [sb.limits.tmp_bytes, sb.limits.shm_bytes], r.output
    assert r.output.split()[2] == "3" and "null-ok" in r.output, r.output


async def test_seccomp_filter_is_installed(sb: Sandbox) -> None:
    from assay.env import seccomp

    if seccomp.program() is None:
        pytest.skip(f"no seccomp table for {os.uname().machine}")
    probe = ("import ctypes, errno; libc = ctypes.CDLL(None, use_errno=True); "
             "r = libc.ptrace(0, 0, 0, 0); print('PTRACE', r, ctypes.get_errno() == errno.EPERM); "
             "print([l for l in open('/proc/self/status') if l.startswith('Seccomp:')][0].split()[1])")
    r = await sb.run(["python3", "-c", probe])
    assert "PTRACE -1 True" in r.output and r.output.strip().endswith("2"), r.output


async def test_file_size_limit(base: Path) -> None:
    s = _make(base, limits=Limits(file_size_bytes=1024 * 1024))
    try:
        r = await s.run("head -c 3000000 /dev/zero > big; echo rc=$?")
    finally:
        await s.close()
    assert "rc=0" not in r.output
    assert (s.workspace / "big").stat().st_size <= 1024 * 1024


@needs_root
async def test_nproc_limit(base: Path) -> None:
    s = _make(base, limits=Limits(nproc=30))
    code = ("import os, time\n"
            "for i in range(200):\n"
            "    if os.fork() == 0:\n"
            "        time.sleep(5); os._exit(0)\n"
            "print('FORKED ALL')\n")
    try:
        r = await s.run(["python3", "-c", code], timeout_s=20)
    finally:
        await s.close()
    assert "FORKED ALL" not in r.output and "BlockingIOError" in r.output


async def test_output_flood(sb: Sandbox) -> None:
    r = await sb.run("yes | head -c 50000000; echo rc=$?", timeout_s=30)
    assert r.exit_code == 0 and r.output_truncated  # read as it came: ended, not stopped by its timeout
    assert len(r.output) <= sb.limits.capture_bytes and len(r.output.encode()) <= sb.limits.capture_bytes
    # An endless flood is stopped by the timeout without blocking or hoarding memory.
    r = await sb.run("yes", timeout_s=1)
    assert r.timed_out and r.output_truncated and len(r.output) <= sb.limits.capture_bytes


async def test_timeout_kills_children(sb: Sandbox) -> None:
    t0 = time.monotonic()
    r = await sb.run("sleep 30 & (setsid sleep 31 &); sleep 32", timeout_s=1)
    assert r.timed_out and r.exit_code is None
    assert time.monotonic() - t0 < 20  # not the 30-32 s of the sleeps: the children were killed too
    assert 1 <= r.duration_s < 20
    if IS_ROOT:
        assert uid_processes(sb.uid) == []
    r = await sb.run("echo still works")
    assert r.output == "still works\n"


@pytest.mark.parametrize("isolated", [True, False])
async def test_kill_all_inside_spares_harness(base: Path, isolated: bool) -> None:
    if not isolated and not IS_ROOT:
        pytest.skip("unisolated kill -1 as our own uid would kill the test runner")
    s = _make(base, isolated=isolated)
    canary = subprocess.Popen(["sleep", "60"])  # a host process (root) that must survive too
    try:
        r = await s.run("sleep 100 & kill -9 -1; echo survived", timeout_s=10)
        assert not r.timed_out
        assert canary.poll() is None
        os.kill(os.getpid(), 0)
        r = await s.run("echo next command works")
        assert r.exit_code == 0 and r.output == "next command works\n"
    finally:
        canary.kill()
        canary.wait()
        await s.close()


@needs_root
def test_allocate_uid_unique_across_processes() -> None:
    here = allocate_uid()
    code = ("import sys\nfrom assay.env.uids import allocate_uid\n"
            "print(' '.join(str(allocate_uid()) for _ in range(15)), flush=True)\nsys.stdin.read()\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    procs = [subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=env) for _ in range(3)]
    try:
        got = [here] + [int(x) for p in procs for x in p.stdout.readline().split()]  # type: ignore[union-attr]
    finally:
        for p in procs:
            p.communicate("")
    assert len(got) == 46 and len(set(got)) == 46
    assert all(u >= UID_BASE for u in got)
    release_uid(here)


# --------------------------------------------------------------------------- the workspace quota


def _can_mount_volumes() -> bool:
    from assay.env.volume import WorkspaceVolume

    return WorkspaceVolume._mount_unavailable() is None


@needs_root
async def test_workspace_volume_enforces_its_quota(base: Path) -> None:
    from assay.env.volume import WorkspaceVolume

    if not _can_mount_volumes():
        pytest.skip("no loop devices / mkfs.ext4 here: the quota is a checked budget")
    vol = WorkspaceVolume.create(base / "ws", 64 * 1024**2)
    try:
        assert vol.kind == "mount" and not (vol.path / "lost+found").exists()
        write_file(vol.path, "keep.txt", "kept\n")
        s = Sandbox(vol.path, volume=vol)
        s.prepare()
        try:
            r = await s.run("head -c 100000000 /dev/zero > fill; echo rc=$?; rm -f fill; grep ' /workspace ' "
                            "/proc/self/mountinfo")
        finally:
            await s.close()
        assert "rc=1" in r.output and "No space left on device" in r.output, r.output
        assert any("disk quota of 64 MiB" in n for n in r.notes) and vol.quota_hit
        assert str(base) not in r.output  # the workspace is the root of its own filesystem
        with pytest.raises(QuotaError, match="quota"):
            write_file(vol.path, "big.txt", "x" * (80 * 1024**2))
    finally:
        vol.release()
    assert not os.path.ismount(vol.path) and (vol.path / "keep.txt").read_text() == "kept\n"
    assert not list(base.glob(".ws.*")), "the image (or the copy-out folder) was left behind"


@needs_root
def test_a_grading_copy_is_on_a_volume_with_the_quota(base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a grader runs on the copy (delivered code, checks) cannot fill the host disk, the
    copy takes at most the quota, and discarding it unmounts and removes it."""
    from assay.env.workspace import discard_copy, grading_copy

    if not _can_mount_volumes():
        pytest.skip("no loop devices / mkfs.ext4 here: the quota is a checked budget")
    monkeypatch.setenv("ASSAY_WORKSPACE_QUOTA_BYTES", str(32 * 1024**2))
    src = base / "agent-ws"
    src.mkdir()
    (src / "small.txt").write_text("small\n")
    with open(src / "big.bin", "wb") as f:
        f.write(os.urandom(40 * 1024**2))  # dense, over the quota on its own
    vol, report = grading_copy(src, base / "grade-1" / "ws", owner=4242)
    try:
        assert vol.kind == "mount" and os.path.ismount(vol.path)
        assert (vol.path / "small.txt").read_text() == "small\n" and not (vol.path / "big.bin").exists()
        assert any("big.bin" in rel for rel, _why in report.refused) or report.capped, report
        st = os.stat(vol.path)
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (4242, 0o700)
        with pytest.raises(OSError) as e, open(vol.path / "fill", "wb") as f:
            for _ in range(64):
                f.write(b"x" * 1024**2)
                f.flush()
                os.fsync(f.fileno())
        assert e.value.errno == errno.ENOSPC
    finally:
        discard_copy(vol)
    assert not os.path.ismount(vol.path) and not vol.path.exists()
    assert not list((base / "grade-1").glob(".ws.*")), "the image was left behind"


@needs_root
def test_sparse_files_cannot_blow_up_the_copy_out(base: Path) -> None:
    """Sparse files take almost no blocks in the image but copy out at full size: the copy out
    of the volume is capped by its quota, and what is left out is recorded."""
    from assay.env.volume import WorkspaceVolume

    if not _can_mount_volumes():
        pytest.skip("no loop devices / mkfs.ext4 here")
    vol = WorkspaceVolume.create(base / "ws", 64 * 1024**2)
    write_file(vol.path, "keep.txt", "kept\n")
    for name in ("a.bin", "b.bin", "c.bin"):
        with open(vol.path / name, "wb") as f:
            f.truncate(1024**3)  # 1 GiB each, no blocks
    report = vol.release()
    assert report is not None and report.capped, report
    kept = sum(os.lstat(p).st_size for p in vol.path.iterdir())
    assert kept <= 64 * 1024**2 + 4096
    assert (vol.path / "keep.txt").read_text() == "kept\n"


async def test_checked_quota_refuses_file_tool_writes(base: Path) -> None:
    from assay.env.volume import WorkspaceVolume

    vol = WorkspaceVolume(base / "ws", 1024 * 1024, "checked")
    vol.path.mkdir()
    write_file(vol.path, "a.txt", "x" * 1000, room=vol.check_write)
    with pytest.raises(QuotaError, match="disk quota"):
        write_file(vol.path, "b.txt", "x" * (2 * 1024 * 1024), room=vol.check_write)
    assert vol.quota_hit


# --------------------------------------------------------------------------- seccomp, lifeline


def test_seccomp_program_shape() -> None:
    from assay.env import seccomp

    prog = seccomp.build("x86_64")
    assert prog is not None and len(prog) % 8 == 0
    assert seccomp.build("riscv64") is None
    aarch = seccomp.build("aarch64")
    assert aarch is not None and len(aarch) < len(prog)  # no x32 cut, no iopl/ioperm/uselib


@needs_root
def test_lifeline_kills_registered_groups_when_the_harness_dies(base: Path) -> None:
    """A stand-in harness registers a session child with the lifeline and is killed with -9:
    the child's whole process group goes, and a registered folder is removed."""
    marker = base / "lifeline-marker"
    tree = base / "tree"
    harness = (
        "import subprocess, sys, time\n"
        "from assay.env import lifeline\n"
        f"p = subprocess.Popen(['/bin/sh', '-c', 'sleep 300 & sleep 300; : {marker}'], start_new_session=True)\n"
        f"lifeline.keep_group(p.pid); lifeline.keep('tree', {str(tree)!r})\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(300)\n")
    tree.mkdir()
    h = subprocess.Popen([sys.executable, "-c", harness], stdout=subprocess.PIPE, text=True)
    try:
        assert h.stdout is not None
        child = int(h.stdout.readline())
        assert _alive(child)
        h.kill()
        h.wait()
        end = time.monotonic() + 10
        while (_alive(child) or tree.exists()) and time.monotonic() < end:
            time.sleep(0.05)
        assert not _alive(child) and not tree.exists()
        assert not _group_alive(child)
    finally:
        if h.poll() is None:
            h.kill()
            h.wait()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


def _group_alive(pgid: int) -> bool:
    return any(int(fields[2]) == pgid for _pid, fields in live_processes())
