"""Writing a file into a workspace without writing through anything the agent planted.

A file is written by creating a fresh one and renaming it into place (`replace_file`), so an
existing inode is never written through (a hard link to a file outside the workspace stays
untouched), no setuid/setgid bit is left on it, and its parents are made without following
a link. `write_file` is that write with the file tools' limits (`max_bytes`, checked before
any of the content is encoded, and the workspace's quota through `room`); a full workspace
is reported as such (QuotaError). The agent's `write_file` tool is this function; the harness
writes a workspace's own files (TASK.md, bin/ask, system/config) with it too, from layers
below `assay.agent`, which is why it lives here.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path

from assay.fs.paths import PathError, can_chown, open_dirs, resolved_parts
from assay.fs.reads import open_in_workspace

__all__ = ["QuotaError", "replace_file", "write_file"]


class QuotaError(PathError):
    """A write refused for want of room: the workspace's disk quota or a file-size limit."""


def _room_error(rel: str, e: OSError) -> QuotaError | None:
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return QuotaError(f"{rel}: refused: no space left in the workspace (its disk quota is reached; "
                          "delete files to make room)")
    if e.errno == errno.EFBIG:
        return QuotaError(f"{rel}: refused: the file would pass the file-size limit")
    return None


def replace_file(workspace: Path, rel: str, data: bytes, owner: int | None, mode: int | None = None) -> None:
    """Write data as a new inode renamed over rel (mkdir -p the parents)."""
    root, parts = resolved_parts(workspace, rel)
    if not parts:
        raise PathError(f"{rel!r} is the workspace root directory, not a file")
    dfd = open_dirs(root, parts[:-1], rel, create=True, owner=owner)
    name = parts[-1]
    try:
        try:
            old: os.stat_result | None = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            old = None
        if old is not None and stat.S_ISDIR(old.st_mode):
            raise PathError(f"{rel} is a directory, not a file")
        if old is not None and not stat.S_ISREG(old.st_mode):
            raise PathError(f"{rel}: refused: the existing entry is not a regular file")
        # Never carry setuid/setgid/sticky over: the harness (root) owns what it writes.
        if mode is None:
            mode = stat.S_IMODE(old.st_mode) & 0o777 if old is not None else 0o644
        mode &= 0o777
        tmp = f".{name[:200]}.assay-{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=dfd)
        try:
            try:
                view = memoryview(data)
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
                if can_chown():
                    if owner is not None:
                        os.fchown(fd, owner, owner)
                    elif old is not None:
                        os.fchown(fd, old.st_uid, old.st_gid)
                os.fchmod(fd, mode)
            finally:
                os.close(fd)
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            room = _room_error(rel, e) if isinstance(e, OSError) else None
            if room is not None:
                raise room from None
            raise
    finally:
        os.close(dfd)


def write_file(workspace: Path, rel: str, content: str, owner: int | None = None, mode: int | None = None,
               *, max_bytes: int | None = None, room: Callable[[int, int], None] | None = None) -> str:
    """Create or overwrite a file; created directories and the file get `owner` (uid and gid),
    the file `mode` (default: the old file's permissions, else 0644). With `max_bytes`, a
    longer content is refused (QuotaError) before it is encoded; `room(size, replaced)` may
    refuse the write first (the workspace's checked quota)."""
    if max_bytes is not None and len(content) > max_bytes:  # a character is at least one byte
        raise QuotaError(f"{rel}: refused: {len(content)} characters is over the file tools' limit of "
                         f"{max_bytes} bytes")
    data = content.encode("utf-8")
    if max_bytes is not None and len(data) > max_bytes:
        raise QuotaError(f"{rel}: refused: {len(data)} bytes is over the file tools' limit of {max_bytes} bytes")
    if room is not None:
        room(len(data), _existing_size(workspace, rel))
    replace_file(workspace, rel, data, owner, mode)
    lines = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
    return f"wrote {len(data)} bytes ({lines} lines) to {rel}"


def _existing_size(workspace: Path, rel: str) -> int:
    try:
        with open_in_workspace(workspace, rel) as (_fd, st):
            return st.st_size
    except PathError:
        return 0
