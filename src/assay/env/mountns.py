"""A private mount view in which root never follows a link the delivered code made.

A scenario grader is trusted case code and runs as root; it reads what the delivered system
wrote in the workspace copy (`predictions.json`), sometimes while that system still runs, so
the system can swap the file for a link to a root-only host file between its write and the
grader's read. `nosymfollow_view` (the grading worker's preexec hook) gives the worker a
mount namespace of its own in which the copy is remounted `nosymfollow`: the kernel refuses
to follow any symlink on it (ELOOP), whatever the grader's `open()` does. The delivered code
gets the copy from a second bind of it (`alias`) without that flag, so its own links work
inside its sandbox. Mounts made here are private: nothing reaches the host's mount table,
and they go when the worker's last process does.
"""

from __future__ import annotations

import ctypes
import os

__all__ = ["nosymfollow_view"]

CLONE_NEWNS = 0x00020000
MS_NOSUID = 2
MS_NODEV = 4
MS_REMOUNT = 32
MS_NOSYMFOLLOW = 256
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    return libc


def _mount(libc: ctypes.CDLL, src: str | None, dst: str, flags: int) -> None:
    if libc.mount(src.encode() if src else None, dst.encode(), None, flags, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {src or '-'} on {dst} (flags {flags:#x}): {os.strerror(err)}")


def nosymfollow_view(path: str, alias: str) -> None:
    """In this process (a preexec hook, as root): a private mount namespace where `path` is
    `nosymfollow` (and nosuid, nodev) and `alias` is the same tree with links working."""
    libc = _libc()
    if libc.unshare(CLONE_NEWNS) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWNS): {os.strerror(err)}")
    _mount(libc, None, "/", MS_REC | MS_PRIVATE)
    _mount(libc, path, alias, MS_BIND)
    _mount(libc, path, path, MS_BIND)  # a mount of its own even where the copy is a plain folder
    _mount(libc, None, path, MS_REMOUNT | MS_BIND | MS_NOSYMFOLLOW | MS_NOSUID | MS_NODEV)
