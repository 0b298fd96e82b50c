"""The hardened file primitives every layer shares, and the agent's file tools.

The harness runs as root, so a careless `open()` on an agent-chosen path could read or
overwrite anything on the host, e.g. through a symlink the agent planted in its workspace,
and a careless read of a FIFO blocks forever. This module holds the one of each mechanism:
the relative-path check (`check_relative`), opening a regular file without following a link
or blocking (`open_regular_at`, `read_regular`), content digests (`file_digest`,
`tree_digest`), and copying a tree an agent could write (`copy_tree`). The file tools
(`read_file`, `write_file`, `edit_file`, `list_files`) are built on them. Every operation

* refuses absolute paths and '..' components outright;
* resolves symlinks and refuses a path whose real location is outside the workspace;
* then walks to the resolved location one component at a time with `O_NOFOLLOW`, relative
  to directory descriptors, so a symlink swapped in after the check (a race with a command
  still running in the sandbox) makes the operation fail instead of escaping;
* writes by creating a fresh file and renaming it into place, so it never writes through
  an existing inode (a hard link to a file outside the workspace stays untouched), and
  never leaves setuid/setgid bits on what it writes;
* acts with the run's uid when given one (`acting_as`: the thread's filesystem uid and gid
  are switched for the call, so the kernel checks permissions as the sandbox would and new
  files belong to the run), and with the run's limits: a file written or edited through the
  tools is at most `max_bytes` (FILE_TOOL_MAX_BYTES by default), checked before any of it
  is built in memory, and a full workspace is reported as such (QuotaError).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import os
import re
import secrets
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

__all__ = ["FILE_TOOL_MAX_BYTES", "LIST_MAX_DEPTH", "NAME_MAX", "PATH_MAX", "CopyLimits", "CopyReport", "PathError", "QuotaError",
           "acting_as", "check_length", "check_relative", "copy_tree", "edit_file", "file_digest",
           "entry_kind", "list_dir", "list_files", "open_regular_at", "private_dir", "read_workspace_file", "read_file", "read_regular", "read_tree", "remove_unsafe", "resolve", "tree_digest", "write_file"]

FILE_TOOL_MAX_BYTES = 64 * 1024**2
"""Largest file `write_file` / `edit_file` write (or `edit_file` reads): 64 MiB. Commands in
the sandbox may write larger files, up to the sandbox's file-size limit."""
LIST_MAX_DEPTH = 64
"""`list_files` and `read_tree` do not descend deeper than this below the folder asked for."""

MAX_LINE_CHARS = 2000
"""Longer lines are clipped in read_file so one minified line cannot flood the context."""

READ_FILE_MAX_BYTES = 64 * 1024 * 1024
"""read_file reads at most this much of a file (its lines past it are not counted)."""

_BINARY_SNIFF_BYTES = 8192
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class PathError(ValueError):
    """A path the harness refuses to touch; the message says what and why."""


@contextlib.contextmanager
def _subdir(dir_fd: int, name: str) -> Iterator[int | None]:
    """The folder `name` under `dir_fd`, opened without following a link (None when it is a
    link now, or vanished: a tree being walked can change under the walker); closed after."""
    try:
        sub = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError:
        yield None
        return
    try:
        yield sub
    finally:
        os.close(sub)


class QuotaError(PathError):
    """A write refused for want of room: the workspace's disk quota or a file-size limit."""


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


def _room_error(rel: str, e: OSError) -> QuotaError | None:
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return QuotaError(f"{rel}: refused: no space left in the workspace (its disk quota is reached; "
                          "delete files to make room)")
    if e.errno == errno.EFBIG:
        return QuotaError(f"{rel}: refused: the file would pass the file-size limit")
    return None


def _root(workspace: Path) -> str:
    """The workspace's real path: the boundary every resolved path must stay within."""
    return os.path.realpath(workspace)


PATH_MAX = 4096
"""Linux's longest path, its terminating NUL included: a longer one fails with ENAMETOOLONG."""
NAME_MAX = 255
"""Linux's longest file name (one path component), in bytes."""


def _shown(rel: str, limit: int = 120) -> str:
    """`rel` for an error message: its repr, cut to about `limit` characters."""
    text = repr(rel)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(rel)} characters)"


