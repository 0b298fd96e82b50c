"""assay.fs, the tree primitives: copy_tree, remove_unsafe, read_tree, entry_kind,
read_workspace_file, check_relative, tree_digest. (The agent's file tools are in test_fs_tools.py.)

Every FIFO here is looked at under `no_block()`: a primitive that opened one would hang, so
the guard turns a hang into a failure after two seconds.

The tests of copy limits (`test_copy_limits_*`) follow the contract in the docstrings of
`copy_tree` and `CopyLimits`; the exact boundaries they check (at the limit passes, one over
stops) are details of the current implementation.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from assay.fs import copying
from assay.fs.copying import CopyError, CopyLimits, copy_tree, remove_unsafe
from assay.fs.digests import tree_digest
from assay.fs.paths import PathError, check_relative
from assay.fs.reads import entry_kind, read_tree, read_workspace_file

SECRET = "TOPSECRET-tree-41"


@contextmanager
def no_block(seconds: float = 2.0) -> Iterator[None]:
    """Fail (TimeoutError) instead of hanging when the body blocks, e.g. opening a FIFO."""

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"blocked for more than {seconds} s (a FIFO was opened?)")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    d = tmp_path / "outside"
    d.mkdir()
    (d / "secret.txt").write_text(SECRET)
    return d


@pytest.fixture
def src(tmp_path: Path) -> Path:
    s = tmp_path / "src"
    (s / "sub" / "deep").mkdir(parents=True)
    (s / "a.txt").write_text("alpha\n")
    (s / "sub" / "b.txt").write_text("beta\n")
    (s / "sub" / "deep" / "c.bin").write_bytes(b"\x00\x01\x02")
    return s


def make_socket(folder: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> socket.socket:
    monkeypatch.chdir(folder)  # bind a short relative path: unix socket paths are limited to 108 bytes
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(name)
    return s


def escaping_links(root: Path) -> list[str]:
    """Links under root whose real location is outside it."""
    real = os.path.realpath(root)
    out = []
    for dirpath, dirs, names in os.walk(root):
        for n in dirs + names:
            p = os.path.join(dirpath, n)
            if os.path.islink(p) and not (os.path.realpath(p) + os.sep).startswith(real + os.sep):
                out.append(os.path.relpath(p, root))
    return out


def files_under(root: Path) -> dict[str, str]:
    """rel path -> 'file:<content>' / 'link:<target>' / 'dir', not following links."""
    out: dict[str, str] = {}
    for dirpath, dirs, names in os.walk(root):
        for n in dirs + names:
            p = Path(dirpath) / n
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                out[rel] = f"link:{os.readlink(p)}"
            elif p.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = "file:" + p.read_bytes().decode("latin-1")
    return out


# --------------------------------------------------------------------------- copy_tree: the plain case


def test_copy_tree_copies_files_folders_and_modes(src: Path, tmp_path: Path) -> None:
    os.chmod(src / "a.txt", 0o4755)  # setuid: never carried over
    os.chmod(src / "sub" / "b.txt", 0o600)
    report = copy_tree(src, tmp_path / "dst")
    dst = tmp_path / "dst"
    assert files_under(dst) == {"a.txt": "file:alpha\n", "sub": "dir", "sub/b.txt": "file:beta\n",
                                "sub/deep": "dir", "sub/deep/c.bin": "file:\x00\x01\x02"}
    assert (report.files, report.dirs, report.links, report.bytes) == (3, 2, 0, 14)
    assert report.copied == ["a.txt", "sub/b.txt", "sub/deep/c.bin"] and report.refused == []
    assert stat.S_IMODE(os.stat(dst / "a.txt").st_mode) == 0o755
    assert stat.S_IMODE(os.stat(dst / "sub" / "b.txt").st_mode) == 0o600


def test_copy_tree_skip(src: Path, tmp_path: Path) -> None:
    seen: list[str] = []

    def skip(rel: str) -> bool:
        seen.append(rel)
        return rel == "sub/deep" or rel.endswith(".txt") and rel.startswith("sub/")

    report = copy_tree(src, tmp_path / "dst", skip=skip)
    assert files_under(tmp_path / "dst") == {"a.txt": "file:alpha\n", "sub": "dir"}
    assert report.copied == ["a.txt"]
    assert seen == ["a.txt", "sub", "sub/b.txt", "sub/deep"]  # POSIX paths below src


def test_copy_tree_refuses_an_existing_destination_unless_merging(src: Path, tmp_path: Path) -> None:
    (tmp_path / "dst").mkdir()
    with pytest.raises(FileExistsError):
        copy_tree(src, tmp_path / "dst")


# --------------------------------------------------------------------------- copy_tree: links


def test_links_inside_the_tree_stay_links(src: Path, tmp_path: Path) -> None:
    os.symlink("a.txt", src / "to_a")
    os.symlink("../a.txt", src / "sub" / "up_a")
    os.symlink("sub/deep", src / "to_deep")
    os.symlink("missing-but-inside", src / "dangling")
    report = copy_tree(src, tmp_path / "dst")
    got = files_under(tmp_path / "dst")
    assert got["to_a"] == "link:a.txt" and got["sub/up_a"] == "link:../a.txt"
    assert got["to_deep"] == "link:sub/deep" and got["dangling"] == "link:missing-but-inside"
    assert report.links == 4 and report.refused == []
    assert "to_deep/c.bin" not in got  # a link to a folder is copied as a link, not walked


def test_links_out_of_the_tree_are_left_out(src: Path, tmp_path: Path, outside: Path) -> None:
    os.symlink(outside / "secret.txt", src / "abs")                     # absolute
    os.symlink("../outside/secret.txt", src / "rel")                    # relative, escaping
    os.symlink("../../outside", src / "sub" / "updir")                  # a folder outside
    os.symlink("sub/updir/secret.txt", src / "through")                 # through a link to that folder
    os.symlink("sub/./deep/../../../outside", src / "dotted")           # escaping with ./ and ..
    os.symlink("/", src / "root")
    os.symlink("sub/updir/secret.txt", src / "a_through")               # the same, checked before sub/updir
    report = copy_tree(src, tmp_path / "dst")
    dst = tmp_path / "dst"
    refused = dict(report.refused)
    assert {k: v for k, v in refused.items() if k != "through"} == {
        "abs": "symlink to an absolute path left out", "root": "symlink to an absolute path left out",
        "rel": "symlink leading out of the tree left out", "sub/updir": "symlink leading out of the tree left out",
        "a_through": "symlink leading out of the tree left out", "dotted": "symlink leading out of the tree left out",
    }
    for name in ("abs", "rel", "sub/updir", "a_through", "dotted", "root"):
        assert not os.path.lexists(dst / name), name
    # `through` is checked after `sub/updir` is gone: it may stay, dangling inside the copy.
    assert "through" in refused or os.readlink(dst / "through") == "sub/updir/secret.txt"
    assert escaping_links(dst) == []
    assert SECRET not in "".join(files_under(dst).values())
    with pytest.raises(FileNotFoundError):
        (dst / "through").read_text()


def test_a_source_given_as_a_link_to_a_folder_is_refused(src: Path, tmp_path: Path) -> None:
    os.symlink(src, tmp_path / "srclink")
    with pytest.raises(PathError, match="a symlink, not a regular file"):
        copy_tree(tmp_path / "srclink", tmp_path / "dst")


# --------------------------------------------------------------------------- copy_tree: special files, hard links


def test_fifos_and_sockets_are_left_out_and_never_opened(src: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    os.mkfifo(src / "pipe")
    os.mkfifo(src / "sub" / "pipe2")
    sock = make_socket(src, "sock", monkeypatch)
    try:
        with no_block():
            report = copy_tree(src, tmp_path / "dst")
    finally:
        sock.close()
    assert dict(report.refused) == {"pipe": "a FIFO left out (never opened)",
                                    "sub/pipe2": "a FIFO left out (never opened)",
                                    "sock": "a socket left out (never opened)"}
    got = files_under(tmp_path / "dst")
    assert not {"pipe", "sock", "sub/pipe2"} & set(got) and got["a.txt"] == "file:alpha\n"


def test_hard_linked_files_are_left_out(src: Path, tmp_path: Path, outside: Path) -> None:
    os.link(outside / "secret.txt", src / "hard_out")
    os.link(src / "a.txt", src / "sub" / "hard_in")
    report = copy_tree(src, tmp_path / "dst")
    refused = dict(report.refused)
    assert set(refused) == {"a.txt", "hard_out", "sub/hard_in"}
    assert all("2 hard links left out" in r for r in refused.values())
    assert SECRET not in "".join(files_under(tmp_path / "dst").values())


# --------------------------------------------------------------------------- copy_tree: merge


def test_merge_into_an_existing_tree(src: Path, tmp_path: Path, outside: Path) -> None:
    dst = tmp_path / "dst"
    (dst / "sub").mkdir(parents=True)
    (dst / "keep.txt").write_text("kept\n")
    (dst / "a.txt").write_text("old alpha\n")
    (dst / "sub" / "old.txt").write_text("old\n")
    os.symlink(outside / "secret.txt", dst / "sub" / "b.txt")  # a planted link where a file is copied
    os.symlink(outside, dst / "sub" / "deep")                   # a planted link where a folder is copied
    report = copy_tree(src, dst, merge=True)
    got = files_under(dst)
    assert got == {"keep.txt": "file:kept\n", "a.txt": "file:alpha\n", "sub": "dir", "sub/old.txt": "file:old\n",
                   "sub/b.txt": "file:beta\n", "sub/deep": "dir", "sub/deep/c.bin": "file:\x00\x01\x02"}
    assert (outside / "secret.txt").read_text() == SECRET  # nothing written through the links
    assert sorted(os.listdir(outside)) == ["secret.txt"]
    assert report.copied == ["a.txt", "sub/b.txt", "sub/deep/c.bin"]


def test_merge_does_not_write_through_a_hard_link(src: Path, tmp_path: Path, outside: Path) -> None:
    dst = tmp_path / "dst"
    dst.mkdir()
    os.link(outside / "secret.txt", dst / "a.txt")
    copy_tree(src, dst, merge=True)
    assert (dst / "a.txt").read_text() == "alpha\n" and (outside / "secret.txt").read_text() == SECRET


def test_merge_a_file_over_a_folder_is_refused(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "dst"
    (dst / "a.txt").mkdir(parents=True)
    with pytest.raises(PathError, match="a directory is in the way"):
        copy_tree(src, dst, merge=True)


def test_merge_a_folder_over_a_file_replaces_it(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "dst"
    dst.mkdir()
    (dst / "sub").write_text("was a file\n")
    copy_tree(src, dst, merge=True)
    assert (dst / "sub" / "b.txt").read_text() == "beta\n"


# --------------------------------------------------------------------------- copy_tree: one file


def test_copy_one_file(src: Path, tmp_path: Path) -> None:
    os.chmod(src / "a.txt", 0o640)
    report = copy_tree(src / "a.txt", tmp_path / "out" / "copy.txt")
    assert (tmp_path / "out" / "copy.txt").read_text() == "alpha\n"
    assert stat.S_IMODE(os.stat(tmp_path / "out" / "copy.txt").st_mode) == 0o640
    assert (report.files, report.bytes, report.copied) == (1, 6, ["a.txt"])


def test_copy_one_file_merge_replaces_a_file_or_a_link(src: Path, tmp_path: Path, outside: Path) -> None:
    dst = tmp_path / "copy.txt"
    os.symlink(outside / "secret.txt", dst)
    copy_tree(src / "a.txt", dst, merge=True)
    assert not dst.is_symlink() and dst.read_text() == "alpha\n" and (outside / "secret.txt").read_text() == SECRET
    with pytest.raises(FileExistsError):
        copy_tree(src / "a.txt", dst)


@pytest.mark.parametrize(("make", "reason"), [
    (lambda p, o: os.symlink(o / "secret.txt", p), "a symlink, not a regular file"),
    (lambda p, o: os.mkfifo(p), "a FIFO, not a regular file"),
    (lambda p, o: None, "refused as a file to copy"),
])
def test_copy_one_file_refuses_links_fifos_and_missing_files(tmp_path: Path, outside: Path, make: object,
                                                             reason: str) -> None:
    p = tmp_path / "thing"
    make(p, outside)  # type: ignore[operator]
    with no_block(), pytest.raises(PathError, match=reason):
        copy_tree(p, tmp_path / "dst")
    assert not os.path.lexists(tmp_path / "dst")


def test_copy_one_hard_linked_file_is_left_out(tmp_path: Path, outside: Path) -> None:
    os.link(outside / "secret.txt", tmp_path / "h")
    report = copy_tree(tmp_path / "h", tmp_path / "dst")
    assert not (tmp_path / "dst").exists() and report.refused[0][0] == "h"


# --------------------------------------------------------------------------- copy_tree: limits


def test_copy_limits_files(src: Path, tmp_path: Path) -> None:
    copy_tree(src, tmp_path / "ok", limits=CopyLimits(max_files=5))  # 3 files + 2 folders
    with pytest.raises(CopyError, match="more than 4 entries"):
        copy_tree(src, tmp_path / "over", limits=CopyLimits(max_files=4))


def test_copy_limits_depth(src: Path, tmp_path: Path) -> None:
    copy_tree(src, tmp_path / "ok", limits=CopyLimits(max_depth=2))  # sub/deep is two levels down
    with pytest.raises(CopyError, match="deeper than 1 levels"):
        copy_tree(src, tmp_path / "over", limits=CopyLimits(max_depth=1))


def test_copy_limits_bytes(src: Path, tmp_path: Path) -> None:
    copy_tree(src, tmp_path / "ok", limits=CopyLimits(max_bytes=14))  # 6 + 5 + 3 bytes
    with pytest.raises(CopyError, match="more than 13 bytes"):
        copy_tree(src, tmp_path / "over", limits=CopyLimits(max_bytes=13))


def test_copy_limits_a_file_too_large_is_left_out_and_recorded(src: Path, tmp_path: Path) -> None:
    report = copy_tree(src, tmp_path / "dst", limits=CopyLimits(max_file_bytes=5))
    assert report.copied == ["sub/b.txt", "sub/deep/c.bin"]
    assert report.refused == [("a.txt", "file of 6 bytes left out (over 5)")]
    assert not (tmp_path / "dst" / "a.txt").exists()


class _SlowClock:
    """time.monotonic for fs: every reading is one second later than the one before, so a
    copy "takes" one second per entry it checks."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        self.t += 1.0
        return self.t


