"""Workspace paths checked before and while they are opened, and root's own folders.

The harness runs as root, so a careless `open()` on an agent-chosen path could read or
overwrite anything on the host, e.g. through a symlink the agent planted in its workspace.
This module holds the one relative-path check (`check_relative`: no absolute path, no '..',
nothing longer than the OS takes, `check_length`), the resolution of a workspace path to its
real location inside the workspace (`resolve`), and the walk to it one component at a time
with `O_NOFOLLOW`, relative to directory descriptors (`open_dirs`), so a symlink swapped in
after the check (a race with a command still running in the sandbox) makes the operation
fail instead of escaping. `private_dir` makes or takes a folder of root's own where others
can create entries (e.g. under /var/tmp).
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

__all__ = ["DIR_FLAGS", "NAME_MAX", "PATH_MAX", "PathError", "can_chown", "check_length", "check_relative",
           "inside", "literal_parts", "mode_kind", "open_dirs", "open_subdir", "private_dir", "real_path",
           "resolve", "resolved_parts", "workspace_root"]

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
"""Flags opening a folder that is not a link (and is kept from a child process)."""
PATH_MAX = 4096
"""Linux's longest path, its terminating NUL included: a longer one fails with ENAMETOOLONG."""
NAME_MAX = 255
"""Linux's longest file name (one path component), in bytes."""


class PathError(ValueError):
    """A path the harness refuses to touch; the message says what and why."""


@contextlib.contextmanager
def open_subdir(dir_fd: int, name: str) -> Iterator[int | None]:
    """The folder `name` under `dir_fd`, opened without following a link (None when it is a
    link now, or vanished: a tree being walked can change under the walker); closed after."""
    try:
        sub = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except OSError:
        yield None
        return
    try:
        yield sub
    finally:
        os.close(sub)


def workspace_root(workspace: Path) -> str:
    """The workspace's real path: the boundary every resolved path must stay within."""
    return os.path.realpath(workspace)


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


def inside(root: str, real: str) -> bool:
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


MAX_LINKS = 40
"""The most symbolic links `real_path` follows for one path: Linux's own limit (ELOOP)."""


def real_path(path: str | os.PathLike[str]) -> str:
    """`os.path.realpath(path)`, one link at a time in a loop: Python 3.11's recurses once per
    link, so a chain of 1,500 relative links an agent made ended in a RecursionError. Past
    MAX_LINKS links (a loop, or a chain longer than the kernel follows) a PathError."""
    raw = os.fspath(path)  # `..` is taken on the disk, after the link before it, as realpath does
    pending = list(reversed((raw if raw.startswith("/") else os.path.join(os.getcwd(), raw)).split("/")))
    resolved = "/"
    hops = 0
    while pending:
        name = pending.pop()
        if name in ("", "."):
            continue
        if name == "..":
            resolved = os.path.dirname(resolved)
            continue
        candidate = os.path.join(resolved, name)
        try:
            is_link = stat.S_ISLNK(os.lstat(candidate).st_mode)
        except OSError:  # missing (or unreadable): kept as written, as realpath does
            is_link = False
        if not is_link:
            resolved = candidate
            continue
        hops += 1
        if hops > MAX_LINKS:
            raise PathError(f"{_shown(os.fspath(path))}: more than {MAX_LINKS} symbolic links on the way "
                            "(a loop or a chain longer than the OS follows)")
        target = os.readlink(candidate)
        if target.startswith("/"):
            resolved = "/"
        pending.extend(reversed(target.split("/")))
    return resolved


def resolve(workspace: Path, rel: str) -> Path:
    """Map a workspace-relative path to its real host path, refusing anything that leads out.

    Symlinks are resolved (also dangling ones, and for a path that does not exist yet its
    nearest existing ancestor decides); '.' means the workspace root itself.
    """
    check_relative(rel)
    root = workspace_root(workspace)
    joined = os.path.join(root, rel)
    if _byte_len(joined) >= PATH_MAX:
        raise PathError(f"path {_shown(rel)} refused: it is too long (the workspace's host path and it "
                        f"pass the {PATH_MAX - 1} bytes the OS allows)")
    try:
        real = real_path(joined)
    except PathError:
        raise PathError(f"path {_shown(rel)} refused: more than {MAX_LINKS} symbolic links on the way") from None
    if not inside(root, real):
        raise PathError(f"path {_shown(rel)} refused: it resolves outside the workspace (through a symlink)")
    if _byte_len(real) >= PATH_MAX:
        raise PathError(f"path {_shown(rel)} refused: through its symlinks it resolves to a path longer than "
                        f"the {PATH_MAX - 1} bytes the OS allows")
    return Path(real)


def resolved_parts(workspace: Path, rel: str) -> tuple[str, tuple[str, ...]]:
    """The workspace root and the components of the resolved path below it."""
    root = workspace_root(workspace)
    real = resolve(workspace, rel)
    parts = PurePosixPath(os.path.relpath(real, root)).parts
    return root, tuple(p for p in parts if p != ".")


def can_chown() -> bool:
    return os.geteuid() == 0


def open_dirs(root: str, parts: tuple[str, ...], rel: str, *, create: bool = False,
              owner: int | None = None) -> int:
    """Open the directory root/parts... without following any symlink; optionally mkdir -p."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in parts:
            try:
                nfd = os.open(name, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise PathError(f"{rel}: no such file or directory") from None
                os.mkdir(name, 0o755, dir_fd=fd)
                if owner is not None and can_chown():
                    os.chown(name, owner, owner, dir_fd=fd, follow_symlinks=False)
                nfd = os.open(name, DIR_FLAGS, dir_fd=fd)
            except (NotADirectoryError, OSError) as e:
                raise PathError(f"{rel}: refused: {name!r} is not a plain directory "
                                f"(a file or a symlink in the way; {e.strerror})") from None
            os.close(fd)
            fd = nfd
        return fd
    except BaseException:
        os.close(fd)
        raise


def literal_parts(rel: str) -> tuple[str, ...]:
    check_relative(rel)
    return tuple(p for p in PurePosixPath(rel).parts if p != ".")


def mode_kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symlink"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "a regular file" if stat.S_ISREG(mode) else "a special file"


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
            fd = os.open(path.name, DIR_FLAGS, dir_fd=parent)
        except OSError as e:  # a link (ELOOP, or ENOTDIR with O_DIRECTORY), a file, ...: say which
            raise PathError(_not_private(path, _what_is_there(parent, path.name, e))) from None
    finally:
        os.close(parent)
    try:
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode):
            raise PathError(_not_private(path, f"it is not a folder ({mode_kind(st.st_mode)})"))
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
        return f"it is not a folder ({mode_kind(st.st_mode)})"
    return e.strerror or str(e)


def _not_private(path: Path, why: str) -> str:
    return (f"{path}: refused as a private folder: {why}; another user may have planted it. Nothing was "
            "created in it or changed; remove it if it is not yours, then run again")