def _byte_len(text: str) -> int:
    """Bytes of `text` as a path on disk: UTF-8, a non-UTF-8 file name's escaped bytes
    (surrogateescape) one byte each, any other lone surrogate counted as UTF-8 would write it."""
    if text.isascii():
        return len(text)
    try:
        return len(text.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError:
        return len(text.encode("utf-8", "surrogatepass"))


def check_length(rel: str) -> None:
    """Refuse (PathError) a path the OS would refuse with ENAMETOOLONG: PATH_MAX bytes or more
    in all, or a component over NAME_MAX bytes (UTF-8, as the kernel counts them). Checked
    before any system call, so the answer is the same whichever call would have met it."""
    size = _byte_len(rel)
    if size >= PATH_MAX:
        raise PathError(f"path {_shown(rel)} refused: it is too long ({size} bytes; the OS allows "
                        f"{PATH_MAX - 1})")
    for part in rel.split("/"):
        n = _byte_len(part)
        if n > NAME_MAX:
            raise PathError(f"path {_shown(rel)} refused: its component {_shown(part, 40)} is {n} bytes "
                            f"long; the OS allows {NAME_MAX} bytes per name")


def check_relative(rel: str) -> None:
    """Refuse a workspace path that is wrong before looking at the disk: not a string, empty,
    NUL, longer than the OS allows (`check_length`), absolute (also a Windows drive), or with
    a '..' component."""
    if not isinstance(rel, str):
        raise PathError(f"path must be a string, got {type(rel).__name__}")
    if rel.strip() == "":
        raise PathError("empty path refused: give a path relative to the workspace root")
    if "\x00" in rel:
        raise PathError(f"path {_shown(rel)} refused: it contains a NUL character")
    check_length(rel)
    if rel.startswith(("/", "\\")) or PurePosixPath(rel).is_absolute() or re.match(r"^[A-Za-z]:", rel):
        raise PathError(f"absolute path {_shown(rel)} refused: it must stay inside the workspace "
                        "(paths are relative to the workspace root)")
    if ".." in rel.replace("\\", "/").split("/"):
        raise PathError(f"path {_shown(rel)} refused: it escapes the workspace ('..' components are not allowed)")


def _inside(root: str, real: str) -> bool:
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def resolve(workspace: Path, rel: str) -> Path:
    """Map a workspace-relative path to its real host path, refusing anything that leads out.

    Symlinks are resolved (also dangling ones, and for a path that does not exist yet its
    nearest existing ancestor decides); '.' means the workspace root itself.
    """
    check_relative(rel)
    root = _root(workspace)
    joined = os.path.join(root, rel)
    if _byte_len(joined) >= PATH_MAX:
        raise PathError(f"path {_shown(rel)} refused: it is too long (the workspace's host path and it "
                        f"pass the {PATH_MAX - 1} bytes the OS allows)")
    real = os.path.realpath(joined)
    if not _inside(root, real):
        raise PathError(f"path {_shown(rel)} refused: it resolves outside the workspace (through a symlink)")
    if _byte_len(real) >= PATH_MAX:
        raise PathError(f"path {_shown(rel)} refused: through its symlinks it resolves to a path longer than "
                        f"the {PATH_MAX - 1} bytes the OS allows")
    return Path(real)


def _rel_parts(workspace: Path, rel: str) -> tuple[str, tuple[str, ...]]:
    """The workspace root and the components of the resolved path below it."""
    root = _root(workspace)
    real = resolve(workspace, rel)
    parts = PurePosixPath(os.path.relpath(real, root)).parts
    return root, tuple(p for p in parts if p != ".")


def _can_chown() -> bool:
    return os.geteuid() == 0


def _open_dirs(root: str, parts: tuple[str, ...], rel: str, *, create: bool = False,
               owner: int | None = None) -> int:
    """Open the directory root/parts... without following any symlink; optionally mkdir -p."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in parts:
            try:
                nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise PathError(f"{rel}: no such file or directory") from None
                os.mkdir(name, 0o755, dir_fd=fd)
                if owner is not None and _can_chown():
                    os.chown(name, owner, owner, dir_fd=fd, follow_symlinks=False)
                nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except (NotADirectoryError, OSError) as e:
                raise PathError(f"{rel}: refused: {name!r} is not a plain directory "
                                f"(a file or a symlink in the way; {e.strerror})") from None
            os.close(fd)
            fd = nfd
        return fd
    except BaseException:
        os.close(fd)
        raise


@contextlib.contextmanager
def _open_regular(workspace: Path, rel: str) -> Iterator[tuple[int, os.stat_result]]:
    """An fd on an existing regular file at rel, opened without following symlinks."""
    root, parts = _rel_parts(workspace, rel)
    if not parts:
        raise PathError(f"{rel!r} is the workspace root directory, not a file")
    dfd = _open_dirs(root, parts[:-1], rel)
    try:
        try:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                         dir_fd=dfd)
        except FileNotFoundError:
            raise PathError(f"{rel}: no such file") from None
        except OSError as e:
            raise PathError(f"{rel}: refused ({e.strerror})") from None
    finally:
        os.close(dfd)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise PathError(f"{rel} is a directory, not a file (use list_files)")
        if not stat.S_ISREG(st.st_mode):
            raise PathError(f"{rel} is not a regular file")
        yield fd, st
    finally:
        os.close(fd)


def _looks_binary(head: bytes) -> bool:
    if b"\x00" in head:
        return True
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        # A multi-byte character cut by the sniff window is fine; anything else is not text.
        return e.start < len(head) - 3 or len(head) < _BINARY_SNIFF_BYTES
    return False


IMAGE_MAX_BYTES = 5 * 1024**2
"""Largest image `read_image` returns (Anthropic's per-image limit; OpenAI's is larger)."""


def image_media_type(head: bytes) -> str | None:
    """The media type of an image a model can take (PNG, JPEG, GIF, WebP), from its first bytes."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None


def read_image(workspace: Path, rel: str, max_bytes: int = IMAGE_MAX_BYTES) -> tuple[str, int, bytes | None] | None:
    """(media type, size, bytes) when workspace/rel is an image by its content, the bytes None
    when it is over `max_bytes`; None when it is not an image. Opened as `read_file` opens."""
    with _open_regular(workspace, rel) as (fd, st):
        kind = image_media_type(os.pread(fd, 16, 0))
        if kind is None:
            return None
        if st.st_size > max_bytes:
            return kind, st.st_size, None
        data = os.pread(fd, max_bytes + 1, 0)
        return (kind, len(data), None) if len(data) > max_bytes else (kind, len(data), data)


def read_file(workspace: Path, rel: str, offset: int = 0, limit: int = 400) -> str:
    """Lines [offset, offset+limit) of a text file, numbered from 1, plus what remains."""
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    with _open_regular(workspace, rel) as (fd, st):
        head = os.pread(fd, _BINARY_SNIFF_BYTES, 0)
        if _looks_binary(head):
            return f"[{rel} is a binary file ({st.st_size} bytes); not shown as text]"
        out: list[str] = []
        total = 0
        cut = st.st_size > READ_FILE_MAX_BYTES
        with os.fdopen(os.dup(fd), "rb") as f:
            # Lines are read at most MAX_LINE_CHARS * 4 bytes at a time and only the first
            # READ_FILE_MAX_BYTES of the file: one huge line or file cannot take the memory.
            for i, (raw, skipped) in enumerate(_capped_lines(f, READ_FILE_MAX_BYTES, MAX_LINE_CHARS * 4)):
                total = i + 1
                if offset <= i < offset + limit:
                    line = raw.rstrip(b"\n").rstrip(b"\r").decode("utf-8", errors="replace")
                    if len(line) > MAX_LINE_CHARS or skipped:
                        more = f"{len(line) - MAX_LINE_CHARS} more characters" if not skipped else \
                            f"{len(line) - MAX_LINE_CHARS} more characters and {skipped} more bytes"
                        line = line[:MAX_LINE_CHARS] + f" [... line clipped: {more}]"
                    out.append(f"{i + 1:>5}\t{line}")
    if total == 0:
        return f"[{rel} is empty]"
    note = (f"[only the first {READ_FILE_MAX_BYTES} of {st.st_size} bytes are read; use run_command "
            "(head, tail, grep) for the rest]") if cut else ""
    if offset >= total:
        return f"[offset {offset} is past the end: {rel} has {total} lines{' read' if cut else ''}]" + \
            (f"\n{note}" if note else "")
    remaining = total - (offset + limit)
    if remaining > 0:
        out.append(f"[{remaining} more lines; continue with offset={offset + limit}]")
    if note:
        out.append(note)
    return "\n".join(out)


def _capped_lines(f: Any, max_bytes: int, max_line: int) -> Iterator[tuple[bytes, int]]:
    """(line, bytes of it skipped) for the file's lines within its first `max_bytes`, each cut
    to `max_line` bytes: the rest of a longer line is skipped, never held in memory."""
    left = max_bytes
    while left > 0:
        line = f.readline(min(max_line, left))
        if not line:
            return
        left -= len(line)
        skipped = 0
        if not line.endswith(b"\n") and len(line) == max_line:  # a longer line: skip to its end
            while left > 0:
                rest = f.readline(min(1 << 20, left))
                left -= len(rest)
                skipped += len(rest.rstrip(b"\n"))
                if not rest or rest.endswith(b"\n"):
                    break
        yield line, skipped


def _replace_file(workspace: Path, rel: str, data: bytes, owner: int | None, mode: int | None = None) -> None:
    """Write data as a new inode renamed over rel (mkdir -p the parents)."""
    root, parts = _rel_parts(workspace, rel)
    if not parts:
        raise PathError(f"{rel!r} is the workspace root directory, not a file")
    dfd = _open_dirs(root, parts[:-1], rel, create=True, owner=owner)
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
                if _can_chown():
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
    _replace_file(workspace, rel, data, owner, mode)
    lines = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
    return f"wrote {len(data)} bytes ({lines} lines) to {rel}"


def _existing_size(workspace: Path, rel: str) -> int:
    try:
        with _open_regular(workspace, rel) as (_fd, st):
            return st.st_size
    except PathError:
        return 0


def edit_file(workspace: Path, rel: str, old_text: str, new_text: str, replace_all: bool = False,
              owner: int | None = None, *, max_bytes: int = FILE_TOOL_MAX_BYTES,
              room: Callable[[int, int], None] | None = None) -> str:
    """Replace old_text by new_text; it must occur exactly once unless replace_all. A file over
    `max_bytes`, or an edit whose result would be, is refused before the result is built."""
    if old_text == "":
        raise ValueError("old_text is empty: give the exact text to replace")
    with _open_regular(workspace, rel) as (fd, st):
        if st.st_size > max_bytes:
            raise QuotaError(f"{rel}: refused: {st.st_size} bytes is over the file tools' limit of {max_bytes} "
                             "bytes (edit it with a command)")
        with os.fdopen(os.dup(fd), "rb") as f:
            raw = f.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise QuotaError(f"{rel}: refused: over the file tools' limit of {max_bytes} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{rel} is not UTF-8 text; it cannot be edited") from None
    count = text.count(old_text)
    if count == 0:
        raise ValueError(f"old_text not found in {rel} (it must match exactly, including whitespace)")
    if count > 1 and not replace_all:
        raise ValueError(f"old_text occurs {count} times in {rel}: add surrounding text to make it "
                         "unique, or set replace_all")
    done = count if replace_all else 1
    # UTF-8 matches fall on character boundaries: the byte count of the result is exact.
    size = len(raw) + done * (len(new_text.encode("utf-8")) - len(old_text.encode("utf-8")))
    if size > max_bytes:
        raise QuotaError(f"{rel}: refused: the edit would make the file {size} bytes, over the file tools' "
                         f"limit of {max_bytes} bytes")
    if room is not None:
        room(size, len(raw))
    new = text.replace(old_text, new_text) if replace_all else text.replace(old_text, new_text, 1)
    _replace_file(workspace, rel, new.encode("utf-8"), owner)
    return f"edited {rel}: replaced {done} occurrence{'s' if done != 1 else ''}"


def list_files(workspace: Path, rel: str = ".", max_entries: int = 2000, max_depth: int = LIST_MAX_DEPTH, *,
               show_name: Callable[[str], str] | None = None) -> str:
    """Recursive listing: 'dir/', 'file (N bytes)', 'link -> target' (links are not followed),
    at most `max_entries` lines and `max_depth` levels below `rel`.

    Names are the agent's: a newline in one would read as two entries, an escape sequence or a
    bidi override would forge or hide what follows. `show_name` writes each path and link
    target as shown (the tool box passes `assay.record.escape_controls`); a closing note says
    how many it changed."""
    show = show_name or (lambda text: text)
    root, parts = _rel_parts(workspace, rel)
    fd = _open_dirs(root, parts, rel)
    prefix = "" if not parts else "/".join(parts) + "/"
    lines: list[str] = []
    truncated = False
    too_deep = False
    escaped = 0

    def shown(text: str) -> str:
        nonlocal escaped
        out = show(text)
        escaped += out != text
        return out

    def walk(dfd: int, pre: str, depth: int = 0) -> None:
        nonlocal truncated, too_deep
        with os.scandir(dfd) as it:
            entries = sorted(it, key=lambda e: e.name)
        for e in entries:
            if len(lines) >= max_entries:
                truncated = True
                return
            path = shown(pre + e.name)
            if e.is_symlink():
                lines.append(f"{path} -> {shown(os.readlink(e.name, dir_fd=dfd))}")
            elif e.is_dir(follow_symlinks=False):
                lines.append(path + "/")
                if depth + 1 >= max_depth:
                    too_deep = True
                    continue
                with _subdir(dfd, e.name) as sub:
                    if sub is not None:  # else vanished or replaced meanwhile: list what is there
                        walk(sub, pre + e.name + "/", depth + 1)
                if truncated:
                    return
            else:
                st = e.stat(follow_symlinks=False)
                kind = f"{st.st_size} bytes" if stat.S_ISREG(st.st_mode) else "special file"
                lines.append(f"{path} ({kind})")

    try:
        walk(fd, prefix)
    finally:
        os.close(fd)
    if not lines:
        return f"[{show(rel)} is empty]"
    if escaped:
        lines.append(f"[{escaped} path{'s' if escaped != 1 else ''} with control characters shown escaped: "
                     "\\n is a newline, \\t a tab, \\xNN and \\uNNNN other characters]")
    if truncated:
        lines.append(f"[listing truncated after {max_entries} entries; list a subdirectory to see more]")
    if too_deep:
        lines.append(f"[folders deeper than {max_depth} levels are not listed; list a subdirectory to see more]")
    return "\n".join(lines)


# --------------------------------------------------------------------------- regular files, digests

_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)


