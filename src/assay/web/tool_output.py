"""The run's own tools' output as the workbench reads it: a file tree, an editor's text.

The workbench never opens a workspace file itself: its file tree is `list_files`'s listing
(`tree_entries`) and its editor holds `read_file`'s numbered lines (`editor_text`). Names in
them are the agent's, so they are read the one way that cannot be forged.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["editor_text", "tree_entries"]

_NUMBERED = re.compile(r"^ *\d+\t")
_SIZED = re.compile(r"^(?P<path>.+) \((?P<size>\d+) bytes\)$")


def tree_entries(listing: str) -> list[dict[str, Any]]:
    """`list_files` output as entries {path, kind: dir|file|link|special, size?, target?}; its
    closing notes (`[...]`) are left out. Names are the agent's: a file's size suffix is read
    first (so a file named `a -> b` stays a file); a name that still reads two ways (a folder
    named `a -> b`) shows as a link, and only files are opened from the tree, through the
    run's own `read_file`."""
    out: list[dict[str, Any]] = []
    for line in listing.splitlines():
        if not line or line.startswith("["):
            continue
        m = _SIZED.match(line)
        if m is not None:
            out.append({"path": m["path"], "kind": "file", "size": int(m["size"])})
        elif line.endswith(" (special file)"):
            out.append({"path": line.removesuffix(" (special file)"), "kind": "special"})
        elif " -> " in line:
            path, _, target = line.partition(" -> ")
            out.append({"path": path, "kind": "link", "target": target})
        elif line.endswith("/"):
            out.append({"path": line[:-1], "kind": "dir"})
    return out


def editor_text(output: str) -> tuple[str | None, bool]:
    """The file's text from `read_file`'s numbered output, and whether it is the whole file.

    None when the tool said no (an error, a binary file, an image); not whole when lines were
    clipped or only the first bytes were read (saving would then lose the rest)."""
    if output.startswith("error:") or (output.startswith("[") and not _NUMBERED.match(output)):
        if output.startswith("[") and output.endswith(" is empty]") and "\n" not in output:
            return "", True
        return None, False
    lines: list[str] = []
    whole = True
    for line in output.split("\n"):
        m = _NUMBERED.match(line)
        if m is None:
            whole = False  # a note: more lines, or only the first bytes read
            continue
        text = line[m.end():]
        if "[... line clipped:" in text:
            whole = False
        lines.append(text)
    return "\n".join(lines) + ("\n" if lines else ""), whole
