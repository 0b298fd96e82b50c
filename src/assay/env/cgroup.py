"""One run's memory ceiling: a memory cgroup that every process of the run joins.

RLIMIT_AS bounds one process; a run is many (a shell, its children, background jobs, the
RAM-backed /tmp they fill). A memory cgroup bounds them together: when the run's processes
and the tmpfs pages they wrote reach the limit, the kernel's OOM killer ends the largest of
them inside the cgroup, and nothing outside it.

Where the cgroup comes from, in order:

* **cgroup v2**, when the harness's own cgroup delegates the memory controller to its
  children (`memory` listed in its `cgroup.subtree_control`, as in a container whose init
  sits at the root, or a systemd unit with `Delegate=yes` whose processes live in a leaf):
  a child with `memory.max` and `memory.swap.max = 0`;
* **cgroup v1**, when the memory controller is mounted as a v1 hierarchy (hybrid hosts,
  these machines): a child of the harness's own memory cgroup with `memory.limit_in_bytes`
  (and `memory.memsw.limit_in_bytes` where swap accounting exists);
* **none** (not root, no writable memory controller): `MemoryCgroup.create` returns None and
  the sandbox falls back to RLIMIT_AS per process (docs/user-guide.md, "Sandbox limits").

A process joins by writing to the cgroup's `cgroup.procs` through a descriptor the harness
opened (as root) before the fork: the sandbox's preexec hook writes "0" (itself) right
before bwrap is executed, so nothing of the command ever runs outside the cgroup.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MemoryCgroup", "join"]

_COUNTER = itertools.count(1)


def _mountpoints() -> tuple[str | None, str | None]:
    """(cgroup2 mount point, v1 memory hierarchy mount point) from /proc/self/mountinfo."""
    v2 = v1 = None
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None, None
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) < 5 or len(rest) < 3:
            continue
        if rest[0] == "cgroup2" and v2 is None:
            v2 = fields[4]
        elif rest[0] == "cgroup" and "memory" in rest[2].split(",") and v1 is None:
            v1 = fields[4]
    return v2, v1


def _own_paths() -> tuple[str | None, str | None]:
    """(own cgroup v2 path, own v1 memory cgroup path) from /proc/self/cgroup."""
    v2 = v1 = None
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return None, None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
        elif "memory" in parts[1].split(","):
            v1 = parts[2]
    return v2, v1


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return ""


def _parent() -> tuple[int, Path] | None:
    """(version, folder) under which run cgroups with a memory limit can be made, if any."""
    if os.geteuid() != 0:
        return None
    mnt2, mnt1 = _mountpoints()
    own2, own1 = _own_paths()
    if mnt2 is not None and own2 is not None:
        d = Path(mnt2 + own2.rstrip("/")) if own2 != "/" else Path(mnt2)
        if "memory" in _read(d / "cgroup.subtree_control").split() and os.access(d, os.W_OK):
            return 2, d
    if mnt1 is not None and own1 is not None:
        d = Path(mnt1 + own1.rstrip("/")) if own1 != "/" else Path(mnt1)
        if (d / "memory.limit_in_bytes").exists() and os.access(d, os.W_OK):
            return 1, d
    return None


@dataclass
class MemoryCgroup:
    """A memory cgroup of one run (made by `create`, removed by `remove`)."""

    version: int
    path: Path
    limit_bytes: int

    @classmethod
    def create(cls, limit_bytes: int, tag: str) -> MemoryCgroup | None:
        """A fresh cgroup limited to `limit_bytes`, or None where no memory controller is ours
        to use. OSError when one is, but the cgroup could not be set up."""
        found = _parent()
        if found is None:
            return None
        version, parent = found
        path = parent / f"assay-{os.getpid()}-{next(_COUNTER)}-{tag}"
        os.mkdir(path, 0o755)
        cg = cls(version, path, limit_bytes)
        try:
            if version == 2:
                (path / "memory.max").write_text(str(limit_bytes))
                if (path / "memory.swap.max").exists():
                    (path / "memory.swap.max").write_text("0")
            else:
                (path / "memory.limit_in_bytes").write_text(str(limit_bytes))
                if (path / "memory.memsw.limit_in_bytes").exists():
                    (path / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))
        except OSError:
            cg.remove()
            raise
        return cg

    @property
    def label(self) -> str:
        return f"cgroup v{self.version}"

    def open_procs(self) -> int:
        """A write descriptor on cgroup.procs (close-on-exec), for `join` in a child."""
        return os.open(self.path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)

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

    def remove(self, wait_s: float = 5.0) -> bool:
        """rmdir the cgroup once its processes are gone (True), retrying for `wait_s`."""
        end = time.monotonic() + wait_s
        while True:
            try:
                os.rmdir(self.path)
                return True
            except FileNotFoundError:
                return True
            except OSError:
                if time.monotonic() > end:
                    return False
                time.sleep(0.02)


def join(fd: int) -> None:
    """Move the calling process into the cgroup whose cgroup.procs `fd` is open on (for a
    preexec hook: async-signal-safe enough, one write)."""
    os.write(fd, b"0")


def remove_path(path: str) -> None:
    """rmdir a cgroup folder left by a harness that died (for the lifeline)."""
    with contextlib.suppress(OSError):
        os.rmdir(path)