def open_regular_at(dir_fd: int | None, name: str | Path) -> tuple[int, os.stat_result]:
    """An fd on the regular file `name` (relative to `dir_fd`, or a path when None): never
    following a final symlink, never blocking on a FIFO or device. PathError otherwise."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError as e:
        raise PathError(f"{name}: refused ({e.strerror}: a symlink, or not readable)") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise PathError(f"{name}: refused: not a regular file ({_kind(st.st_mode)})")
    return fd, st


def read_regular(path: str | Path, max_bytes: int | None = None) -> bytes:
    """The bytes of a regular file opened with `open_regular_at` (PathError when it is a link,
    a special file, or longer than `max_bytes`)."""
    fd, st = open_regular_at(None, path)
    try:
        if max_bytes is not None and st.st_size > max_bytes:
            raise PathError(f"{path}: refused: {st.st_size} bytes is over the limit of {max_bytes}")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read() if max_bytes is None else f.read(max_bytes + 1)
        if max_bytes is not None and len(data) > max_bytes:
            raise PathError(f"{path}: refused: over the limit of {max_bytes} bytes")
        return data
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symlink"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "a regular file" if stat.S_ISREG(mode) else "a special file"


def _feed_fd(h: Any, fd: int) -> None:
    with os.fdopen(os.dup(fd), "rb") as f:
        for chunk in iter(lambda: f.read(1 << 16), b""):
            h.update(chunk)


def file_digest(path: str | Path, length: int = 16) -> str:
    """sha256 of a regular file's bytes (hex, first `length` characters)."""
    h = hashlib.sha256()
    fd, _ = open_regular_at(None, path)
    try:
        _feed_fd(h, fd)
    finally:
        os.close(fd)
    return h.hexdigest()[:length]


