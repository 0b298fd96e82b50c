"""One run's cgroup: a memory ceiling, a process cap and a fair CPU share for the whole run.

RLIMIT_AS bounds one process; a run is many (a shell, its children, background jobs, the
RAM-backed /tmp they fill). A memory cgroup bounds them together: when the run's processes
and the tmpfs pages they wrote reach the limit, the kernel's OOM killer ends the largest of
them inside the cgroup, and nothing outside it. Where the pids and cpu controllers can be
had too, the same run gets a `pids.max` (threads included, unlike RLIMIT_NPROC) and a cpu
cgroup of its own: the kernel shares CPU time between cgroups first, so a run that starts a
hundred busy processes gets the same share as a run with one, not a hundred times more.

Where the cgroup comes from, in order:

* **cgroup v2**, when the harness's own cgroup delegates the memory controller to its
  children (`memory` listed in its `cgroup.subtree_control`, as in a container whose init
  sits at the root, or a systemd unit with `Delegate=yes` whose processes live in a leaf):
  one child with `memory.max`, `memory.swap.max = 0`, and `pids.max` where `pids` is
  delegated too (`cpu`, when delegated, gives the fair share by the child's default weight);
* **cgroup v1**, when the memory controller is mounted as a v1 hierarchy (hybrid hosts,
  these machines): a child of the harness's own memory cgroup with `memory.limit_in_bytes`
  (and `memory.memsw.limit_in_bytes` where swap accounting exists), plus a child in the
  `pids` hierarchy (`pids.max`) and in the `cpu` hierarchy (default `cpu.shares`) where
  those are mounted and writable;
* **none** (not root, no writable memory controller): `RunCgroup.create` returns None and
  the sandbox falls back to RLIMIT_AS per process (docs/user-guide.md, "Sandbox limits").

A process joins by writing to each folder's `cgroup.procs` through descriptors the harness
opened (as root) before the fork: the sandbox's preexec hook writes "0" (itself) right
before bwrap is executed, so nothing of the command ever runs outside the cgroup.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CgroupLayout", "RunCgroup", "join"]

_COUNTER = itertools.count(1)
V1_EXTRAS = ("pids", "cpu")  # v1 hierarchies joined besides memory, where mounted and writable


def _read(path: Path | str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


@dataclass(frozen=True)
class CgroupLayout:
    """Where the cgroup hierarchies are mounted and where this process sits in each, read
    from /proc/self/mountinfo and /proc/self/cgroup (or given, for tests of other hosts)."""

    v2_mount: str | None = None
    v2_own: str | None = None
    v1_mounts: dict[str, str] = field(default_factory=dict)  # controller -> mount point
    v1_own: dict[str, str] = field(default_factory=dict)  # controller -> own path in it

    @classmethod
    def parse(cls, mountinfo: str, cgroup: str) -> CgroupLayout:
        v2_mount = v2_own = None
        v1_mounts: dict[str, str] = {}
        v1_own: dict[str, str] = {}
        for line in mountinfo.splitlines():
            left, _, right = line.partition(" - ")
            fields, rest = left.split(), right.split()
            if len(fields) < 5 or len(rest) < 3:
                continue
            if rest[0] == "cgroup2" and v2_mount is None:
                v2_mount = fields[4]
            elif rest[0] == "cgroup":
                for ctl in rest[2].split(","):
                    v1_mounts.setdefault(ctl, fields[4])
        for line in cgroup.splitlines():
            parts = line.split(":", 2)
            if len(parts) != 3:
                continue
            if parts[0] == "0" and parts[1] == "":
                v2_own = parts[2]
            else:
                for ctl in parts[1].split(","):
                    v1_own.setdefault(ctl, parts[2])
        return cls(v2_mount, v2_own, v1_mounts, v1_own)

    @classmethod
    def current(cls) -> CgroupLayout:
        return cls.parse(_read("/proc/self/mountinfo"), _read("/proc/self/cgroup"))

    def v2_dir(self) -> Path | None:
        if self.v2_mount is None or self.v2_own is None:
            return None
        return Path(self.v2_mount + self.v2_own.rstrip("/")) if self.v2_own != "/" else Path(self.v2_mount)

    def v1_dir(self, controller: str) -> Path | None:
        mnt, own = self.v1_mounts.get(controller), self.v1_own.get(controller)
        if mnt is None or own is None:
            return None
        return Path(mnt + own.rstrip("/")) if own != "/" else Path(mnt)


def _parents(layout: CgroupLayout) -> tuple[int, list[tuple[str, Path]]] | None:
    """(version, [(controller, folder)...]) under which a run's cgroups can be made, memory
    first; None where no memory controller is ours to use."""
    d2 = layout.v2_dir()
    if d2 is not None:
        delegated = _read(d2 / "cgroup.subtree_control").split()
        if "memory" in delegated and os.access(d2, os.W_OK):
            return 2, [("memory", d2)]
    d1 = layout.v1_dir("memory")
    if d1 is not None and (d1 / "memory.limit_in_bytes").exists() and os.access(d1, os.W_OK):
        found = [("memory", d1)]
        for ctl in V1_EXTRAS:
            d = layout.v1_dir(ctl)
            if d is not None and d != d1 and (d / "cgroup.procs").exists() and os.access(d, os.W_OK):
                found.append((ctl, d))
        return 1, found
    return None


@dataclass
class RunCgroup:
    """The cgroup folders of one run (made by `create`, removed by `remove`): memory first,
    then (cgroup v1) the pids and cpu hierarchies' folders where those could be had."""

    version: int
    path: Path  # the memory cgroup (the only folder on cgroup v2)
    limit_bytes: int
    pids_max: int | None = None
    controllers: list[str] = field(default_factory=lambda: ["memory"])
    extra: list[Path] = field(default_factory=list)  # cgroup v1: folders in the other hierarchies

    @classmethod
    def create(cls, limit_bytes: int, tag: str, *, pids_max: int | None = None,
               layout: CgroupLayout | None = None) -> RunCgroup | None:
        """A fresh cgroup limited to `limit_bytes` (and `pids_max` tasks where a pids
        controller is ours), or None where no memory controller is ours to use. OSError when
        one is, but the cgroup could not be set up (nothing is left behind then)."""
        if os.geteuid() != 0 and layout is None:
            return None
        found = _parents(layout or CgroupLayout.current())
        if found is None:
            return None
        version, parents = found
        name = f"assay-{os.getpid()}-{next(_COUNTER)}-{tag}"
        (_, mem_parent), others = parents[0], parents[1:]
        os.mkdir(mem_parent / name, 0o755)
        cg = cls(version, mem_parent / name, limit_bytes)
        try:
            if version == 2:
                cg._setup_v2(pids_max, _read(mem_parent / "cgroup.subtree_control").split())
            else:
                cg._setup_v1(pids_max, [(ctl, d / name) for ctl, d in others])
        except OSError:
            cg.remove(wait_s=0)
            raise
        return cg

    def _setup_v2(self, pids_max: int | None, delegated: list[str]) -> None:
        p = self.path
        (p / "memory.max").write_text(str(self.limit_bytes))
        if (p / "memory.swap.max").exists():
            (p / "memory.swap.max").write_text("0")
        if pids_max is not None and "pids" in delegated:
            (p / "pids.max").write_text(str(pids_max))
            self.pids_max = pids_max
            self.controllers.append("pids")
        if "cpu" in delegated:
            self.controllers.append("cpu")  # its own default cpu.weight: a fair share

    def _setup_v1(self, pids_max: int | None, others: list[tuple[str, Path]]) -> None:
        p = self.path
        (p / "memory.limit_in_bytes").write_text(str(self.limit_bytes))
        if (p / "memory.memsw.limit_in_bytes").exists():
            (p / "memory.memsw.limit_in_bytes").write_text(str(self.limit_bytes))
        for ctl, d in others:
            if ctl == "pids" and pids_max is None:
                continue
            os.mkdir(d, 0o755)
            self.extra.append(d)
            if ctl == "pids":
                (d / "pids.max").write_text(str(pids_max))
                self.pids_max = pids_max
            self.controllers.append(ctl)

    @property
    def paths(self) -> list[Path]:
        """Every folder of the run's cgroup (for cleanup and the lifeline)."""
        return [self.path, *self.extra]

    @property
    def label(self) -> str:
        return f"cgroup v{self.version}: " + ", ".join(self.controllers)

    def procs_files(self) -> list[str]:
        return [str(p / "cgroup.procs") for p in self.paths]

    def open_procs(self) -> list[int]:
        """Write descriptors on every folder's cgroup.procs (close-on-exec), for `join`."""
        fds: list[int] = []
        try:
            for f in self.procs_files():
                fds.append(os.open(f, os.O_WRONLY | os.O_CLOEXEC))
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        return fds

    def oom_kills(self) -> int:
        """How many processes the OOM killer ended in this cgroup so far."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        for line in _read(self.path / name).splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        return 0

    def peak_bytes(self) -> int | None:
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        text = _read(self.path / name).strip()
        return int(text) if text.isdigit() else None

    def kill_all(self, rounds: int = 100) -> int:
        """SIGKILL every process in the cgroup, those that left their process group or session
        (`setsid`, `nohup`) included, until none is left; how many were killed. cgroup v2's
        `cgroup.kill` where the kernel has it, else rounds over `cgroup.procs` (a fork between
        two reads is caught by the next round; `pids.max` bounds how many can appear)."""
        kill_file = self.path / "cgroup.kill"
        if self.version == 2 and kill_file.exists():
            with contextlib.suppress(OSError):
                kill_file.write_text("1")
        killed = 0
        for _ in range(rounds):
            pids = {int(x) for f in self.procs_files() for x in _read(f).split() if x.isdigit()}
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
            time.sleep(0.01)
        return killed

    def remove(self, wait_s: float = 5.0) -> bool:
        """rmdir every folder once its processes are gone (True), retrying for `wait_s`."""
        end = time.monotonic() + wait_s
        pending = list(self.paths)
        while True:
            for p in list(pending):
                try:
                    os.rmdir(p)
                    pending.remove(p)
                except FileNotFoundError:
                    pending.remove(p)
                except OSError:
                    continue
            if not pending:
                return True
            if time.monotonic() > end:
                return False
            time.sleep(0.02)


def join(fds: Sequence[int]) -> None:
    """Move the calling process into the cgroups whose cgroup.procs `fds` are open on (for a
    preexec hook: one write each)."""
    for fd in fds:
        os.write(fd, b"0")


def remove_path(path: str) -> None:
    """rmdir a cgroup folder left by a harness that died (for the lifeline)."""
    with contextlib.suppress(OSError):
        os.rmdir(path)