def _wide_tree(root: Path, n: int) -> Path:
    root.mkdir()
    for i in range(n):
        (root / f"f{i:03d}.txt").write_text(str(i))
    return root


def test_copy_limits_time_stops_a_slow_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = _wide_tree(tmp_path / "src", 50)
    monkeypatch.setattr(copying.time, "monotonic", _SlowClock())
    with pytest.raises(CopyError, match="copy took longer than 10 s"):
        copy_tree(src, tmp_path / "dst", limits=CopyLimits(max_seconds=10))


def test_copy_limits_time_in_skip_mode_keeps_what_was_copied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = _wide_tree(tmp_path / "src", 50)
    monkeypatch.setattr(copying.time, "monotonic", _SlowClock())
    report = copy_tree(src, tmp_path / "dst", limits=CopyLimits(max_seconds=10, on_limit="skip"))
    assert report.capped and "copy took longer than 10 s" in report.capped[0] and "the rest left out" in report.capped[0]
    copied = sorted(p.name for p in (tmp_path / "dst").iterdir())
    assert 0 < len(copied) < 50 and copied == sorted(report.copied)
    for name in copied:  # what is there is whole
        assert (tmp_path / "dst" / name).read_text() == (src / name).read_text()


def test_copy_error_is_a_path_error() -> None:
    assert issubclass(CopyError, PathError) and issubclass(PathError, ValueError)


