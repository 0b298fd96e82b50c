"""Content digests of files and trees, read as `assay.fs.reads` reads (no link followed).

A task's content hash and the grading copy's check are built on these: a file by its bytes,
a tree by each entry's relative path, files by content, links by their text, special files
by their kind (never opened), bytecode left out.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any

from assay.fs.copying import CopyLimits
from assay.fs.paths import DIR_FLAGS, PathError, mode_kind, open_subdir
from assay.fs.reads import open_regular_at

__all__ = ["SKIP_IN_DIGEST", "TREE_DEPTH", "file_digest", "tree_digest"]

TREE_DEPTH = 64
"""A tree with folders nested more than this many levels below its root is refused (PathError):
task files are downloaded, and each level is a frame and an open folder of the walk."""


_COPIED = CopyLimits()
"""A tree's digest reads what a copy of it would take: a file over `max_file_bytes`, or past
`max_bytes` read in all, is digested by its size alone (a copy leaves it out; a sparse file of
32 GiB, a few bytes of a downloaded task, is not read)."""


class _Budget:
    """Bytes a tree's digest may still read."""

    def __init__(self) -> None:
        self.left = _COPIED.max_bytes


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
    Feeds `h` when given (and returns its hex digest so far). PathError past `TREE_DEPTH`."""
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
    fd = os.open(root, DIR_FLAGS)
    try:
        _digest_dir(h, fd, label, 0, _Budget())
    finally:
        os.close(fd)
    return h.hexdigest()


def _digest_entry(h: Any, dir_fd: int | None, name: str, rel: str, st: os.stat_result,
                  budget: _Budget | None = None) -> None:
    if stat.S_ISLNK(st.st_mode):
        h.update(f"link:{rel}\0{os.readlink(name, dir_fd=dir_fd)}\0".encode("utf-8", "surrogateescape"))
        return
    if not stat.S_ISREG(st.st_mode):
        h.update(f"special:{rel}\0{mode_kind(st.st_mode)}\0".encode("utf-8", "surrogateescape"))
        return
    h.update(f"file:{rel}\0".encode("utf-8", "surrogateescape"))
    budget = budget or _Budget()
    if st.st_size > min(_COPIED.max_file_bytes, budget.left):
        h.update(f"left out:{st.st_size}\0".encode())
        return
    budget.left -= st.st_size
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


def _digest_dir(h: Any, dir_fd: int, prefix: str, depth: int, budget: _Budget) -> None:
    if depth > TREE_DEPTH:
        raise PathError(f"{prefix or '.'}: folders nested deeper than {TREE_DEPTH} levels")
    with os.scandir(dir_fd) as it:
        entries = sorted(it, key=lambda e: e.name)
    for e in entries:
        if e.name in SKIP_IN_DIGEST or e.name.endswith((".pyc", ".pyo")):
            continue
        rel = f"{prefix}/{e.name}" if prefix else e.name
        st = e.stat(follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            with open_subdir(dir_fd, e.name) as sub:
                if sub is None:
                    h.update(f"gone:{rel}\0".encode("utf-8", "surrogateescape"))
                else:  # the folder is an entry itself: an empty one counts
                    h.update(f"dir:{rel}\0".encode("utf-8", "surrogateescape"))
                    _digest_dir(h, sub, rel, depth + 1, budget)
        else:
            _digest_entry(h, dir_fd, e.name, rel, st, budget)
