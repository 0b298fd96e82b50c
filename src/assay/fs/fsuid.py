"""Acting on files as a run's uid: the thread's filesystem uid and gid switched for a call.

The file tools run in the harness (root); with `acting_as` the kernel checks permissions as
the sandbox would and new files belong to the run.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
from collections.abc import Iterator

__all__ = ["acting_as"]


_LIBC = ctypes.CDLL(None, use_errno=True)


@contextlib.contextmanager
def acting_as(uid: int | None) -> Iterator[None]:
    """Run the body with this thread's filesystem uid and gid set to `uid` (root only; no-op
    for None, for 0, or when not root). Only the calling thread is affected (setfsuid is
    per thread), and only file permission checks and the owner of created files change."""
    if uid is None or uid == 0 or os.geteuid() != 0:
        yield
        return
    _LIBC.setfsgid(uid)
    _LIBC.setfsuid(uid)
    try:
        if _LIBC.setfsuid(-1) != uid or _LIBC.setfsgid(-1) != uid:  # -1: query without change
            raise OSError(errno.EPERM, f"cannot act as uid {uid} (setfsuid failed)")
        yield
    finally:
        _LIBC.setfsuid(0)
        _LIBC.setfsgid(0)