SKIP_IN_DIGEST = frozenset({"__pycache__", ".git", ".pytest_cache"})


def tree_digest(path: str | Path, h: Any | None = None, label: str = "") -> str:
    """sha256 over a file or folder: each entry by relative path, files by content, links by
    their text (never followed), special files by their kind (never opened); bytecode left out.
    Feeds `h` when given (and returns its hex digest so far)."""
    h = h if h is not None else hashlib.sha256()
    root = Path(path)
    try:
        st = os.lstat(root)
    except OSError:
        h.update(f"missing:{label}\0".encode())
        return h.hexdigest()
    if not stat.S_ISDIR(st.st_mode):
        _digest_entry(h, None, str(root), label or root.name, st)
        return h.hexdigest()
    fd = os.open(root, _DIR_FLAGS)
    try:
        _digest_dir(h, fd, label)
    finally:
        os.close(fd)
    return h.hexdigest()


def _digest_entry(h: Any, dir_fd: int | None, name: str, rel: str, st: os.stat_result) -> None:
    if stat.S_ISLNK(st.st_mode):
        h.update(f"link:{rel}\0{os.readlink(name, dir_fd=dir_fd)}\0".encode("utf-8", "surrogateescape"))
        return
    if not stat.S_ISREG(st.st_mode):
        h.update(f"special:{rel}\0{_kind(st.st_mode)}\0".encode("utf-8", "surrogateescape"))
        return
    h.update(f"file:{rel}\0".encode("utf-8", "surrogateescape"))
    try:
        fd, _ = open_regular_at(dir_fd, name)
    except PathError:
        h.update(b"unreadable\0")
        return
    try:
        _feed_fd(h, fd)
    finally:
        os.close(fd)
    h.update(b"\0")


