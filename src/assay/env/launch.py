"""Starting one sandboxed command's process and following it to its end.

What the child does between fork and exec (`rlimits`: join the run's cgroup, set the
rlimits, die with the harness), data handed to bwrap through pipes (`data_pipe`), the output
kept up to a cap while the rest is drained (`Capture`), and the end of a sandbox's pid
namespace (`read_child_pid` from bwrap's --info-fd, `wait_gone`).
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import re
import resource
import signal
import time
from collections.abc import Callable

from assay.env.cgroup import join
from assay.env.limits import Limits

__all__ = ["PR_SET_PDEATHSIG", "Capture", "data_pipe", "read_child_pid", "rlimits", "wait_gone"]

PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True)


def data_pipe(data: bytes, pass_fds: list[int]) -> int:
    """A pipe holding `data` (written now: it must fit in the pipe buffer), its read end
    added to `pass_fds` for the child."""
    r, w = os.pipe()
    pass_fds.append(r)
    try:
        os.write(w, data)
    finally:
        os.close(w)
    return r


def rlimits(limits: Limits, nproc: bool, cgroup_fds: list[int] | None = None) -> Callable[[], None]:
    """preexec_fn: runs in the child after the uid switch, right before exec. With
    `cgroup_fds` (cgroup.procs of the run's cgroup folders, opened by the harness) the child
    joins those first; without them, memory is bounded per process by RLIMIT_AS."""
    wanted = [(resource.RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + 5),
              (resource.RLIMIT_FSIZE, limits.file_size_bytes, limits.file_size_bytes),
              (resource.RLIMIT_CORE, 0, 0)]
    if not cgroup_fds:
        wanted.append((resource.RLIMIT_AS, limits.memory_bytes, limits.memory_bytes))
    if nproc:
        wanted.append((resource.RLIMIT_NPROC, limits.nproc, limits.nproc))

    parent = os.getpid()

    def apply() -> None:
        if cgroup_fds:
            join(cgroup_fds)
        for res, soft, hard in wanted:
            _cur_soft, cur_hard = resource.getrlimit(res)
            if cur_hard != resource.RLIM_INFINITY:
                hard = min(hard, cur_hard)
            resource.setrlimit(res, (min(soft, hard), hard))
        # Die with the harness even if it is killed before bwrap's own --die-with-parent is
        # in force (a kill -9 between fork and bwrap's prctl left a bwrap waiting forever).
        # Set after the uid switch (which clears it); it survives exec of a non-setuid bwrap.
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return apply


def read_child_pid(fd: int | None) -> int | None:
    """The host pid of the sandbox init from bwrap's --info-fd JSON, if bwrap got that far."""
    if fd is None:
        return None
    os.set_blocking(fd, False)
    try:
        data = os.read(fd, 65536)
    except OSError:
        return None
    m = re.search(rb'"child-pid"\s*:\s*(\d+)', data)
    return int(m.group(1)) if m else None


async def wait_gone(pid: int, limit_s: float = 2.0) -> bool:
    """Wait until pid has exited (gone or zombie); False if it still runs after limit_s."""
    end = time.monotonic() + limit_s
    while True:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state in (b"Z", b"X"):
            return True
        if time.monotonic() > end:
            return False
        await asyncio.sleep(0.0005)


class Capture(asyncio.SubprocessProtocol):
    """Keeps the first `cap` bytes of the output and drops the rest as it arrives.

    A protocol rather than asyncio's Process: Process.wait() also waits for the pipes to
    close, which a background child holding stdout can postpone forever.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, cap: int) -> None:
        self.cap = cap
        self.buf = bytearray()
        self.total = 0
        self.exited: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes | bytearray) -> None:
        self.total += len(data)
        room = self.cap - len(self.buf)
        if room > 0:
            self.buf.extend(data[:room])

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1 and not self.closed.done():
            self.closed.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        for f in (self.exited, self.closed):
            if not f.done():
                f.set_result(None)
