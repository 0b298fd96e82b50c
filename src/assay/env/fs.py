"""File operations the harness performs for the agent's file tools.

The harness runs as root, so a careless `open()` on an agent-chosen path could read or
overwrite anything on the host, e.g. through a symlink the agent planted in its workspace.
Every operation here therefore

* refuses absolute paths and '..' components outright;
* resolves symlinks and refuses a path whose real location is outside the workspace;
* then walks to the resolved location one component at a time with `O_NOFOLLOW`, relative
  to directory descriptors, so a symlink swapped in after the check (a race with a command
  still running in the sandbox) makes the operation fail instead of escaping;
* writes by creating a fresh file and renaming it into place, so it never writes through
  an existing inode (a hard link to a file outside the workspace stays untouched), and
  never leaves setuid/setgid bits on what it writes.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

__all__ = ["PathError", "resolve", "read_file", "write_file", "edit_file", "list_files"]

MAX_LINE_CHARS = 2000
"""Longer lines are clipped in read_file so one minified line cannot flood the context."""

_BINARY_SNIFF_BYTES = 8192
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class PathError(ValueError):
    """A path the harness refuses to touch; the message says what and why."""


def _root(workspace: Path) -> str:
    """The workspace's real path: the boundary every resolved path must stay within."""
    return os.path.realpath(workspace)


def _check_syntax(rel: str) -> None:
    """Refuse paths that are wrong before looking at the disk."""
    if not isinstance(rel, str):
        raise PathError(f"path must be a string, got {type(rel).__name__}")
    if rel.strip() == "":
        raise PathError("empty path refused: give a path relative to the workspace root")
    if "\x00" in rel:
        raise PathError(f"path {rel!r} refused: it contains a NUL character")
    if rel.startswith("/") or PurePosixPath(rel).is_absolute():
        raise PathError(f"absolute path {rel!r} refused: paths are relative to the workspace root")
    if ".." in rel.split("/"):
        raise PathError(f"path {rel!r} refused: '..' components are not allowed")


def _inside(root: str, real: str) -> bool:
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def resolve(workspace: Path, rel: str) -> Path:
    """Map a workspace-relative path to its real host path, refusing anything that leads out.

    Symlinks are resolved (also dangling ones, and for a path that does not exist yet its
    nearest existing ancestor decides); '.' means the workspace root itself.
    """
    _check_syntax(rel)
    root = _root(workspace)
    real = os.path.realpath(os.path.join(root, rel))
    if not _inside(root, real):
        raise PathError(f"path {rel!r} refused: it resolves outside the workspace (through a symlink)")
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
        with os.fdopen(os.dup(fd), "rb") as f:
            for i, raw in enumerate(f):
                total = i + 1
                if offset <= i < offset + limit:
                    line = raw.rstrip(b"\n").rstrip(b"\r").decode("utf-8", errors="replace")
                    if len(line) > MAX_LINE_CHARS:
                        line = (line[:MAX_LINE_CHARS]
                                + f" [... line clipped: {len(line) - MAX_LINE_CHARS} more characters]")
                    out.append(f"{i + 1:>5}\t{line}")
    if total == 0:
        return f"[{rel} is empty]"
    if offset >= total:
        return f"[offset {offset} is past the end: {rel} has {total} lines]"
    remaining = total - (offset + limit)
    if remaining > 0:
        out.append(f"[{remaining} more lines; continue with offset={offset + limit}]")
    return "\n".join(out)


def _replace_file(workspace: Path, rel: str, data: bytes, owner: int | None) -> None:
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
        mode = stat.S_IMODE(old.st_mode) & 0o777 if old is not None else 0o644
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
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise
    finally:
        os.close(dfd)


def write_file(workspace: Path, rel: str, content: str, owner: int | None = None) -> str:
    """Create or overwrite a file; created directories and the file get `owner` (uid and gid)."""
    data = content.encode("utf-8")
    _replace_file(workspace, rel, data, owner)
    lines = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
    return f"wrote {len(data)} bytes ({lines} lines) to {rel}"


def edit_file(workspace: Path, rel: str, old_text: str, new_text: str, replace_all: bool = False,
              owner: int | None = None) -> str:
    """Replace old_text by new_text; it must occur exactly once unless replace_all."""
    if old_text == "":
        raise ValueError("old_text is empty: give the exact text to replace")
    with _open_regular(workspace, rel) as (fd, _st), os.fdopen(os.dup(fd), "rb") as f:
        raw = f.read()
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
    new = text.replace(old_text, new_text) if replace_all else text.replace(old_text, new_text, 1)
    _replace_file(workspace, rel, new.encode("utf-8"), owner)
    done = count if replace_all else 1
    return f"edited {rel}: replaced {done} occurrence{'s' if done != 1 else ''}"


def list_files(workspace: Path, rel: str = ".", max_entries: int = 2000) -> str:
    """Recursive listing: 'dir/', 'file (N bytes)', 'link -> target' (links are not followed)."""
    root, parts = _rel_parts(workspace, rel)
    fd = _open_dirs(root, parts, rel)
    prefix = "" if not parts else "/".join(parts) + "/"
    lines: list[str] = []
    truncated = False

    def walk(dfd: int, pre: str) -> None:
        nonlocal truncated
        with os.scandir(dfd) as it:
            entries = sorted(it, key=lambda e: e.name)
        for e in entries:
            if len(lines) >= max_entries:
                truncated = True
                return
            path = pre + e.name
            if e.is_symlink():
                lines.append(f"{path} -> {os.readlink(e.name, dir_fd=dfd)}")
            elif e.is_dir(follow_symlinks=False):
                lines.append(path + "/")
                try:
                    sub = os.open(e.name, _DIR_FLAGS, dir_fd=dfd)
                except OSError:
                    continue  # vanished or replaced meanwhile: list what is there
                try:
                    walk(sub, path + "/")
                finally:
                    os.close(sub)
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
        return f"[{rel} is empty]"
    if truncated:
        lines.append(f"[listing truncated after {max_entries} entries; list a subdirectory to see more]")
    return "\n".join(lines)
