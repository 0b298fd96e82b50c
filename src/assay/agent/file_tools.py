"""The agent's file tools as the agent sees them: `read_file`, `edit_file`, `list_files`.

Built on the primitives of `assay.fs`: every path is checked (`assay.fs.paths`), resolved
inside the workspace and walked without following a link; files are opened without
following a link or blocking (`assay.fs.reads`) and written as new inodes renamed into place
(`assay.fs.writes`, whose `write_file` is the `write_file` tool). What is here is what the
agent reads back: numbered lines clipped so one huge line or file cannot flood its context
(`read_file`), images by their content (`read_image`), a listing with escaped names
(`list_files`), and the limits of a file written or edited through the tools
(FILE_TOOL_MAX_BYTES, checked before any of it is built in memory).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from assay.fs.paths import open_dirs, open_subdir, resolved_parts
from assay.fs.reads import LIST_MAX_DEPTH, open_in_workspace
from assay.fs.writes import QuotaError, replace_file

__all__ = ["FILE_TOOL_MAX_BYTES", "IMAGE_MAX_BYTES", "MAX_LINE_CHARS", "READ_FILE_MAX_BYTES", "edit_file",
           "image_media_type", "list_files", "read_file", "read_image"]


FILE_TOOL_MAX_BYTES = 64 * 1024**2
"""Largest file `write_file` / `edit_file` write (or `edit_file` reads): 64 MiB. Commands in
the sandbox may write larger files, up to the sandbox's file-size limit."""


MAX_LINE_CHARS = 2000
"""Longer lines are clipped in read_file so one minified line cannot flood the context."""


READ_FILE_MAX_BYTES = 64 * 1024 * 1024
"""read_file reads at most this much of a file (its lines past it are not counted)."""


_BINARY_SNIFF_BYTES = 8192


def _looks_binary(head: bytes) -> bool:
    if b"\x00" in head:
        return True
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        # A multi-byte character cut by the sniff window is fine; anything else is not text.
        return e.start < len(head) - 3 or len(head) < _BINARY_SNIFF_BYTES
    return False


IMAGE_MAX_BYTES = 5 * 1024**2
"""Largest image `read_image` returns (Anthropic's per-image limit; OpenAI's is larger)."""


