"""Round 4 red team, class 8 (names with control characters shown escaped): invisible format
characters in a file name. `escape_controls` escapes C0, DEL, C1, U+2028/2029 and the bidi
embeddings, overrides and isolates, but not the other invisible format characters (Unicode
category Cf): zero-width space U+200B, joiners U+200C/200D, the bidi marks U+200E/200F and
U+061C, the byte-order mark U+FEFF, tag characters U+E0020-E007F. Two names that differ only
by one of them read as the same name in `list_files` (the agent's, the web player's) and in
`assay show`, and a name can carry text no reader sees (tag characters spell ASCII)."""

from __future__ import annotations

from pathlib import Path

import pytest

from assay.agent.file_tools import list_files
from assay.record import escape_controls

pytestmark = pytest.mark.slow

INVISIBLE = {"zero-width-space": "\u200b", "zero-width-joiner": "\u200d", "rlm": "\u200f", "alm": "\u061c",
             "bom": "\ufeff", "tag-a": "\U000e0061"}


def test_control_a_bidi_override_in_a_name_is_escaped(tmp_path: Path) -> None:
    (tmp_path / "a\u202etxt.exe").write_text("x")
    shown = list_files(tmp_path, show_name=escape_controls)
    assert "\u202e" not in shown and "\\u202e" in shown


@pytest.mark.parametrize("name", list(INVISIBLE))
def test_two_names_that_differ_by_an_invisible_character_are_told_apart(tmp_path: Path, name: str) -> None:
    (tmp_path / "report.txt").write_text("honest\n")
    (tmp_path / f"report{INVISIBLE[name]}.txt").write_text("planted\n")
    shown = list_files(tmp_path, show_name=escape_controls)
    lines = [ln for ln in shown.splitlines() if ln.startswith("report")]
    assert len(lines) == 2
    visible = [ln.encode("ascii", "backslashreplace").decode() for ln in lines]
    assert all(INVISIBLE[name] not in ln for ln in lines), visible
