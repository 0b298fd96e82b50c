"""The sandbox every agent command runs in.

Isolated mode starts each command in a fresh bubblewrap container: every namespace
unshared (no network but its own `lo`, its own pid space), a read-only system (/usr), an
empty /tmp, and the workspace as the only writable host directory, at /workspace. Nothing
from the host environment leaks in. The RAM-backed mounts are bounded: /tmp and /dev/shm
are size-limited tmpfs (`Limits.tmp_bytes`, `Limits.shm_bytes`), / and /dev are remounted
read-only once everything is in place. A seccomp filter (`assay.env.seccomp`) answers EPERM
to the system calls an agent never needs (ptrace, keyrings, bpf, userfaultfd, mount APIs, ...).

The bubblewrap command line is `assay.env.bwrap`'s, the limits `assay.env.limits`'s, and a
command's process is started and followed by `assay.env.launch`.

Memory is bounded for the whole run, not per process: every command of a sandbox joins one
run cgroup (`assay.env.cgroup`, v2 where delegated, else v1) limited to
`Limits.memory_bytes`, so its processes and the tmpfs pages they fill share one ceiling (and,
where the controllers are ours, `Limits.nproc` tasks and a fair CPU share per run).
Where no cgroup can be had the limit falls back to RLIMIT_AS per process (recorded in
`Sandbox.describe()`). With a `WorkspaceVolume`, the workspace has a disk quota.

When the harness runs as root, bwrap itself is started as a dedicated unprivileged host uid
(`assay.env.uids.allocate_uid`), with the workspace chowned to it. Starting bwrap as root would make the
sandbox user map to host root: a setuid file written in the workspace would be a real
setuid-root file on the host, and RLIMIT_NPROC would not apply. The dedicated uid also lets
`close()` find and kill every process of the run, and makes `kill -9 -1` inside harmless.

Non-isolated mode (`--unsafe-no-sandbox`) is a plain subprocess with the same rlimits and a
clean environment, still as the dedicated uid when the harness is root. It is not isolation:
the command can read whatever that uid can read and reach host ports.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import posixpath
import shlex
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath

import pydantic

from assay.env import lifeline, seccomp
from assay.env.bwrap import INSIDE_UID, READ_ONLY_ROOT, bwrap_available, ram_mounts, system_layout
from assay.env.cgroup import RunCgroup
from assay.env.launch import Capture, data_pipe, read_child_pid, rlimits, wait_gone
from assay.env.limits import Limits, size_text
from assay.env.uids import allocate_uid, release_uid, uid_processes
from assay.env.volume import WorkspaceVolume
from assay.errors import HarnessError
from assay.fs.paths import resolve

__all__ = ["CommandResult", "Sandbox"]

SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
_KILL = "/usr/bin/kill" if os.path.exists("/usr/bin/kill") else "/bin/kill"
_DRAIN_GRACE_S = 5.0


class CommandResult(pydantic.BaseModel):
    """What one command did, as the agent's run_command tool reports it."""

    exit_code: int | None  # None when killed by the timeout
    output: str  # stdout+stderr interleaved, utf-8 with errors="replace", at most capture_bytes
    timed_out: bool
    duration_s: float
    output_truncated: bool
    notes: list[str] = pydantic.Field(default_factory=list)  # limits the command ran into (memory, disk quota)


def _searchable_by(path: Path, uid: int) -> bool:
    st = os.stat(path)
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid == uid:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


_RESERVED_DESTS = ("/workspace", "/usr", "/proc", "/dev", "/etc", "/tmp", "/bin", "/lib", "/lib64", "/sbin")