# --------------------------------------------------------------------------- remove_unsafe


def test_remove_unsafe(src: Path, outside: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    os.symlink(outside / "secret.txt", src / "abs")
    os.symlink("../../outside", src / "sub" / "up")
    os.symlink("a.txt", src / "ok_link")
    os.symlink(src / "a.txt", src / "abs_inside")  # absolute, but it resolves inside: kept
    os.mkfifo(src / "sub" / "deep" / "pipe")
    sock = make_socket(src, "sock", monkeypatch)
    try:
        with no_block():
            removed = remove_unsafe(src)
    finally:
        sock.close()
    assert sorted(removed) == [("abs", "symlink leading out of the tree left out"), ("sock", "a socket"),
                               ("sub/deep/pipe", "a FIFO"), ("sub/up", "symlink leading out of the tree left out")]
    left = files_under(src)
    assert left["ok_link"] == "link:a.txt" and left["abs_inside"] == f"link:{src / 'a.txt'}"
    assert not {"abs", "sub/up", "sock", "sub/deep/pipe"} & set(left)
    assert left["a.txt"] == "file:alpha\n" and (outside / "secret.txt").read_text() == SECRET


def test_remove_unsafe_on_a_clean_tree_removes_nothing(src: Path) -> None:
    before = files_under(src)
    assert remove_unsafe(src) == []
    assert files_under(src) == before


# --------------------------------------------------------------------------- read_tree


def test_read_tree(src: Path, outside: Path) -> None:
    os.symlink(outside / "secret.txt", src / "sub" / "link")
    os.symlink(outside, src / "sub" / "dirlink")
    os.mkfifo(src / "sub" / "pipe")
    os.link(outside / "secret.txt", src / "sub" / "hard")
    (src / "sub" / "big.txt").write_text("x" * 100)
    with no_block():
        got = read_tree(src, "sub", max_file_bytes=10)
    assert got == [("sub/b.txt", b"beta\n"), ("sub/deep/c.bin", b"\x00\x01\x02")]
    with no_block():
        got = read_tree(src, "sub", max_file_bytes=10, partial=True)
    assert ("sub/big.txt", b"x" * 10) in got and len(got) == 3
    assert read_tree(src, "sub", max_file_bytes=10, skip=lambda name: name == "deep") == [("sub/b.txt", b"beta\n")]
    assert read_tree(src, ".", max_file_bytes=10, max_files=2) == [("a.txt", b"alpha\n"), ("sub/b.txt", b"beta\n")]


def test_read_tree_stops_at_its_entry_ceiling_and_says_so(tmp_path: Path) -> None:
    """Empty folders cost a walk as much as files: `max_entries` counts every entry looked at,
    a huge folder is listed only up to it, and each ceiling reached is said once, without names."""
    (tmp_path / "d").mkdir()
    for i in range(50):
        (tmp_path / "d" / f"{i:02d}").mkdir()
    (tmp_path / "z.txt").write_text("z")
    capped: list[str] = []
    # The root's two entries are looked at first; "d" is listed up to the ceiling, then "z.txt" is read.
    assert read_tree(tmp_path, ".", max_file_bytes=10, max_entries=20, capped=capped) == [("z.txt", b"z")]
    assert len(capped) == 1 and "20 entries" in capped[0] and "d/" not in capped[0]
    capped = []
    assert read_tree(tmp_path, ".", max_file_bytes=10, max_entries=60, capped=capped) == [("z.txt", b"z")]
    assert capped == []
    (tmp_path / "d" / "00" / "f.txt").write_text("f")
    (tmp_path / "d" / "01" / "g.txt").write_text("g")
    capped = []
    assert read_tree(tmp_path, ".", max_file_bytes=10, max_files=1, capped=capped) == [("d/00/f.txt", b"f")]
    assert capped == ["1 files read, the most it reads: the rest of the tree left out"]
    capped = []
    assert read_tree(tmp_path, ".", max_file_bytes=10, max_depth=1, capped=capped) == [("z.txt", b"z")]
    assert capped == ["folders deeper than 1 levels left out"]


def test_read_tree_stops_at_its_byte_ceiling_and_says_so(tmp_path: Path) -> None:
    """`max_total_bytes` bounds what a walk reads in all: the file that reaches it is cut there,
    the rest of the tree is left out, and the ceiling is said once."""
    for name in ("a", "b", "c", "d"):
        (tmp_path / name).write_bytes(name.encode() * 40)
    capped: list[str] = []
    got = read_tree(tmp_path, ".", max_file_bytes=100, max_total_bytes=100, capped=capped)
    assert got == [("a", b"a" * 40), ("b", b"b" * 40), ("c", b"c" * 20)]
    assert capped == ["100 bytes read, the most it reads: the rest of the tree left out"]
    assert [p for p, _ in read_tree(tmp_path, ".", max_file_bytes=100)] == ["a", "b", "c", "d"]


def test_read_tree_of_a_missing_or_linked_folder_is_empty(src: Path, outside: Path) -> None:
    os.symlink(outside, src / "deliverables")
    assert read_tree(src, "deliverables", max_file_bytes=1000) == []
    assert read_tree(src, "nothing-here", max_file_bytes=1000) == []
    assert read_tree(src, "a.txt", max_file_bytes=1000) == []
    assert read_tree(src, "../outside", max_file_bytes=1000) == []


# --------------------------------------------------------------------------- entry_kind


def test_entry_kind(src: Path, outside: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    os.symlink("a.txt", src / "link")
    os.symlink(outside, src / "dirlink")
    os.mkfifo(src / "pipe")
    sock = make_socket(src, "sock", monkeypatch)
    try:
        with no_block():
            kinds = {rel: entry_kind(src, rel) for rel in
                     (".", "a.txt", "sub", "sub/deep/c.bin", "link", "dirlink", "pipe", "sock", "nothing", "sub/no")}
    finally:
        sock.close()
    assert kinds == {".": "dir", "a.txt": "file", "sub": "dir", "sub/deep/c.bin": "file", "link": "link",
                     "dirlink": "link", "pipe": "special", "sock": "special", "nothing": None, "sub/no": None}


def test_entry_kind_refuses_a_link_or_a_file_on_the_way(src: Path, outside: Path) -> None:
    os.symlink(outside, src / "dirlink")
    with pytest.raises(PathError, match="not a plain directory"):
        entry_kind(src, "dirlink/secret.txt")
    with pytest.raises(PathError, match="not a plain directory"):
        entry_kind(src, "a.txt/x")
    with pytest.raises(PathError, match="escapes the workspace"):
        entry_kind(src, "../outside/secret.txt")


# --------------------------------------------------------------------------- read_workspace_file


def test_read_workspace_file(src: Path) -> None:
    assert read_workspace_file(src, "sub/b.txt", 100) == b"beta\n"
    assert read_workspace_file(src, "./a.txt", 6) == b"alpha\n"
    with pytest.raises(PathError, match="too large to read"):
        read_workspace_file(src, "a.txt", 5)
    with pytest.raises(PathError, match="workspace root directory"):
        read_workspace_file(src, ".", 5)
    with pytest.raises(PathError, match="not a regular file"):
        read_workspace_file(src, "sub", 5)
    with pytest.raises(PathError):
        read_workspace_file(src, "missing.txt", 5)


def test_read_workspace_file_follows_no_link(src: Path, outside: Path) -> None:
    os.symlink(outside / "secret.txt", src / "link")
    os.symlink("a.txt", src / "inner")  # even a link inside: the path is taken literally
    os.symlink(outside, src / "dirlink")
    for rel in ("link", "inner", "dirlink/secret.txt"):
        with pytest.raises(PathError):
            read_workspace_file(src, rel, 1000)


def test_read_workspace_file_does_not_block_on_a_fifo(src: Path) -> None:
    os.mkfifo(src / "answer.txt")
    with no_block(), pytest.raises(PathError, match="not a regular file"):
        read_workspace_file(src, "answer.txt", 1000)


def test_read_workspace_file_hard_links(src: Path, outside: Path) -> None:
    os.link(src / "a.txt", src / "same_owner")  # a hard link to a file the workspace's owner owns: fine
    assert read_workspace_file(src, "same_owner", 100) == b"alpha\n"
    if os.geteuid() != 0:
        pytest.skip("needs root to give the outside file another owner")
    os.chown(outside / "secret.txt", 12345, 12345)
    os.link(outside / "secret.txt", src / "foreign")
    with pytest.raises(PathError, match="hard link to a file the workspace's owner does not own"):
        read_workspace_file(src, "foreign", 100)


# --------------------------------------------------------------------------- check_relative


@pytest.mark.parametrize("rel", ["a.txt", "sub/b.txt", "./a", "a/./b", "a..b", "...", ".hidden", "a\\b"])
def test_check_relative_accepts(rel: str) -> None:
    check_relative(rel)


@pytest.mark.parametrize(("rel", "reason"), [
    ("", "empty path refused"), ("  ", "empty path refused"),
    ("a\x00b", "contains a NUL character"),
    ("/etc/passwd", "absolute path"), ("\\\\server\\share", "absolute path"), ("C:\\x", "absolute path"),
    ("c:x", "absolute path"),
    ("..", "escapes the workspace"), ("../x", "escapes the workspace"), ("a/../../x", "escapes the workspace"),
    ("a\\..\\b", "escapes the workspace"), ("a/..", "escapes the workspace"),
])
def test_check_relative_refuses(rel: str, reason: str) -> None:
    with pytest.raises(PathError, match=reason):
        check_relative(rel)


def test_check_relative_refuses_non_strings() -> None:
    with pytest.raises(PathError, match="path must be a string, got int"):
        check_relative(3)  # type: ignore[arg-type]
    with pytest.raises(PathError, match="got PosixPath"):
        check_relative(Path("a"))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- tree_digest


def test_tree_digest_is_stable_and_independent_of_the_location(src: Path, tmp_path: Path) -> None:
    d1 = tree_digest(src)
    assert tree_digest(src) == d1 and len(d1) == 64
    copy_tree(src, tmp_path / "elsewhere" / "copy")
    assert tree_digest(tmp_path / "elsewhere" / "copy") == d1


@pytest.mark.parametrize("change", ["content", "name", "new_file", "link_text"])
def test_tree_digest_changes_with_the_tree(src: Path, change: str) -> None:
    os.symlink("a.txt", src / "link")
    before = tree_digest(src)
    if change == "content":
        (src / "sub" / "b.txt").write_text("beta!\n")
    elif change == "name":
        (src / "sub" / "b.txt").rename(src / "sub" / "b2.txt")
    elif change == "new_file":
        (src / "sub" / "deep" / "new").write_text("")
    else:
        os.unlink(src / "link")
        os.symlink("sub/b.txt", src / "link")
    assert tree_digest(src) != before


def test_tree_digest_counts_an_empty_folder(src: Path) -> None:
    """"each entry by relative path": an empty folder is an entry of the tree (a task whose
    workspace gains an empty `output/` is not the same task)."""
    before = tree_digest(src)
    (src / "sub" / "empty").mkdir()
    assert tree_digest(src) != before


def test_tree_digest_does_not_follow_links(src: Path, outside: Path) -> None:
    os.symlink(outside / "secret.txt", src / "file_link")
    os.symlink(outside, src / "dir_link")
    before = tree_digest(src)
    (outside / "secret.txt").write_text("changed secret")
    (outside / "more.txt").write_text("more")
    assert tree_digest(src) == before


def test_tree_digest_never_opens_special_files(src: Path) -> None:
    os.mkfifo(src / "pipe")
    with no_block():
        with_fifo = tree_digest(src)
    os.unlink(src / "pipe")
    assert tree_digest(src) != with_fifo  # a FIFO counts by its kind and name


def test_tree_digest_leaves_out_bytecode(src: Path) -> None:
    before = tree_digest(src)
    (src / "__pycache__").mkdir()
    (src / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\x00")
    (src / "sub" / "m.pyc").write_bytes(b"\x00")
    (src / ".git").mkdir()
    (src / ".git" / "HEAD").write_text("ref: x\n")
    assert tree_digest(src) == before


def test_tree_digest_of_a_file_and_of_nothing(src: Path, tmp_path: Path) -> None:
    one = tree_digest(src / "a.txt")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "a.txt").write_text("alpha\n")
    assert tree_digest(tmp_path / "other" / "a.txt") == one  # same name, same bytes
    assert tree_digest(src / "a.txt", label="x") != one
    missing = tree_digest(tmp_path / "nope", label="gone")
    assert missing == tree_digest(tmp_path / "also-nope", label="gone")
    assert missing != tree_digest(tmp_path / "nope", label="other")


def test_a_sparse_file_is_copied_sparse(tmp_path: Path) -> None:
    """A 1 GiB file with two bytes of data copies in no time and takes no disk: its holes stay
    holes (data extents only), and its data and size are kept."""
    src = tmp_path / "src"
    src.mkdir()
    with open(src / "sparse.bin", "wb") as f:
        f.truncate(1024**3)
        f.seek(5 * 1024**2)
        f.write(b"hello")
        f.seek(1024**3 - 3)
        f.write(b"end")
    report = copy_tree(src, tmp_path / "dst")
    out = tmp_path / "dst" / "sparse.bin"
    st = os.stat(out)
    assert st.st_size == 1024**3 and st.st_blocks * 512 < 1024**2
    with open(out, "rb") as f:
        f.seek(5 * 1024**2)
        assert f.read(5) == b"hello"
        f.seek(1024**3 - 3)
        assert f.read() == b"end"
    assert report.bytes < 1024**2


def _chain(folder: Path, n: int) -> None:
    """c/l0 -> l1 -> ... -> l{n}: relative links, each to the next (the last dangling)."""
    (folder / "c").mkdir()
    for i in range(n):
        os.symlink(f"l{i + 1}", folder / "c" / f"l{i}")


def test_real_path_follows_links_in_a_loop_and_stops_at_the_oss_limit(tmp_path: Path) -> None:
    """`real_path` is `os.path.realpath` (links in the middle and at the end, `..` after a link,
    missing parts kept as written) without Python 3.11's recursion per link: a chain of 1,500
    links (a RecursionError there) or a loop is a PathError past 40 links."""
    from assay.fs.paths import MAX_LINKS, real_path, resolve

    (tmp_path / "a" / "b").mkdir(parents=True)
    os.symlink("b", tmp_path / "a" / "l")
    os.symlink("../a/l/../b", tmp_path / "a" / "m")
    os.symlink("/etc", tmp_path / "e")
    for rel in ("a/l", "a/m", "a/m/../l", "e/passwd", "nope/x/../y", "a/l/..", "."):
        assert real_path(tmp_path / rel) == os.path.realpath(tmp_path / rel), rel
    _chain(tmp_path, 1500)
    os.symlink("loop", tmp_path / "loop")
    for rel in ("c/l0", "loop", f"c/l{1500 - MAX_LINKS - 1}"):
        with pytest.raises(PathError, match="more than 40 symbolic links"):
            real_path(tmp_path / rel)
        with pytest.raises(PathError, match="refused: more than 40 symbolic links"):
            resolve(tmp_path, rel)
    assert real_path(tmp_path / f"c/l{1500 - MAX_LINKS}") == str(tmp_path / "c" / "l1500")


def test_a_copy_with_a_long_chain_of_links_leaves_the_chain_out(tmp_path: Path) -> None:
    """The copy's check of where its links lead reads a chain of 1,500 links without recursion:
    the links that pass the OS's limit are left out and said; every link kept resolves inside
    the copy within that limit (which links those are depends on the order they are checked
    in: a link whose next one was left out dangles inside the copy)."""
    from assay.fs.paths import real_path

    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    _chain(src, 1500)
    report = copy_tree(src, dst)
    kept = list((dst / "c").iterdir())
    assert kept and len(kept) + len(report.refused) == 1500
    assert all(why == "symlink leading out of the tree left out" for _, why in report.refused)
    assert all(real_path(p).startswith(str(dst) + "/") for p in kept)


def test_real_path_takes_dotdot_after_a_link_on_the_disk(tmp_path: Path) -> None:
    """`link/..` is the parent of where the link leads, as the kernel and `os.path.realpath` take
    it, not the folder holding the link (what a string normalisation would give)."""
    from assay.fs.paths import real_path

    (tmp_path / "far" / "deep").mkdir(parents=True)
    (tmp_path / "ws").mkdir()
    os.symlink(tmp_path / "far" / "deep", tmp_path / "ws" / "link")
    assert real_path(tmp_path / "ws" / "link" / ".." / "x") == str(tmp_path / "far" / "x")


def test_a_file_cut_by_the_byte_ceiling_is_said_even_when_it_is_the_last(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"a" * 10)
    (tmp_path / "b").write_bytes(b"b" * 10)
    capped: list[str] = []
    got = read_tree(tmp_path, ".", max_file_bytes=100, max_total_bytes=15, capped=capped)
    assert got == [("a", b"a" * 10), ("b", b"b" * 5)] and len(capped) == 1


def test_a_tree_digest_reads_no_file_a_copy_would_leave_out(tmp_path: Path) -> None:
    """A sparse file past the copy's per-file limit (a few bytes of a downloaded task, 32 GiB
    to read) is digested by its size alone, as the copy leaves it out; its size still counts."""
    from assay.fs.digests import tree_digest

    big = tmp_path / "big.bin"
    with open(big, "wb") as f:
        f.truncate(copying.CopyLimits().max_file_bytes + 1)
    first = tree_digest(tmp_path)
    os.utime(big, ns=(1, 1))  # not by its time
    assert tree_digest(tmp_path) == first
    with open(big, "r+b") as f:
        f.truncate(copying.CopyLimits().max_file_bytes + 2)
    assert tree_digest(tmp_path) != first
