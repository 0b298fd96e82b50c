"""The harness's file tools: they run as root, so they must never leave the workspace."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from assay.agent.file_tools import MAX_LINE_CHARS, READ_FILE_MAX_BYTES, edit_file, list_files, read_file
from assay.fs.copying import CopyError, CopyLimits, copy_tree
from assay.fs.fsuid import acting_as
from assay.fs.paths import PathError, resolve
from assay.fs.reads import LIST_MAX_DEPTH, read_tree
from assay.fs.writes import QuotaError, write_file

SECRET = "TOPSECRET-fs-77"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    w = tmp_path / "ws"
    w.mkdir()
    return w


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    d = tmp_path / "outside"
    d.mkdir()
    (d / "secret.txt").write_text(SECRET + "\n")
    return d


@pytest.mark.parametrize("rel", ["", "  ", "/etc/passwd", "..", "../outside/secret.txt", "a/../../x",
                                 "a/..", "x\x00y"])
def test_resolve_refuses_bad_syntax(ws: Path, rel: str) -> None:
    with pytest.raises(PathError):
        resolve(ws, rel)


def test_resolve_symlinks(ws: Path, outside: Path) -> None:
    (ws / "d").mkdir()
    (ws / "d" / "f.txt").write_text("x")
    os.symlink("d/f.txt", ws / "inner")  # stays inside: allowed
    os.symlink(outside / "secret.txt", ws / "abs")
    os.symlink("../outside/secret.txt", ws / "rel")
    os.symlink(outside, ws / "dirlink")
    os.symlink(outside / "not-yet", ws / "dangling")
    os.symlink("/", ws / "d" / "root")
    assert resolve(ws, "inner") == (ws / "d" / "f.txt").resolve()
    assert resolve(ws, ".") == ws.resolve()
    assert resolve(ws, "new/dir/file.txt") == ws.resolve() / "new/dir/file.txt"
    for rel in ["abs", "rel", "dirlink", "dirlink/secret.txt", "dirlink/new.txt", "dangling",
                "d/root/etc/passwd", "d/root"]:
        with pytest.raises(PathError, match="outside the workspace"):
            resolve(ws, rel)


def test_read_file_numbers_and_pages(ws: Path) -> None:
    (ws / "a.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    out = read_file(ws, "a.txt", offset=2, limit=3)
    assert out.splitlines() == ["    3\tline 3", "    4\tline 4", "    5\tline 5",
                                "[5 more lines; continue with offset=5]"]
    out = read_file(ws, "a.txt")
    assert out.splitlines()[-1] == "   10\tline 10" and "more lines" not in out
    assert "past the end" in read_file(ws, "a.txt", offset=50)
    (ws / "empty").write_text("")
    assert "empty" in read_file(ws, "empty")
    (ws / "long.txt").write_text("x" * 5000 + "\n")
    assert "line clipped: 3000 more characters" in read_file(ws, "long.txt")


def test_read_file_binary_and_errors(ws: Path) -> None:
    (ws / "b.bin").write_bytes(b"\x7fELF\x00\x01\x02" * 100)
    out = read_file(ws, "b.bin")
    assert "binary file (700 bytes)" in out and "ELF" not in out
    (ws / "latin1.txt").write_bytes("caf\xe9 ol\xe9\n".encode("latin-1"))
    assert "binary" in read_file(ws, "latin1.txt")
    (ws / "d").mkdir()
    with pytest.raises(PathError, match="directory"):
        read_file(ws, "d")
    with pytest.raises(PathError, match="no such file"):
        read_file(ws, "missing.txt")
    with pytest.raises(PathError):
        read_file(ws, ".")
    os.mkfifo(ws / "fifo")
    with pytest.raises(PathError, match="not a regular file"):
        read_file(ws, "fifo")  # must not block


def test_read_through_symlinks(ws: Path, outside: Path) -> None:
    (ws / "real.txt").write_text("hello\n")
    os.symlink("real.txt", ws / "ok")
    os.symlink(outside / "secret.txt", ws / "bad")
    assert read_file(ws, "ok") == "    1\thello"
    with pytest.raises(PathError):
        read_file(ws, "bad")


def test_write_file_creates_parents_with_owner(ws: Path) -> None:
    owner = 4242 if os.geteuid() == 0 else os.getuid()
    msg = write_file(ws, "a/b/c.txt", "one\ntwo\n", owner=owner)
    assert "c.txt" in msg and "8 bytes" in msg
    assert (ws / "a/b/c.txt").read_text() == "one\ntwo\n"
    for p in [ws / "a", ws / "a/b", ws / "a/b/c.txt"]:
        st = os.stat(p)
        assert (st.st_uid, st.st_gid) == (owner, owner)
    assert stat.S_IMODE(os.stat(ws / "a/b/c.txt").st_mode) == 0o644
    assert [p.name for p in (ws / "a/b").iterdir()] == ["c.txt"]  # no temp file left


def test_write_file_refusals(ws: Path, outside: Path) -> None:
    os.symlink(outside / "secret.txt", ws / "link")
    os.symlink(outside, ws / "dirlink")
    (ws / "dir").mkdir()
    (ws / "afile").write_text("x")
    for rel in ["link", "dirlink/secret.txt", "dirlink/new.txt", "dirlink/sub/new.txt", "../x", "/tmp/x"]:
        with pytest.raises(PathError):
            write_file(ws, rel, "pwned")
    with pytest.raises(PathError):
        write_file(ws, "dir", "x")
    with pytest.raises(PathError):
        write_file(ws, "afile/child.txt", "x")
    assert (outside / "secret.txt").read_text() == SECRET + "\n"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


def test_write_does_not_write_through_hard_links(ws: Path, outside: Path) -> None:
    os.link(outside / "secret.txt", ws / "hard")
    write_file(ws, "hard", "replaced\n")
    assert (ws / "hard").read_text() == "replaced\n"
    assert (outside / "secret.txt").read_text() == SECRET + "\n"
    edit_file(ws, "hard", "replaced", "edited")
    assert (outside / "secret.txt").read_text() == SECRET + "\n"


def test_write_strips_setuid_and_keeps_mode(ws: Path) -> None:
    p = ws / "tool.sh"
    p.write_text("#!/bin/sh\n")
    os.chmod(p, 0o4755)
    write_file(ws, "tool.sh", "#!/bin/sh\necho hi\n")
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o755


def test_write_through_inner_symlink_replaces_target(ws: Path) -> None:
    (ws / "target.txt").write_text("old")
    os.symlink("target.txt", ws / "alias")
    write_file(ws, "alias", "new")
    assert os.path.islink(ws / "alias") and (ws / "target.txt").read_text() == "new"


def test_edit_file(ws: Path) -> None:
    (ws / "m.py").write_text("a = 1\nb = 1\nc = 2\n")
    with pytest.raises(ValueError, match="not found"):
        edit_file(ws, "m.py", "zzz", "y")
    with pytest.raises(ValueError, match="occurs 2 times"):
        edit_file(ws, "m.py", "= 1", "= 3")
    with pytest.raises(ValueError, match="empty"):
        edit_file(ws, "m.py", "", "x")
    assert "1 occurrence" in edit_file(ws, "m.py", "c = 2", "c = 5")
    assert "2 occurrences" in edit_file(ws, "m.py", "= 1", "= 3", replace_all=True)
    assert (ws / "m.py").read_text() == "a = 3\nb = 3\nc = 5\n"
    (ws / "bin").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ValueError, match="not UTF-8"):
        edit_file(ws, "bin", "a", "b")
    with pytest.raises(PathError):
        edit_file(ws, "missing.py", "a", "b")


def test_list_files(ws: Path, outside: Path) -> None:
    (ws / "src" / "pkg").mkdir(parents=True)
    (ws / "src" / "pkg" / "mod.py").write_text("x = 1\n")
    (ws / "README").write_text("hi")
    (ws / "empty").mkdir()
    os.symlink(outside, ws / "out")
    out = list_files(ws).splitlines()
    assert out == ["README (2 bytes)", "empty/", f"out -> {outside}", "src/", "src/pkg/",
                   "src/pkg/mod.py (6 bytes)"]
    assert SECRET not in "\n".join(out) and "secret.txt" not in "\n".join(out)  # link not followed
    assert list_files(ws, "src").splitlines() == ["src/pkg/", "src/pkg/mod.py (6 bytes)"]
    assert "empty" in list_files(ws, "empty")
    with pytest.raises(PathError):
        list_files(ws, "out")
    with pytest.raises(PathError):
        list_files(ws, "README")
    with pytest.raises(PathError):
        list_files(ws, "..")


def test_list_files_truncates(ws: Path) -> None:
    for i in range(30):
        (ws / f"f{i:02d}").write_text("")
    out = list_files(ws, max_entries=10).splitlines()
    assert len(out) == 11 and out[-1].startswith("[listing truncated after 10 entries")


# --------------------------------------------------------------------------- the file tools' limits


def test_edit_file_refuses_an_amplifying_edit_before_building_it(ws: Path) -> None:
    (ws / "seed.txt").write_text("x" * 100_000)
    with pytest.raises(QuotaError, match="limit"):
        edit_file(ws, "seed.txt", "x", "y" * 1000, replace_all=True, max_bytes=10 * 1024**2)
    assert (ws / "seed.txt").read_text() == "x" * 100_000
    # the exact size is computed in bytes: a multi-byte replacement counts its bytes
    assert edit_file(ws, "seed.txt", "x", "é", replace_all=True, max_bytes=200_000).startswith("edited")
    assert (ws / "seed.txt").stat().st_size == 200_000


def test_file_tools_refuse_big_files(ws: Path) -> None:
    with pytest.raises(QuotaError):
        write_file(ws, "big.txt", "z" * 2048, max_bytes=1024)
    assert not (ws / "big.txt").exists()
    (ws / "huge.txt").write_bytes(b"a" * 4096)
    with pytest.raises(QuotaError, match="edit it with a command"):
        edit_file(ws, "huge.txt", "a", "b", replace_all=True, max_bytes=1024)


def test_room_check_refuses_a_write_past_the_quota(ws: Path) -> None:
    calls: list[tuple[int, int]] = []

    def room(size: int, replaced: int) -> None:
        calls.append((size, replaced))
        if size - replaced > 10:
            raise QuotaError("refused: the workspace's disk quota")

    write_file(ws, "a.txt", "12345", room=room)
    write_file(ws, "a.txt", "1234567890", room=room)  # replaces 5 bytes: 5 more
    with pytest.raises(QuotaError, match="quota"):
        write_file(ws, "b.txt", "x" * 11, room=room)
    assert calls == [(5, 0), (10, 5), (11, 0)]


def test_list_files_stops_at_its_depth(ws: Path) -> None:
    d = ws
    for _ in range(5):
        d = d / "d"
    d.mkdir(parents=True)
    (d / "leaf").write_text("x")
    out = list_files(ws, ".", max_depth=3)
    assert "d/d/d/" in out and "d/d/d/d/" not in out and "deeper than 3 levels" in out


def test_list_files_on_a_very_deep_tree(ws: Path) -> None:
    """1,200 levels: no RecursionError, no descriptor per level past the cap."""
    fd = os.open(ws, os.O_RDONLY)
    try:
        for _ in range(1200):
            os.mkdir("d", dir_fd=fd)
            nfd = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nfd
    finally:
        os.close(fd)
    try:
        out = list_files(ws, ".")
        assert f"deeper than {LIST_MAX_DEPTH} levels" in out
        assert read_tree(ws, ".", max_file_bytes=10) == []
    finally:  # GNU rm copes with trees deeper than Python's recursion limit (pytest's cleanup does not)
        subprocess.run(["rm", "-rf", "--one-file-system", str(ws / "d")], check=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as another uid needs root")
def test_acting_as_checks_permissions_as_the_run() -> None:
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="assay-fs-test-"))
    os.chmod(base, 0o711)  # as the harness makes run folders: other uids may pass through
    try:
        _acting_as_checks(base / "ws", 200_999)
    finally:
        shutil.rmtree(base)


def _acting_as_checks(ws: Path, uid: int) -> None:
    ws.mkdir()
    os.chown(ws, uid, uid)
    (ws / "mine.txt").write_text("x")
    os.chown(ws / "mine.txt", uid, uid)
    (ws / "roots.txt").write_text("root's\n")
    os.chmod(ws / "roots.txt", 0o600)
    with acting_as(uid):
        write_file(ws, "new/made.txt", "hello")
        with pytest.raises(PathError, match="Permission denied"):
            read_file(ws, "roots.txt")
    st = os.stat(ws / "new" / "made.txt")
    assert (st.st_uid, st.st_gid) == (uid, uid)
    assert os.stat(ws / "new").st_uid == uid
    assert "root's" in read_file(ws, "roots.txt")  # back to root afterwards


# --------------------------------------------------------------------------- capped copies


def test_copy_tree_skip_mode_keeps_what_fits(tmp_path: Path) -> None:
    src = tmp_path / "src"
    deep = src / "a" / "b" / "c" / "d"
    deep.mkdir(parents=True)
    (deep / "leaf.txt").write_text("deep")
    (src / "many").mkdir()
    for i in range(30):
        (src / "many" / f"f{i:02d}").write_text("x")
    rep = copy_tree(src, tmp_path / "dst", limits=CopyLimits(max_depth=2, on_limit="skip"))
    assert not (tmp_path / "dst" / "a" / "b" / "c").exists() and (tmp_path / "dst" / "a" / "b").is_dir()
    assert (tmp_path / "dst" / "many" / "f29").exists()
    assert any("deeper than 2" in c for c in rep.capped)
    rep = copy_tree(src, tmp_path / "dst2", limits=CopyLimits(max_files=10, on_limit="skip"))
    assert rep.files + rep.dirs + rep.links == 10 and any("too many files" in c for c in rep.capped)
    with pytest.raises(CopyError):
        copy_tree(src, tmp_path / "dst3", limits=CopyLimits(max_files=10))


def test_read_file_reads_a_bounded_part_of_a_huge_one_line_file(ws: Path) -> None:
    """A file past READ_FILE_MAX_BYTES, all one line: only the cap is read, the line is clipped
    with what was left out, and the note says how to see the rest."""
    with open(ws / "huge.txt", "wb") as f:
        f.write(b"b" * (READ_FILE_MAX_BYTES + 1024) + b"\nafter\n")
    out = read_file(ws, "huge.txt")
    assert len(out) < 3 * MAX_LINE_CHARS
    assert "line clipped:" in out and "more bytes" in out
    assert f"only the first {READ_FILE_MAX_BYTES} of" in out and "after" not in out