class Sandbox:
    """Runs the agent's commands against one workspace, contained (or not, if so asked)."""

    def __init__(self, workspace: Path, *, isolated: bool = True, uid: int | None = None,
                 ro_binds: Sequence[tuple[Path, str]] = (),
                 env: Mapping[str, str] | None = None,
                 limits: Limits = Limits(),
                 command_wrapper: Callable[[str], str] | None = None,
                 keep_owner: Sequence[str] = (),
                 volume: WorkspaceVolume | None = None) -> None:
        """`command_wrapper`, when given, rewrites every command (an argv is joined with
        shlex first) into the shell command actually run, e.g. a scenario's service forwarder
        (`assay.env.net.forwarder.wrap_command`) started in front of it. `keep_owner`: paths
        relative to the workspace that `prepare()` leaves to the harness (a log the agent may
        read but must not write, e.g. the stakeholder ledger's). `volume`: the workspace's
        disk quota (`WorkspaceVolume.create`), reported on after every command."""
        self.command_wrapper = command_wrapper
        self.keep_owner = frozenset(keep_owner)
        self.workspace: Path = Path(os.path.abspath(workspace))
        self.isolated: bool = isolated
        self.limits: Limits = limits
        is_root = os.geteuid() == 0
        self._owns_uid = False
        if uid is None:
            if is_root:
                uid = allocate_uid()
                self._owns_uid = True
            else:
                uid = os.getuid()
        elif uid == 0:
            raise ValueError("uid 0 refused: sandboxed commands must not run as root")
        elif not is_root and uid != os.getuid():
            raise ValueError(f"cannot run commands as uid {uid}: switching uid needs root")
        self.uid: int = uid
        # True when commands run as a uid of their own that nothing else uses.
        self._dedicated = is_root
        self.inside_root: str = "/workspace" if isolated else str(self.workspace)
        binds = []
        for host, dest in ro_binds:
            d = posixpath.normpath(dest)
            if not d.startswith("/") or d == "/" or any(d == r or d.startswith(r + "/")
                                                        for r in _RESERVED_DESTS):
                raise ValueError(f"read-only bind destination {dest!r} refused")
            binds.append((Path(os.path.abspath(host)), d))
        self.ro_binds: tuple[tuple[Path, str], ...] = tuple(binds)
        for k in (env or {}):
            if not k or "=" in k or "\x00" in k:
                raise ValueError(f"bad environment variable name {k!r}")
        self.env: dict[str, str] = dict(env or {})
        self._running: set[asyncio.SubprocessTransport] = set()
        self._active = 0
        self._closed = False
        if isolated and not bwrap_available():
            raise HarnessError("bubblewrap (bwrap) is missing or cannot create user namespaces here; "
                               "install it (apt-get install bubblewrap) or run with --unsafe-no-sandbox")
        self.volume = volume
        self.cgroup: RunCgroup | None = None
        if self._dedicated:
            try:
                self.cgroup = RunCgroup.create(limits.memory_bytes, str(uid), pids_max=limits.nproc)
            except OSError as e:
                raise HarnessError(f"cannot set up the run's cgroup: {e}") from None
            if self.cgroup is not None:
                for path in self.cgroup.paths:
                    lifeline.keep("cgroup", str(path))
        self._oom_seen = 0

    def describe(self) -> str:
        """The limits that hold for this sandbox's commands, in a sentence (for the transcript)."""
        lim = self.limits
        mem = (f"memory {size_text(lim.memory_bytes)} for the whole run ({self.cgroup.label})"
               if self.cgroup is not None else
               f"memory {size_text(lim.memory_bytes)} per process (RLIMIT_AS: no memory cgroup here)")
        parts = [mem, f"files up to {size_text(lim.file_size_bytes)}"]
        if self.isolated:
            parts.append(f"/tmp {size_text(lim.tmp_bytes)}, /dev/shm {size_text(lim.shm_bytes)}, / read-only")
            parts.append("seccomp filter" if seccomp.program() is not None else "no seccomp filter (no table for "
                         f"{os.uname().machine})")
        if self.volume is not None:
            parts.append(self.volume.describe())
        return "; ".join(parts)

    # ------------------------------------------------------------------ workspace

    def prepare(self, *, owned: bool = False) -> None:
        """Hand the workspace to the sandbox uid: chown -R uid:uid, mode 0700 on the root.

        Idempotent; call again after the harness wrote files into it as root. Symlinks are
        chowned themselves, never followed; a multiply-linked file owned by someone else is
        left alone (it may be a hard link to a file outside the workspace). `owned`: the tree
        was made for the uid (a copy with `owner=uid`), so only its root is handed over and
        nothing below it is walked.
        """
        if not self.workspace.is_dir():
            raise HarnessError(f"workspace {self.workspace} is not a directory")
        if self._dedicated:
            uid = self.uid
            root_st = os.lstat(self.workspace)
            if root_st.st_uid != uid or root_st.st_gid != uid:
                os.chown(self.workspace, uid, uid, follow_symlinks=False)
            if not owned:
                self._hand_over_tree(uid)
            for path in [self.workspace, *(h for h, _ in self.ro_binds)]:
                for anc in path.parents:
                    if not _searchable_by(anc, uid):
                        raise HarnessError(
                            f"{path} is not reachable by sandbox uid {uid}: {anc} lacks search "
                            f"permission for it (give it o+x, e.g. chmod 0711 {anc})")
        os.chmod(self.workspace, 0o700)

    def _hand_over_tree(self, uid: int) -> None:
        """chown what lies below the workspace root to `uid` (see `prepare`)."""
        for dirpath, dirnames, filenames, dfd in os.fwalk(self.workspace, follow_symlinks=False):
            rel_dir = os.path.relpath(dirpath, self.workspace)
            for name in (*dirnames, *filenames):
                rel = name if rel_dir == "." else f"{rel_dir}/{name}"
                if rel in self.keep_owner:
                    continue
                try:
                    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if st.st_uid == uid and st.st_gid == uid:
                    continue
                if not stat.S_ISDIR(st.st_mode) and st.st_nlink > 1 and st.st_uid != uid:
                    continue
                os.chown(name, uid, uid, dir_fd=dfd, follow_symlinks=False)

    # ------------------------------------------------------------------ commands

    def _inner_cwd(self, cwd: str) -> tuple[str, str]:
        """(host cwd, cwd as the command sees it); refuses a cwd that leaves the workspace."""
        if cwd in ("", "."):
            return str(self.workspace), self.inside_root
        real = resolve(self.workspace, cwd)
        if not real.is_dir():
            raise ValueError(f"cwd {cwd!r} is not a directory in the workspace")
        parts = PurePosixPath(os.path.relpath(real, os.path.realpath(self.workspace))).parts
        return str(real), posixpath.join(self.inside_root, *(p for p in parts if p != "."))

    def _inner_env(self, home: str) -> dict[str, str]:
        return {"PATH": SAFE_PATH, "HOME": home, "LANG": "C.UTF-8", **self.env}

    def _bwrap_argv(self, argv: list[str], inner_cwd: str, data_fds: list[tuple[int, str]],
                    info_fd: int, seccomp_fd: int | None = None) -> list[str]:
        bwrap = shutil.which("bwrap") or "bwrap"
        args = [bwrap, "--info-fd", str(info_fd), "--unshare-all", "--unshare-user", "--disable-userns",
                "--uid", str(INSIDE_UID), "--gid", str(INSIDE_UID), "--cap-drop", "ALL",
                "--hostname", "sandbox", "--die-with-parent", "--new-session",
                *system_layout()]
        if seccomp_fd is not None:
            args += ["--seccomp", str(seccomp_fd)]
        for fd, dest in data_fds:
            args += ["--perms", "0444", "--ro-bind-data", str(fd), dest]
        args += ["--proc", "/proc", "--dev", "/dev", *ram_mounts(self.limits),
                 "--bind", str(self.workspace), "/workspace"]
        for host, dest in self.ro_binds:
            args += ["--ro-bind", str(host), dest]
        args += [*READ_ONLY_ROOT, "--chdir", inner_cwd, "--clearenv"]
        for k, v in self._inner_env("/workspace").items():
            args += ["--setenv", k, v]
        return [*args, "--", *argv]

    @staticmethod
    def _etc_files() -> list[tuple[bytes, str]]:
        """A minimal passwd/group/hosts: names for the ids inside, nothing from the host."""
        u = INSIDE_UID
        return [
            (f"root:x:0:0:root:/root:/usr/sbin/nologin\nagent:x:{u}:{u}:agent:/workspace:/bin/bash\n"
             "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n".encode(), "/etc/passwd"),
            (f"root:x:0:\nagent:x:{u}:\nnogroup:x:65534:\n".encode(), "/etc/group"),
            (b"127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n", "/etc/hosts"),
        ]

    async def run(self, command: str | Sequence[str], *, cwd: str = ".", timeout_s: float = 300,
                  stdin: bytes | None = None) -> CommandResult:
        """Run one command to completion (or timeout) and collect its interleaved output."""
        if self._closed:
            raise RuntimeError("sandbox is closed")
        if self.command_wrapper is not None:
            command = self.command_wrapper(command if isinstance(command, str) else
                                           shlex.join(str(a) for a in command))
        if isinstance(command, str):
            shell = "/usr/bin/bash" if os.path.exists("/usr/bin/bash") else "/bin/sh"
            argv = [shell, "-c", command]
        else:
            argv = [str(a) for a in command]
            if not argv:
                raise ValueError("empty command")
        host_cwd, inner_cwd = self._inner_cwd(cwd)

        pass_fds: list[int] = []
        info_r: int | None = None
        if self.isolated:
            data_fds = []
            try:
                # bwrap reports the host pid of the sandbox's init here: once that is gone,
                # the kernel has killed everything else in the sandbox's pid namespace.
                info_r, info_w = os.pipe()
                pass_fds.append(info_w)
                for data, dest in self._etc_files():
                    data_fds.append((data_pipe(data, pass_fds), dest))
                filt = seccomp.program()
                seccomp_fd = data_pipe(filt, pass_fds) if filt is not None else None
            except BaseException:
                for fd in [*pass_fds, *([info_r] if info_r is not None else [])]:
                    os.close(fd)
                raise
            full = self._bwrap_argv(argv, inner_cwd, data_fds, info_w, seccomp_fd)
            # Hand bwrap its options through a pipe (--args) so that the sandbox's pid 1 does
            # not show host paths such as the workspace location on its command line.
            cut = full.index("--")
            options = b"".join(a.encode() + b"\0" for a in full[1:cut])
            if len(options) < 60_000:  # must fit in the pipe buffer: we write before bwrap starts
                r, w = os.pipe()
                pass_fds.append(r)
                os.write(w, options)
                os.close(w)
                full = [full[0], "--args", str(r), *full[cut:]]
            proc_env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
            proc_cwd = "/"
        else:
            full = argv
            proc_env = self._inner_env(str(self.workspace))
            proc_cwd = host_cwd
        user_kw: dict[str, object] = {}
        if self._dedicated:
            user_kw = {"user": self.uid, "group": self.uid, "extra_groups": []}

        start = time.monotonic()
        loop = asyncio.get_running_loop()
        cap = self.limits.capture_bytes
        self._active += 1
        try:
            cg_fds = self.cgroup.open_procs() if self.cgroup is not None else []
            try:
                transport, proto = await loop.subprocess_exec(
                    lambda: Capture(loop, cap), *full,
                    stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=proc_cwd, env=proc_env,
                    start_new_session=True, pass_fds=pass_fds, umask=0o022,
                    preexec_fn=rlimits(self.limits, nproc=self._dedicated, cgroup_fds=cg_fds),
                    **user_kw)  # type: ignore[arg-type]
            finally:
                for fd in [*pass_fds, *cg_fds]:
                    os.close(fd)
            self._running.add(transport)
            try:
                return await self._collect(transport, proto, start, timeout_s, stdin, info_r)
            finally:
                self._running.discard(transport)
                transport.close()
        finally:
            self._active -= 1
            if info_r is not None:
                os.close(info_r)

    async def _collect(self, transport: asyncio.SubprocessTransport, proto: Capture, start: float,
                       timeout_s: float, stdin: bytes | None, info_r: int | None) -> CommandResult:
        if stdin is not None:
            pipe = transport.get_pipe_transport(0)
            if isinstance(pipe, asyncio.WriteTransport):
                with contextlib.suppress(OSError):
                    pipe.write(stdin)
                    pipe.close()  # flushes what is buffered, then closes: the command sees EOF
        timed_out = False
        try:
            await asyncio.wait_for(asyncio.shield(proto.exited), timeout_s)
        except TimeoutError:
            timed_out = True
            self._killpg(transport)
            await proto.exited
        if self.isolated:
            # bwrap returns as soon as its init reports the exit code; wait for the pid
            # namespace to be torn down so nothing of this command outlives run().
            init_pid = read_child_pid(info_r)
            gone = init_pid is not None and await wait_gone(init_pid)
            if not gone and self._dedicated and self._active == 1:
                await self._kill_uid()
        elif self._dedicated and self._active == 1:
            await self._kill_uid()  # background children of the shell, even if they setsid
        else:
            self._killpg(transport, reaped=True)
        # Output still in flight; a child that kept stdout open cannot hold us for long.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(proto.closed), _DRAIN_GRACE_S)
        code = transport.get_returncode()
        output = bytes(proto.buf).decode("utf-8", errors="replace")
        return CommandResult(
            exit_code=None if timed_out else code,
            output=output,
            timed_out=timed_out,
            duration_s=round(time.monotonic() - start, 4),
            output_truncated=proto.total > proto.cap,
            notes=self._notes(output),
        )

    def _notes(self, output: str) -> list[str]:
        """What the command ran into: the run's memory limit (OOM kills), the disk quota."""
        notes = []
        if self.cgroup is not None:
            kills = self.cgroup.oom_kills()
            if kills > self._oom_seen:
                notes.append(f"[note: {kills - self._oom_seen} process(es) killed: the run's memory limit of "
                             f"{size_text(self.limits.memory_bytes)} (all its processes together) was reached]")
                self._oom_seen = kills
        if self.volume is not None:
            note = self.volume.after_command(output)
            if note is not None:
                notes.append(note)
        return notes

    @staticmethod
    def _killpg(transport: asyncio.SubprocessTransport, reaped: bool = False) -> None:
        """SIGKILL the process group the command leads (start_new_session made pgid == pid)."""
        if transport.get_returncode() is not None and not reaped:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(transport.get_pid(), signal.SIGKILL)

    async def _kill_uid(self) -> None:
        """Kill every process of the dedicated uid, including ones that left the process group.

        Done as the uid itself with kill(-1): the kernel then signals exactly what the uid
        could signal, and the harness (root) is out of reach.
        """
        if not self._dedicated:
            return
        for _ in range(3):
            if not uid_processes(self.uid):
                return
            p = await asyncio.create_subprocess_exec(
                _KILL, "-9", "-1", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin"}, cwd="/",
                user=self.uid, group=self.uid, extra_groups=[])
            await p.wait()
            await asyncio.sleep(0.01)

    def kill_now(self) -> None:
        """Synchronous last resort (a cancelled close): SIGKILL every command's process group
        and, as the dedicated uid itself, everything that uid still runs; give the uid back."""
        self._closed = True
        for transport in list(self._running):
            self._killpg(transport)
        if self._dedicated and uid_processes(self.uid):
            subprocess.run([_KILL, "-9", "-1"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin"}, cwd="/",
                           user=self.uid, group=self.uid, extra_groups=[], check=False)
        if self._owns_uid and not uid_processes(self.uid):
            release_uid(self.uid)
            self._owns_uid = False
        self._remove_cgroup(wait_s=0.5)

    def _remove_cgroup(self, wait_s: float) -> None:
        cg, self.cgroup = self.cgroup, None
        if cg is not None and cg.remove(wait_s):
            for path in cg.paths:
                lifeline.drop("cgroup", str(path))
        elif cg is not None:
            self.cgroup = cg  # still busy: tried again by close(), else by the lifeline

    async def close(self) -> None:
        """Kill whatever this sandbox still runs; give the uid back, remove the cgroup. Idempotent."""
        if self._closed and not self._running and not self._owns_uid and self.cgroup is None:
            return
        self._closed = True
        for transport in list(self._running):
            self._killpg(transport)
        if self._dedicated:
            await self._kill_uid()
        deadline = time.monotonic() + 10
        while self._running and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        if self._owns_uid:
            release_uid(self.uid)
            self._owns_uid = False
        if self.cgroup is not None:
            await asyncio.to_thread(self._remove_cgroup, 5.0)
