"""The workbench reads the run's tool output (agent-controlled names and contents) back into
a file tree and an editor: hostile names and clipped files must not turn into wrong edits."""

from __future__ import annotations

from pathlib import Path

from assay.agent.file_tools import MAX_LINE_CHARS, list_files, read_file
from assay.web.tool_output import editor_text, tree_entries


def test_tree_entries_from_a_hostile_workspace(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "d").mkdir(parents=True)
    (ws / "d" / "a.txt").write_text("abc")
    (ws / "x -> y").write_text("1")  # a name that looks like a link line
    (ws / "z (3 bytes)").write_text("12345")  # a name that looks like a size
    (ws / "link").symlink_to("/etc/passwd")
    entries = tree_entries(list_files(ws, "."))
    by_path = {e["path"]: e for e in entries}
    assert by_path["d"] == {"path": "d", "kind": "dir"}
    assert by_path["d/a.txt"] == {"path": "d/a.txt", "kind": "file", "size": 3}
    assert by_path["link"] == {"path": "link", "kind": "link", "target": "/etc/passwd"}
    assert by_path["x -> y"] == {"path": "x -> y", "kind": "file", "size": 1}
    assert by_path["z (3 bytes)"] == {"path": "z (3 bytes)", "kind": "file", "size": 5}


def test_editor_text_is_whole_only_when_the_tool_showed_all_of_it(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f.py").write_text("a\n\tb\n    5\tnot a number prefix\n")
    assert editor_text(read_file(ws, "f.py", 0, 100_000)) == ("a\n\tb\n    5\tnot a number prefix\n", True)
    (ws / "long.txt").write_text("x" * (MAX_LINE_CHARS + 10) + "\n")
    text, whole = editor_text(read_file(ws, "long.txt", 0, 100_000))
    assert text is not None and not whole  # a clipped line: read-only in the editor
    (ws / "many.txt").write_text("l\n" * 10)
    assert editor_text(read_file(ws, "many.txt", 0, 3))[1] is False  # "[7 more lines ...]"
    (ws / "empty.txt").write_text("")
    assert editor_text(read_file(ws, "empty.txt")) == ("", True)
    (ws / "bin").write_bytes(b"\x00\x01\x02" * 100)
    assert editor_text(read_file(ws, "bin")) == (None, False)
    assert editor_text("error: path '..' refused") == (None, False)
