"""Copying a tree an agent could write (or be writing right now), as root, within limits.

`copy_tree` walks with directory descriptors (`O_NOFOLLOW|O_DIRECTORY`), opens files as
`assay.fs.reads` does, copies no multiply-linked file, keeps only links that stay inside the
copy and never opens a special file; `CopyLimits` caps files, depth, bytes and time.
`remove_unsafe` clears a tree nobody writes any more of links leading out and special files.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from assay.fs.paths import DIR_FLAGS, PathError, can_chown, inside, mode_kind, open_subdir, real_path
from assay.fs.reads import open_regular_at

__all__ = ["CopyError", "CopyLimits", "CopyReport", "copy_tree", "remove_unsafe"]


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
        sfd = os.open(src, DIR_FLAGS)
    except OSError as e:
        raise PathError(f"{src}: refused as a tree to copy ({e.strerror})") from None
    dfd = os.open(dst, DIR_FLAGS)
    if owner is not None and can_chown():
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
    dfd = os.open(dst.parent, DIR_FLAGS)
    try:
        if merge:
            _clear(dfd, dst.name, keep_dir=False)
        try:
            st = os.stat(src.name, dir_fd=sfd, follow_symlinks=False)
        except OSError as e:
            raise PathError(f"{src}: refused as a file to copy ({e.strerror})") from None
        if not stat.S_ISREG(st.st_mode):
            raise PathError(f"{src}: refused: {mode_kind(st.st_mode)}, not a regular file")
        try:
            _copy_file(sfd, dfd, src.name, src.name, st, report, limits, owner, out_name=dst.name)
        except _Capped as e:
            report.capped.append(str(e))
    finally:
        os.close(sfd)
        os.close(dfd)
    return report


def _chown(name: str, dir_fd: int, owner: int | None) -> None:
    if owner is not None and can_chown():
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
                sub = os.open(name, DIR_FLAGS, dir_fd=sfd)
            except OSError as e:
                report.refused.append((rel, f"directory not opened ({e.strerror}: replaced by a link?)"))
                continue
            try:
                if merge:
                    _clear(dfd, name, keep_dir=True)
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o700, dir_fd=dfd)
                dsub = os.open(name, DIR_FLAGS, dir_fd=dfd)
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
            report.refused.append((rel, f"{mode_kind(st.st_mode)} left out (never opened)"))


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
            if owner is not None and can_chown():
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
    fd = os.open(root, DIR_FLAGS)

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
                with open_subdir(dfd, e.name) as sub:
                    if sub is not None:
                        walk(sub, rel + "/", depth + 1)
            elif not stat.S_ISREG(st.st_mode):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(e.name, dir_fd=dfd)
                removed.append((rel, mode_kind(st.st_mode)))

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
    root = real_path(dst)
    for rel in links:
        p = os.path.join(root, rel)
        try:
            escapes = not inside(root, real_path(p))
        except PathError:  # a chain or loop of links past the OS's limit: it leads nowhere usable
            escapes = True
        if escapes:
            with contextlib.suppress(OSError):
                os.unlink(p)
            report.links -= 1
            report.refused.append((rel, "symlink leading out of the tree left out"))
