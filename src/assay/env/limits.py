"""What one sandboxed command may use (`Limits`), and sizes as people write them.

The limits are applied before bubblewrap starts (rlimits, `assay.env.launch`), by the run's
cgroup (`assay.env.cgroup`) and by the sandbox's RAM mounts (`assay.env.bwrap`).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GiB", "Limits", "MiB", "size_text"]

GiB = 1024**3
MiB = 1024**2


@dataclass(frozen=True)
class Limits:
    """Resource limits of one command, applied with setrlimit before bwrap starts."""

    cpu_seconds: int = 1800
    memory_bytes: int = 4 * GiB  # the run's memory cgroup; RLIMIT_AS per process where there is none
    file_size_bytes: int = 1 * GiB  # RLIMIT_FSIZE
    nproc: int = 512  # RLIMIT_NPROC: effective because the process runs as its own unprivileged uid
    capture_bytes: int = 1_000_000  # output kept in memory per command; the rest is drained and dropped
    tmp_bytes: int = 1 * GiB  # size of the private /tmp tmpfs (isolated mode), so /tmp cannot eat the RAM
    shm_bytes: int = 256 * MiB  # size of the private /dev/shm tmpfs (isolated mode)


def size_text(n: int) -> str:
    """A byte count as people write it: "4 GiB", "256 MiB", "1.5 GiB"."""
    return f"{n / GiB:g} GiB" if n >= GiB else f"{n / MiB:g} MiB"
