"""Reading files an agent could have planted: never following a link, never blocking.

A careless read of a FIFO blocks forever and a careless `open()` follows a symlink out of
the workspace. Every read here opens a regular file with `O_NOFOLLOW|O_NONBLOCK` relative to
a folder opened the same way (`assay.fs.paths.open_dirs`): one file (`open_regular_at`,
`read_regular`, `open_in_workspace`, `read_workspace_file`), what an entry is (`entry_kind`),
a folder's names (`list_dir`), the head of a file (`read_workspace_head`) and the files of a tree
within limits (`read_tree`).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from assay.fs.paths import (
    PathError,
    literal_parts,
    mode_kind,
    open_dirs,
    open_subdir,
    resolved_parts,
    workspace_root,
)

__all__ = ["LIST_MAX_DEPTH", "entry_kind", "list_dir", "open_in_workspace", "open_regular_at", "read_regular",
           "read_tree", "read_workspace_file", "read_workspace_head"]

LIST_MAX_DEPTH = 64
"""`list_files` and `read_tree` do not descend deeper than this below the folder asked for."""

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
        raise PathError(f"{name}: refused: not a regular file ({mode_kind(st.st_mode)})")
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


@contextlib.contextmanager
def open_in_workspace(workspace: Path, rel: str) -> Iterator[tuple[int, os.stat_result]]:
    """An fd on an existing regular file at rel, opened without following symlinks."""
    root, parts = resolved_parts(workspace, rel)
    if not parts:
        raise PathError(f"{rel!r} is the workspace root directory, not a file")
    dfd = open_dirs(root, parts[:-1], rel)
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


def read_tree(workspace: Path, rel: str, *, max_file_bytes: int, max_files: int = 500, partial: bool = False,
              skip: Callable[[str], bool] | None = None, max_depth: int = LIST_MAX_DEPTH,
              max_entries: int | None = None, capped: list[str] | None = None,
              max_total_bytes: int | None = None) -> list[tuple[str, bytes]]:
    """(path relative to the workspace, bytes) of the regular files under workspace/rel, sorted
    within each folder, read without following any link (the folder itself included) and without
    opening special files or multiply-linked ones. A file over `max_file_bytes` is left out, or
    with `partial` read up to that size. `skip(name)` leaves folders out. [] when the folder is
    missing or is not a plain one; at most `max_files` files, from at most `max_depth` levels
    below `rel`, and at most `max_entries` entries looked at in all (folders, files, links and
    special files alike: a tree of empty folders costs as much to walk as one of files). A
    folder is listed only up to the entries left, so one huge folder stops the walk too; at
    most `max_total_bytes` read in all (the file that reaches it is cut there). Each
    ceiling reached is said once in `capped` (a sentence without the tree's names: they are
    the agent's)."""
    root = workspace_root(workspace)
    try:
        parts = literal_parts(rel)
        fd = open_dirs(root, parts, rel)
    except PathError:
        return []
    walk = _TreeRead(max_file_bytes=max_file_bytes, max_files=max_files, partial=partial, skip=skip,
                     max_depth=max_depth, max_entries=max_entries, max_total_bytes=max_total_bytes)
    try:
        walk.folder(fd, "/".join(parts) + "/" if parts else "", 0)
    finally:
        os.close(fd)
    if capped is not None:
        capped.extend(walk.capped)
    return walk.out


@dataclass
class _TreeRead:
    """One `read_tree` walk: its limits, what it read, the ceilings it reached."""

    max_file_bytes: int
    max_files: int
    partial: bool
    skip: Callable[[str], bool] | None
    max_depth: int
    max_entries: int | None
    max_total_bytes: int | None = None
    out: list[tuple[str, bytes]] = field(default_factory=list)
    seen: int = 0
    total: int = 0
    capped: list[str] = field(default_factory=list)

    def _cap(self, what: str) -> None:
        if what not in self.capped:
            self.capped.append(what)

    def full(self) -> bool:
        """Whether a ceiling of files or entries is reached (said in `capped`)."""
        if len(self.out) >= self.max_files:
            self._cap(f"{self.max_files:,} files read, the most it reads: the rest of the tree left out")
            return True
        if self.max_total_bytes is not None and self.total >= self.max_total_bytes:
            self._cap(f"{self.max_total_bytes:,} bytes read, the most it reads: the rest of the tree left out")
            return True
        if self.max_entries is not None and self.seen >= self.max_entries:
            self._cap(f"{self.max_entries:,} entries (folders and files) looked at, the most it looks at: the rest "
                      "of the tree left out")
            return True
        return False

    def folder(self, dfd: int, prefix: str, depth: int) -> None:
        entries: list[os.DirEntry[str]] = []
        with os.scandir(dfd) as it:
            for e in it:
                if self.full():
                    break
                self.seen += 1
                entries.append(e)
        for e in sorted(entries, key=lambda e: e.name):
            if len(self.out) >= self.max_files or (self.max_total_bytes is not None
                                                   and self.total >= self.max_total_bytes):
                self.full()
                return
            st = e.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                self._subfolder(dfd, e.name, f"{prefix}{e.name}/", depth + 1)
            elif stat.S_ISREG(st.st_mode) and (self.partial or st.st_size <= self.max_file_bytes):
                self._file(dfd, e.name, f"{prefix}{e.name}")

    def _subfolder(self, dfd: int, name: str, prefix: str, depth: int) -> None:
        if self.skip is not None and self.skip(name):
            return
        if depth >= self.max_depth:
            self._cap(f"folders deeper than {self.max_depth} levels left out")
            return
        if self.full():
            return
        with open_subdir(dfd, name) as sub:
            if sub is not None:
                self.folder(sub, prefix, depth)

    def _file(self, dfd: int, name: str, path: str) -> None:
        try:
            ffd, fst = open_regular_at(dfd, name)
        except PathError:
            return
        try:
            if fst.st_nlink == 1:
                limit = self.max_file_bytes if self.max_total_bytes is None else min(
                    self.max_file_bytes, self.max_total_bytes - self.total)
                with os.fdopen(os.dup(ffd), "rb") as f:
                    data = f.read(limit)
                self.total += len(data)
                self.out.append((path, data))
                if limit < self.max_file_bytes and len(data) == limit and fst.st_size > limit:
                    self.full()  # cut by the total: said now, whether or not another entry follows
        finally:
            os.close(ffd)


def list_dir(workspace: Path, rel: str) -> list[str]:
    """Names in the folder workspace/rel (not following links); [] when it is not a plain folder."""
    try:
        fd = open_dirs(workspace_root(workspace), literal_parts(rel), rel)
    except PathError:
        return []
    try:
        return sorted(os.listdir(fd))
    finally:
        os.close(fd)


def entry_kind(workspace: Path, rel: str) -> str | None:
    """What workspace/rel is, looked at without following any link on the way: "file",
    "dir", "link", "special" (FIFO, socket, device), or None when nothing is there.
    PathError when a component on the way is not a plain directory (a link, a file)."""
    parts = literal_parts(rel)
    if not parts:
        return "dir"
    dfd = open_dirs(workspace_root(workspace), parts[:-1], rel)
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


def read_workspace_head(workspace: Path, rel: str, max_bytes: int) -> bytes:
    """The first `max_bytes` of the regular file workspace/rel, opened as `read_workspace_file`
    opens it (the path taken literally, no link followed, no blocking), refused (PathError) when
    it is not a regular file or has several hard links (another may lie outside the tree)."""
    parts = literal_parts(rel)
    if not parts:
        raise PathError(f"{rel!r} is the workspace root directory, not a file")
    dfd = open_dirs(workspace_root(workspace), parts[:-1], rel)
    try:
        fd, st = open_regular_at(dfd, parts[-1])
    finally:
        os.close(dfd)
    try:
        if st.st_nlink > 1:
            raise PathError(f"{rel}: refused: a file with {st.st_nlink} hard links")
        return os.pread(fd, max_bytes, 0)
    finally:
        os.close(fd)


def read_workspace_file(workspace: Path, rel: str, max_bytes: int) -> bytes:
    """The bytes of the regular file workspace/rel, opened without following any link (the
    path is taken literally), without blocking on a FIFO, refused when over `max_bytes` or
    when it is a hard link to a file the workspace's owner does not own."""
    parts = literal_parts(rel)
    if not parts:
        raise PathError(f"{rel!r} is the workspace root directory, not a file")
    root = workspace_root(workspace)
    dfd = open_dirs(root, parts[:-1], rel)
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