def _digest_dir(h: Any, dir_fd: int, prefix: str) -> None:
    with os.scandir(dir_fd) as it:
        entries = sorted(it, key=lambda e: e.name)
    for e in entries:
        if e.name in SKIP_IN_DIGEST or e.name.endswith((".pyc", ".pyo")):
            continue
        rel = f"{prefix}/{e.name}" if prefix else e.name
        st = e.stat(follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            with _subdir(dir_fd, e.name) as sub:
                if sub is None:
                    h.update(f"gone:{rel}\0".encode("utf-8", "surrogateescape"))
                else:  # the folder is an entry itself: an empty one counts
                    h.update(f"dir:{rel}\0".encode("utf-8", "surrogateescape"))
                    _digest_dir(h, sub, rel)
        else:
            _digest_entry(h, dir_fd, e.name, rel, st)


# --------------------------------------------------------------------------- root's own folders


def private_dir(path: str | Path, mode: int = 0o700) -> Path:
    """Make the folder `path`, or take the one already there, for this process's own use, with
    `mode`, when others can create entries beside it (e.g. under /var/tmp).

    Another local user may have planted a symlink there (a chmod through it would open a folder
    of root's to everyone) or a folder of their own (whatever root puts in it, they can swap or
    read). So the folder is made with mkdir (which follows no link), opened with
    `O_DIRECTORY|O_NOFOLLOW`, checked on its descriptor to be a directory owned by our euid and
    not writable by group or others, and only then given `mode` through that descriptor. Any
    other folder is refused (PathError naming it and why); nothing is created in it or
    changed. The parent is trusted: root's, or sticky like /var/tmp (no one can swap entries
    they do not own)."""
    path = Path(path)
    euid = os.geteuid()
    parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with contextlib.suppress(FileExistsError):  # there already: checked below like a new one
            os.mkdir(path.name, 0o700, dir_fd=parent)
        try:
            fd = os.open(path.name, _DIR_FLAGS, dir_fd=parent)
        except OSError as e:  # a link (ELOOP, or ENOTDIR with O_DIRECTORY), a file, ...: say which
            raise PathError(_not_private(path, _what_is_there(parent, path.name, e))) from None
    finally:
        os.close(parent)
    try:
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode):
            raise PathError(_not_private(path, f"it is not a folder ({_kind(st.st_mode)})"))
        if st.st_uid != euid:
            raise PathError(_not_private(path, f"it belongs to uid {st.st_uid}, not to uid {euid} (this process)"))
        if st.st_mode & 0o022:
            raise PathError(_not_private(path, f"it is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"))
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    return path


