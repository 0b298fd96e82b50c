"""The harness's file tools: they run as root, so they must never leave the workspace."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from assay import fs

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
    with pytest.raises(fs.PathError):
        fs.resolve(ws, rel)


def test_resolve_symlinks(ws: Path, outside: Path) -> None:
    (ws / "d").mkdir()
    (ws / "d" / "f.txt").write_text("x")
    os.symlink("d/f.txt", ws / "inner")  # stays inside: allowed
    os.symlink(outside / "secret.txt", ws / "abs")
    os.symlink("../outside/secret.txt", ws / "rel")
    os.symlink(outside, ws / "dirlink")
    os.symlink(outside / "not-yet", ws / "dangling")
    os.symlink("/", ws / "d" / "root")
    assert fs.resolve(ws, "inner") == (ws / "d" / "f.txt").resolve()
    assert fs.resolve(ws, ".") == ws.resolve()
    assert fs.resolve(ws, "new/dir/file.txt") == ws.resolve() / "new/dir/file.txt"
    for rel in ["abs", "rel", "dirlink", "dirlink/secret.txt", "dirlink/new.txt", "dangling",
                "d/root/etc/passwd", "d/root"]:
        with pytest.raises(fs.PathError, match="outside the workspace"):
            fs.resolve(ws, rel)


def test_read_file_numbers_and_pages(ws: Path) -> None:
    (ws / "a.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    out = fs.read_file(ws, "a.txt", offset=2, limit=3)
    assert out.splitlines() == ["    3\tline 3", "    4\tline 4", "    5\tline 5",
                                "[5 more lines; continue with offset=5]"]
    out = fs.read_file(ws, "a.txt")
    assert out.splitlines()[-1] == "   10\tline 10" and "more lines" not in out
    assert "past the end" in fs.read_file(ws, "a.txt", offset=50)
    (ws / "empty").write_text("")
    assert "empty" in fs.read_file(ws, "empty")
    (ws / "long.txt").write_text("x" * 5000 + "\n")
    assert "line clipped: 3000 more characters" in fs.read_file(ws, "long.txt")


def test_read_file_binary_and_errors(ws: Path) -> None:
    (ws / "b.bin").write_bytes(b"\x7fELF\x00\x01\x02" * 100)
    out = fs.read_file(ws, "b.bin")
    assert "binary file (700 bytes)" in out and "ELF" not in out
    (ws / "latin1.txt").write_bytes("caf\xe9 ol\xe9\n".encode("latin-1"))
    assert "binary" in fs.read_file(ws, "latin1.txt")
    (ws / "d").mkdir()
    with pytest.raises(fs.PathError, match="directory"):
        fs.read_file(ws, "d")
    with pytest.raises(fs.PathError, match="no such file"):
        fs.read_file(ws, "missing.txt")
    with pytest.raises(fs.PathError):
        fs.read_file(ws, ".")
    os.mkfifo(ws / "fifo")
    with pytest.raises(fs.PathError, match="not a regular file"):
        fs.read_file(ws, "fifo")  # must not block


def test_read_through_symlinks(ws: Path, outside: Path) -> None:
    (ws / "real.txt").write_text("hello\n")
    os.symlink("real.txt", ws / "ok")
    os.symlink(outside / "secret.txt", ws / "bad")
    assert fs.read_file(ws, "ok") == "    1\thello"
    with pytest.raises(fs.PathError):
        fs.read_file(ws, "bad")


def test_write_file_creates_parents_with_owner(ws: Path) -> None:
    owner = 4242 if os.geteuid() == 0 else os.getuid()
    msg = fs.write_file(ws, "a/b/c.txt", "one\ntwo\n", owner=owner)
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
        with pytest.raises(fs.PathError):
            fs.write_file(ws, rel, "pwned")
    with pytest.raises(fs.PathError):
        fs.write_file(ws, "dir", "x")
    with pytest.raises(fs.PathError):
        fs.write_file(ws, "afile/child.txt", "x")
    assert (outside / "secret.txt").read_text() == SECRET + "\n"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


def test_write_does_not_write_through_hard_links(ws: Path, outside: Path) -> None:
    os.link(outside / "secret.txt", ws / "hard")
    fs.write_file(ws, "hard", "replaced\n")
    assert (ws / "hard").read_text() == "replaced\n"
    assert (outside / "secret.txt").read_text() == SECRET + "\n"
    fs.edit_file(ws, "hard", "replaced", "edited")
    assert (outside / "secret.txt").read_text() == SECRET + "\n"


def test_write_strips_setuid_and_keeps_mode(ws: Path) -> None:
    p = ws / "tool.sh"
    p.write_text("#!/bin/sh\n")
    os.chmod(p, 0o4755)
    fs.write_file(ws, "tool.sh", "#!/bin/sh\necho hi\n")
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o755


def test_write_through_inner_symlink_replaces_target(ws: Path) -> None:
    (ws / "target.txt").write_text("old")
    os.symlink("target.txt", ws / "alias")
    fs.write_file(ws, "alias", "new")
    assert os.path.islink(ws / "alias") and (ws / "target.txt").read_text() == "new"


def test_edit_file(ws: Path) -> None:
    (ws / "m.py").write_text("a = 1\nb = 1\nc = 2\n")
    with pytest.raises(ValueError, match="not found"):
        fs.edit_file(ws, "m.py", "zzz", "y")
    with pytest.raises(ValueError, match="occurs 2 times"):
        fs.edit_file(ws, "m.py", "= 1", "= 3")
    with pytest.raises(ValueError, match="empty"):
        fs.edit_file(ws, "m.py", "", "x")
    assert "1 occurrence" in fs.edit_file(ws, "m.py", "c = 2", "c = 5")
    assert "2 occurrences" in fs.edit_file(ws, "m.py", "= 1", "= 3", replace_all=True)
    assert (ws / "m.py").read_text() == "a = 3\nb = 3\nc = 5\n"
    (ws / "bin").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ValueError, match="not UTF-8"):
        fs.edit_file(ws, "bin", "a", "b")
    with pytest.raises(fs.PathError):
        fs.edit_file(ws, "missing.py", "a", "b")


def test_list_files(ws: Path, outside: Path) -> None:
    (ws / "src" / "pkg").mkdir(parents=True)
    (ws / "src" / "pkg" / "mod.py").write_text("x = 1\n")
    (ws / "README").write_text("hi")
    (ws / "empty").mkdir()
    os.symlink(outside, ws / "out")
    out = fs.list_files(ws).splitlines()
    assert out == ["README (2 bytes)", "empty/", f"out -> {outside}", "src/", "src/pkg/",
                   "src/pkg/mod.py (6 bytes)"]
    assert SECRET not in "\n".join(out) and "secret.txt" not in "\n".join(out)  # link not followed
    assert fs.list_files(ws, "src").splitlines() == ["src/pkg/", "src/pkg/mod.py (6 bytes)"]
    assert "empty" in fs.list_files(ws, "empty")
    with pytest.raises(fs.PathError):
        fs.list_files(ws, "out")
    with pytest.raises(fs.PathError):
        fs.list_files(ws, "README")
    with pytest.raises(fs.PathError):
        fs.list_files(ws, "..")


def test_list_files_truncates(ws: Path) -> None:
    for i in range(30):
        (ws / f"f{i:02d}").write_text("")
    out = fs.list_files(ws, max_entries=10).splitlines()
    assert len(out) == 11 and out[-1].startswith("[listing truncated after 10 entries")