def image_media_type(head: bytes) -> str | None:
    """The media type of an image a model can take (PNG, JPEG, GIF, WebP), from its first bytes."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None


def read_image(workspace: Path, rel: str, max_bytes: int = IMAGE_MAX_BYTES) -> tuple[str, int, bytes | None] | None:
    """(media type, size, bytes) when workspace/rel is an image by its content, the bytes None
    when it is over `max_bytes`; None when it is not an image. Opened as `read_file` opens."""
    with open_in_workspace(workspace, rel) as (fd, st):
        kind = image_media_type(os.pread(fd, 16, 0))
        if kind is None:
            return None
        if st.st_size > max_bytes:
            return kind, st.st_size, None
        data = os.pread(fd, max_bytes + 1, 0)
        return (kind, len(data), None) if len(data) > max_bytes else (kind, len(data), data)


def read_file(workspace: Path, rel: str, offset: int = 0, limit: int = 400) -> str:
    """Lines [offset, offset+limit) of a text file, numbered from 1, plus what remains."""
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    with open_in_workspace(workspace, rel) as (fd, st):
        head = os.pread(fd, _BINARY_SNIFF_BYTES, 0)
        if _looks_binary(head):
            return f"[{rel} is a binary file ({st.st_size} bytes); not shown as text]"
        out: list[str] = []
        total = 0
        cut = st.st_size > READ_FILE_MAX_BYTES
        with os.fdopen(os.dup(fd), "rb") as f:
            # Lines are read at most MAX_LINE_CHARS * 4 bytes at a time and only the first
            # READ_FILE_MAX_BYTES of the file: one huge line or file cannot take the memory.
            for i, (raw, skipped) in enumerate(_capped_lines(f, READ_FILE_MAX_BYTES, MAX_LINE_CHARS * 4)):
                total = i + 1
                if offset <= i < offset + limit:
                    line = raw.rstrip(b"\n").rstrip(b"\r").decode("utf-8", errors="replace")
                    if len(line) > MAX_LINE_CHARS or skipped:
                        more = f"{len(line) - MAX_LINE_CHARS} more characters" if not skipped else \
                            f"{len(line) - MAX_LINE_CHARS} more characters and {skipped} more bytes"
                        line = line[:MAX_LINE_CHARS] + f" [... line clipped: {more}]"
                    out.append(f"{i + 1:>5}\t{line}")
    if total == 0:
        return f"[{rel} is empty]"
    note = (f"[only the first {READ_FILE_MAX_BYTES} of {st.st_size} bytes are read; use run_command "
            "(head, tail, grep) for the rest]") if cut else ""
    if offset >= total:
        return f"[offset {offset} is past the end: {rel} has {total} lines{' read' if cut else ''}]" + \
            (f"\n{note}" if note else "")
    remaining = total - (offset + limit)
    if remaining > 0:
        out.append(f"[{remaining} more lines; continue with offset={offset + limit}]")
    if note:
        out.append(note)
    return "\n".join(out)


def _capped_lines(f: Any, max_bytes: int, max_line: int) -> Iterator[tuple[bytes, int]]:
    """(line, bytes of it skipped) for the file's lines within its first `max_bytes`, each cut
    to `max_line` bytes: the rest of a longer line is skipped, never held in memory."""
    left = max_bytes
    while left > 0:
        line = f.readline(min(max_line, left))
        if not line:
            return
        left -= len(line)
        skipped = 0
        if not line.endswith(b"\n") and len(line) == max_line:  # a longer line: skip to its end
            while left > 0:
                rest = f.readline(min(1 << 20, left))
                left -= len(rest)
                skipped += len(rest.rstrip(b"\n"))
                if not rest or rest.endswith(b"\n"):
                    break
        yield line, skipped


def edit_file(workspace: Path, rel: str, old_text: str, new_text: str, replace_all: bool = False,
              owner: int | None = None, *, max_bytes: int = FILE_TOOL_MAX_BYTES,
              room: Callable[[int, int], None] | None = None) -> str:
    """Replace old_text by new_text; it must occur exactly once unless replace_all. A file over
    `max_bytes`, or an edit whose result would be, is refused before the result is built."""
    if old_text == "":
        raise ValueError("old_text is empty: give the exact text to replace")
    with open_in_workspace(workspace, rel) as (fd, st):
        if st.st_size > max_bytes:
            raise QuotaError(f"{rel}: refused: {st.st_size} bytes is over the file tools' limit of {max_bytes} "
                             "bytes (edit it with a command)")
        with os.fdopen(os.dup(fd), "rb") as f:
            raw = f.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise QuotaError(f"{rel}: refused: over the file tools' limit of {max_bytes} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{rel} is not UTF-8 text; it cannot be edited") from None
    count = text.count(old_text)
    if count == 0:
        raise ValueError(f"old_text not found in {rel} (it must match exactly, including whitespace)")
    if count > 1 and not replace_all:
        raise ValueError(f"old_text occurs {count} times in {rel}: add surrounding text to make it "
                         "unique, or set replace_all")
    done = count if replace_all else 1
    # UTF-8 matches fall on character boundaries: the byte count of the result is exact.
    size = len(raw) + done * (len(new_text.encode("utf-8")) - len(old_text.encode("utf-8")))
    if size > max_bytes:
        raise QuotaError(f"{rel}: refused: the edit would make the file {size} bytes, over the file tools' "
                         f"limit of {max_bytes} bytes")
    if room is not None:
        room(size, len(raw))
    new = text.replace(old_text, new_text) if replace_all else text.replace(old_text, new_text, 1)
    replace_file(workspace, rel, new.encode("utf-8"), owner)
    return f"edited {rel}: replaced {done} occurrence{'s' if done != 1 else ''}"


def list_files(workspace: Path, rel: str = ".", max_entries: int = 2000, max_depth: int = LIST_MAX_DEPTH, *,
               show_name: Callable[[str], str] | None = None) -> str:
    """Recursive listing: 'dir/', 'file (N bytes)', 'link -> target' (links are not followed),
    at most `max_entries` lines and `max_depth` levels below `rel`.

    Names are the agent's: a newline in one would read as two entries, an escape sequence or a
    bidi override would forge or hide what follows. `show_name` writes each path and link
    target as shown (the tool box passes `assay.record.escape_controls`); a closing note says
    how many it changed."""
    show = show_name or (lambda text: text)
    root, parts = resolved_parts(workspace, rel)
    fd = open_dirs(root, parts, rel)
    prefix = "" if not parts else "/".join(parts) + "/"
    lines: list[str] = []
    truncated = False
    too_deep = False
    escaped = 0

    def shown(text: str) -> str:
        nonlocal escaped
        out = show(text)
        escaped += out != text
        return out

    def walk(dfd: int, pre: str, depth: int = 0) -> None:
        nonlocal truncated, too_deep
        with os.scandir(dfd) as it:
            entries = sorted(it, key=lambda e: e.name)
        for e in entries:
            if len(lines) >= max_entries:
                truncated = True
                return
            path = shown(pre + e.name)
            if e.is_symlink():
                lines.append(f"{path} -> {shown(os.readlink(e.name, dir_fd=dfd))}")
            elif e.is_dir(follow_symlinks=False):
                lines.append(path + "/")
                if depth + 1 >= max_depth:
                    too_deep = True
                    continue
                with open_subdir(dfd, e.name) as sub:
                    if sub is not None:  # else vanished or replaced meanwhile: list what is there
                        walk(sub, pre + e.name + "/", depth + 1)
                if truncated:
                    return
            else:
                st = e.stat(follow_symlinks=False)
                kind = f"{st.st_size} bytes" if stat.S_ISREG(st.st_mode) else "special file"
                lines.append(f"{path} ({kind})")

    try:
        walk(fd, prefix)
    finally:
        os.close(fd)
    if not lines:
        return f"[{show(rel)} is empty]"
    if escaped:
        lines.append(f"[{escaped} path{'s' if escaped != 1 else ''} with control characters shown escaped: "
                     "\\n is a newline, \\t a tab, \\xNN and \\uNNNN other characters]")
    if truncated:
        lines.append(f"[listing truncated after {max_entries} entries; list a subdirectory to see more]")
    if too_deep:
        lines.append(f"[folders deeper than {max_depth} levels are not listed; list a subdirectory to see more]")
    return "\n".join(lines)