def _what_is_there(dir_fd: int, name: str, e: OSError) -> str:
    """Why `name` could not be opened as a folder: what lstat says it is, else the error."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as again:
        return again.strerror or str(again)
    if stat.S_ISLNK(st.st_mode):
        return f"it is a symbolic link (to {os.readlink(name, dir_fd=dir_fd)!r})"
    if not stat.S_ISDIR(st.st_mode):
        return f"it is not a folder ({_kind(st.st_mode)})"
    return e.strerror or str(e)


def _not_private(path: Path, why: str) -> str:
    return (f"{path}: refused as a private folder: {why}; another user may have planted it. Nothing was "
            "created in it or changed; remove it if it is not yours, then run again")


# --------------------------------------------------------------------------- copying a tree


@dataclass(frozen=True)
class CopyLimits:
    """Ceilings of one copy of an agent-controlled tree; passing one stops the copy (CopyError)."""

    max_files: int = 100_000
    max_depth: int = 64
    max_bytes: int = 4 * 1024**3
    max_file_bytes: int = 1024**3
    max_seconds: float = 300.0
    on_limit: Literal["stop", "skip"] = "stop"
    """"stop": passing a ceiling raises CopyError. "skip": the copy keeps what it copied so
    far, leaves the rest out (folders deeper than max_depth, entries past max_files, bytes
    past max_bytes, whatever remains when time is up) and says so in `CopyReport.capped`."""


class CopyError(PathError):
    """A copy stopped at a ceiling (too many files, too deep, too big, too slow)."""


class _Capped(Exception):
    """Internal: a "skip" copy reached a ceiling that ends it (files, bytes, time)."""


@dataclass
class CopyReport:
    """What a copy took and what it refused (relative path, reason)."""

    files: int = 0
    dirs: int = 0
    links: int = 0
    bytes: int = 0
    copied: list[str] = field(default_factory=list)  # files, by relative path
    refused: list[tuple[str, str]] = field(default_factory=list)
    capped: list[str] = field(default_factory=list)  # ceilings a "skip" copy reached, as sentences


def copy_tree(src: str | Path, dst: str | Path, *, limits: CopyLimits | None = None,
              owner: int | None = None, skip: Callable[[str], bool] | None = None,
              merge: bool = False) -> CopyReport:
    """Copy a tree an agent could write (or be writing right now) into `dst`, as root, safely.

    The walk opens every directory relative to its parent with O_NOFOLLOW|O_DIRECTORY and
    every file with O_NOFOLLOW|O_NONBLOCK, so a component swapped for a link in the middle
    of the copy is refused instead of followed, and a FIFO never blocks. Regular files are
    copied, but not one with several hard links (another of its links may lie outside the
    tree, and reading it would read that file); links are copied as links only when they
    resolve inside the copy; FIFOs, sockets and devices are left out. Every refusal is in the
    report. Limits on files, depth, bytes and time stop the copy with CopyError. New entries
    belong to `owner` when given (and we are root), modes keep their permission bits without
    setuid/setgid. `skip(rel)` leaves entries out (rel is the POSIX path below `src`).
    `merge`: `dst` may exist; what the copy writes replaces what is there (never through it)."""
    limits = limits or CopyLimits()
    report = CopyReport()
    deadline = time.monotonic() + limits.max_seconds
    dst = Path(dst)
    if not os.path.isdir(src) or os.path.islink(src):  # one file: copied to dst itself
        return _copy_one(Path(src), dst, report, limits, owner, merge)
    dst.mkdir(parents=True, exist_ok=merge)
    try:
        sfd = os.open(src, _DIR_FLAGS)
    except OSError as e:
        raise PathError(f"{src}: refused as a tree to copy ({e.strerror})") from None
    dfd = os.open(dst, _DIR_FLAGS)
    if owner is not None and _can_chown():
        os.fchown(dfd, owner, owner)
    links: list[str] = []
    try:
        _copy_dir(sfd, dfd, "", 0, report, limits, deadline, owner, skip, links, merge)
    except _Capped as e:
        report.capped.append(str(e))
    finally:
        os.close(sfd)
        os.close(dfd)
    _drop_escaping_links(dst, links, report)
    return report


def _copy_one(src: Path, dst: Path, report: CopyReport, limits: CopyLimits, owner: int | None,
              merge: bool) -> CopyReport:
    dst.parent.mkdir(parents=True, exist_ok=True)
    sfd = os.open(src.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    dfd = os.open(dst.parent, _DIR_FLAGS)
    try:
        if merge:
            _clear(dfd, dst.name, keep_dir=False)
        try:
            st = os.stat(src.name, dir_fd=sfd, follow_symlinks=False)
        except OSError as e:
            raise PathError(f"{src}: refused as a file to copy ({e.strerror})") from None
        if not stat.S_ISREG(st.st_mode):
            raise PathError(f"{src}: refused: {_kind(st.st_mode)}, not a regular file")
        try:
            _copy_file(sfd, dfd, src.name, src.name, st, report, limits, owner, out_name=dst.name)
        except _Capped as e:
            report.capped.append(str(e))
    finally:
        os.close(sfd)
        os.close(dfd)
    return report


def _chown(name: str, dir_fd: int, owner: int | None) -> None:
    if owner is not None and _can_chown():
        os.chown(name, owner, owner, dir_fd=dir_fd, follow_symlinks=False)


def _clear(dfd: int, name: str, keep_dir: bool) -> None:
    """Make room at dfd/name for a new entry: remove what is there unless it is a directory we keep."""
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        if not keep_dir:
            raise PathError(f"{name}: a directory is in the way")
        return
    os.unlink(name, dir_fd=dfd)


def _too_deep(prefix: str, depth: int, report: CopyReport, limits: CopyLimits) -> bool:
    """True when the folder at `prefix` is past max_depth and left out (CopyError in "stop" mode)."""
    if depth <= limits.max_depth:
        return False
    if limits.on_limit != "skip":
        raise CopyError(f"{prefix or '.'}: tree deeper than {limits.max_depth} levels: copy stopped")
    if not any(c.startswith("tree deeper") for c in report.capped):
        report.capped.append(f"tree deeper than {limits.max_depth} levels: deeper folders left out "
                             f"(first at {prefix})")
    return True


def _check_ceilings(rel: str, report: CopyReport, limits: CopyLimits, deadline: float) -> None:
    """Stop the copy at `rel` when time is up or max_files is reached (CopyError, or _Capped in "skip" mode)."""
    msg = None
    if time.monotonic() > deadline:
        msg = f"copy took longer than {limits.max_seconds:g} s: stopped at {rel}"
    elif report.files + report.dirs + report.links >= limits.max_files:
        msg = f"too many files: more than {limits.max_files} entries, copy stopped at {rel}"
    if msg is not None:
        raise _Capped(msg + ", the rest left out") if limits.on_limit == "skip" else CopyError(msg)


def _copy_dir(sfd: int, dfd: int, prefix: str, depth: int, report: CopyReport, limits: CopyLimits,
              deadline: float, owner: int | None, skip: Callable[[str], bool] | None, links: list[str],
              merge: bool) -> None:
    if _too_deep(prefix, depth, report, limits):
        return
    with os.scandir(sfd) as it:
        names = sorted(e.name for e in it)
    for name in names:
        rel = f"{prefix}/{name}" if prefix else name
        _check_ceilings(rel, report, limits, deadline)
        if skip is not None and skip(rel):
            continue
        try:
            st = os.stat(name, dir_fd=sfd, follow_symlinks=False)
        except OSError:
            continue  # vanished meanwhile
        if stat.S_ISDIR(st.st_mode):
            if _too_deep(rel, depth + 1, report, limits):
                continue
            try:
                sub = os.open(name, _DIR_FLAGS, dir_fd=sfd)
            except OSError as e:
                report.refused.append((rel, f"directory not opened ({e.strerror}: replaced by a link?)"))
                continue
            try:
                if merge:
                    _clear(dfd, name, keep_dir=True)
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o700, dir_fd=dfd)
                dsub = os.open(name, _DIR_FLAGS, dir_fd=dfd)
                try:
                    _chown(name, dfd, owner)
                    os.chmod(dsub, stat.S_IMODE(st.st_mode) & 0o777 | 0o700)
                    report.dirs += 1
                    _copy_dir(sub, dsub, rel, depth + 1, report, limits, deadline, owner, skip, links, merge)
                finally:
                    os.close(dsub)
            finally:
                os.close(sub)
        elif stat.S_ISLNK(st.st_mode):
            target = os.readlink(name, dir_fd=sfd)
            if target.startswith("/"):
                report.refused.append((rel, "symlink to an absolute path left out"))
                continue
            if merge:
                _clear(dfd, name, keep_dir=False)
            with contextlib.suppress(FileExistsError):
                os.symlink(target, name, dir_fd=dfd)
                _chown(name, dfd, owner)
                links.append(rel)
                report.links += 1
        elif stat.S_ISREG(st.st_mode):
            if merge:
                _clear(dfd, name, keep_dir=False)
            _copy_file(sfd, dfd, name, rel, st, report, limits, owner)
        else:
            report.refused.append((rel, f"{_kind(st.st_mode)} left out (never opened)"))


def _data_chunks(fd: int, st: os.stat_result) -> Iterator[tuple[int, bytes]]:
    """(offset, bytes) of a file's data, at most 1 MiB at a time. A sparse file (fewer blocks
    than its size says) is read by its data extents (SEEK_DATA / SEEK_HOLE), so its holes stay
    holes in the copy and cost neither time nor disk; a plain file is read straight through."""
    if st.st_blocks * 512 >= st.st_size or not hasattr(os, "SEEK_DATA"):
        offset = 0
        while chunk := os.read(fd, 1 << 20):
            yield offset, chunk
            offset += len(chunk)
        return
    pos = 0
    while True:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:  # no data past pos: the rest is a hole
                return
            raise
        end = os.lseek(fd, start, os.SEEK_HOLE)
        while start < end:
            chunk = os.pread(fd, min(1 << 20, end - start), start)
            if not chunk:
                return
            yield start, chunk
            start += len(chunk)
        pos = end


def _copy_file(sfd: int, dfd: int, name: str, rel: str, st: os.stat_result, report: CopyReport,
               limits: CopyLimits, owner: int | None, out_name: str | None = None) -> None:
    if st.st_nlink > 1:
        report.refused.append((rel, f"file with {st.st_nlink} hard links left out (it may lead out of the tree)"))
        return
    if st.st_size > limits.max_file_bytes:
        report.refused.append((rel, f"file of {st.st_size} bytes left out (over {limits.max_file_bytes})"))
        return
    if limits.on_limit == "skip" and report.bytes + st.st_size > limits.max_bytes:
        # One big (or sparse) file does not end a "skip" copy: it is left out, smaller ones go on.
        report.refused.append((rel, f"file of {st.st_size} bytes left out (the copy has "
                                    f"{max(0, limits.max_bytes - report.bytes)} of its {limits.max_bytes} bytes left)"))
        if not any(c.startswith("bytes:") for c in report.capped):
            report.capped.append(f"bytes: files past {limits.max_bytes} bytes in all left out")
        return
    try:
        fd, fst = open_regular_at(sfd, name)
    except PathError as e:
        report.refused.append((rel, str(e).split(": ", 1)[-1]))
        return
    try:
        if fst.st_nlink > 1:
            report.refused.append((rel, "file with several hard links left out"))
            return
        mode = stat.S_IMODE(fst.st_mode) & 0o777
        out = os.open(out_name or name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                      dir_fd=dfd)
        try:
            copied = 0
            for offset, chunk in _data_chunks(fd, fst):
                copied += len(chunk)
                if copied > limits.max_file_bytes or report.bytes + copied > limits.max_bytes:
                    msg = (f"{rel}: copy stopped: more than {limits.max_bytes} bytes in all "
                           f"(or {limits.max_file_bytes} in one file)")
                    if limits.on_limit == "skip":
                        os.unlink(out_name or name, dir_fd=dfd)
                        raise _Capped(msg + ", the rest left out")
                    raise CopyError(msg)
                view = memoryview(chunk)
                while view:
                    n = os.pwrite(out, view, offset)
                    view, offset = view[n:], offset + n
            os.ftruncate(out, max(fst.st_size, os.fstat(out).st_size))  # a trailing hole stays a hole
            if owner is not None and _can_chown():
                os.fchown(out, owner, owner)
            os.fchmod(out, mode)
        finally:
            os.close(out)
        report.bytes += copied
        report.files += 1
        report.copied.append(rel)
    finally:
        os.close(fd)


def remove_unsafe(root: str | Path) -> list[tuple[str, str]]:
    """After untrusted code ran on a tree nobody writes any more: remove every link that
    resolves outside it and every special file, so trusted code that reads the tree as root
    (a case's grader) can follow nothing out. (relative path, what was removed)."""
    removed: list[tuple[str, str]] = []
    links: list[str] = []
    fd = os.open(root, _DIR_FLAGS)

    def walk(dfd: int, prefix: str, depth: int) -> None:
        with os.scandir(dfd) as it:
            entries = list(it)
        for e in entries:
            rel = f"{prefix}{e.name}"
            st = e.stat(follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                links.append(rel)
            elif stat.S_ISDIR(st.st_mode):
                if depth >= 256:
                    continue
                with _subdir(dfd, e.name) as sub:
                    if sub is not None:
                        walk(sub, rel + "/", depth + 1)
            elif not stat.S_ISREG(st.st_mode):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(e.name, dir_fd=dfd)
                removed.append((rel, _kind(st.st_mode)))

    try:
        walk(fd, "", 0)
    finally:
        os.close(fd)
    report = CopyReport(links=len(links))
    _drop_escaping_links(Path(root), links, report)
    return removed + report.refused


def _drop_escaping_links(dst: Path, links: list[str], report: CopyReport) -> None:
    """Remove copied links that resolve outside `dst` (checked in the finished copy, which
    nothing else writes, so the answer holds)."""
    root = os.path.realpath(dst)
    for rel in links:
        p = os.path.join(root, rel)
        if not _inside(root, os.path.realpath(p)):
            with contextlib.suppress(OSError):
                os.unlink(p)
            report.links -= 1
            report.refused.append((rel, "symlink leading out of the tree left out"))


def read_tree(workspace: Path, rel: str, *, max_file_bytes: int, max_files: int = 500, partial: bool = False,
              skip: Callable[[str], bool] | None = None, max_depth: int = LIST_MAX_DEPTH) -> list[tuple[str, bytes]]:
    """(path relative to the workspace, bytes) of the regular files under workspace/rel, sorted,
    read without following any link (the folder itself included) and without opening special
    files or multiply-linked ones. A file over `max_file_bytes` is left out, or with `partial`
    read up to that size. `skip(name)` leaves folders out. [] when the folder is missing or is
    not a plain one; at most `max_files` files, from at most `max_depth` levels below `rel`."""
    root = _root(workspace)
    try:
        parts = _literal_parts(rel)
        fd = _open_dirs(root, parts, rel)
    except PathError:
        return []
    out: list[tuple[str, bytes]] = []

    def walk(dfd: int, prefix: str, depth: int = 0) -> None:
        with os.scandir(dfd) as it:
            entries = sorted(it, key=lambda e: e.name)
        for e in entries:
            if len(out) >= max_files:
                return
            path = f"{prefix}{e.name}"
            st = e.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                if skip is not None and skip(e.name) or depth + 1 >= max_depth:
                    continue
                with _subdir(dfd, e.name) as sub:
                    if sub is not None:
                        walk(sub, path + "/", depth + 1)
            elif stat.S_ISREG(st.st_mode) and (partial or st.st_size <= max_file_bytes):
                try:
                    ffd, fst = open_regular_at(dfd, e.name)
                except PathError:
                    continue
                try:
                    if fst.st_nlink == 1:
                        with os.fdopen(os.dup(ffd), "rb") as f:
                            out.append((path, f.read(max_file_bytes)))
                finally:
                    os.close(ffd)

    try:
        walk(fd, "/".join(parts) + "/" if parts else "")
    finally:
        os.close(fd)
    return out


def list_dir(workspace: Path, rel: str) -> list[str]:
    """Names in the folder workspace/rel (not following links); [] when it is not a plain folder."""
    try:
        fd = _open_dirs(_root(workspace), _literal_parts(rel), rel)
    except PathError:
        return []
    try:
        return sorted(os.listdir(fd))
    finally:
        os.close(fd)


def _literal_parts(rel: str) -> tuple[str, ...]:
    check_relative(rel)
    return tuple(p for p in PurePosixPath(rel).parts if p != ".")


def entry_kind(workspace: Path, rel: str) -> str | None:
    """What workspace/rel is, looked at without following any link on the way: "file",
    "dir", "link", "special" (FIFO, socket, device), or None when nothing is there.
    PathError when a component on the way is not a plain directory (a link, a file)."""
    parts = _literal_parts(rel)
    if not parts:
        return "dir"
    dfd = _open_dirs(_root(workspace), parts[:-1], rel)
    try:
        st = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    finally:
        os.close(dfd)
    if stat.S_ISLNK(st.st_mode):
        return "link"
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    return "file" if stat.S_ISREG(st.st_mode) else "special"


def read_workspace_file(workspace: Path, rel: str, max_bytes: int) -> bytes:
    """The bytes of the regular file workspace/rel, opened without following any link (the
    path is taken literally), without blocking on a FIFO, refused when over `max_bytes` or
    when it is a hard link to a file the workspace's owner does not own."""
    parts = _literal_parts(rel)
    if not parts:
        raise PathError(f"{rel!r} is the workspace root directory, not a file")
    root = _root(workspace)
    dfd = _open_dirs(root, parts[:-1], rel)
    try:
        fd, st = open_regular_at(dfd, parts[-1])
    finally:
        os.close(dfd)
    try:
        if st.st_nlink > 1 and st.st_uid != os.stat(root).st_uid:
            raise PathError(f"{rel}: refused: a hard link to a file the workspace's owner does not own")
        if st.st_size > max_bytes:
            raise PathError(f"{rel}: too large to read ({st.st_size} bytes; the limit is {max_bytes})")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise PathError(f"{rel}: too large to read (over the limit of {max_bytes} bytes)")
        return data
    finally:
        os.close(fd)
