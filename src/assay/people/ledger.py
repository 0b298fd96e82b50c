"""The signed question log: `logs/ask.jsonl` in the workspace, HMAC-chained.

Every stakeholder event (a message, a wait, an inbox read, a pilot day) is one JSON line
`{ts, at, to, question, topics, facts, n_asked, cost, mac}` appended to `logs/ask.jsonl` in
the workspace, where the agent can read its own log as upstream's can. Each line's `mac` is

    HMAC-SHA256(key, previous mac + canonical(line)),
    canonical(line) = json.dumps(line without mac, sort_keys=True, ensure_ascii=False), escaped

(the first line chains from the empty string). The key, the line count and the last mac
never enter the workspace: they live in this object (which also keeps every entry in
memory) and, when `head_path` is given, in a file of the run directory (mode 0600,
replaced atomically after every append), so a ledger can be re-opened by another process.

`verify()` re-reads the workspace log and reports every integrity problem as a message:
lines missing, added, edited, reordered, not JSON or with a bad mac, and a count or last-mac
mismatch with the ledger. Any message is an integrity incident for the run. The log is read
without following a link and without blocking on a FIFO (the agent owns the workspace and can
put anything at that path), at most `MAX_LOG_BYTES` of it, and at most `MAX_PROBLEMS`
messages are reported (then one line with the count of the rest), so a planted log can
neither exhaust the harness nor flood the run's record.

Text that is not valid Unicode (a lone surrogate, from a JSON `\\ud800` escape or from bytes
that were not UTF-8) is stored escaped: each lone surrogate becomes the six characters
`\\udXXX` (`assay.record.safe_text`). `canonical()` applies that escape to every string of a line, so
the signed form, the line written to the log and the trusted copy are one text, valid UTF-8,
and a forged line carrying a surrogate is reported like any other forgery instead of crashing
the HMAC's encoding.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay.fs.paths import PathError
from assay.fs.reads import entry_kind, read_workspace_file

__all__ = ["LOG_RELPATH", "MAX_LOG_BYTES", "MAX_PROBLEMS", "Ledger", "canonical", "line_mac"]

LOG_RELPATH = "logs/ask.jsonl"
MAX_LOG_BYTES = 64 * 1024 * 1024
MAX_PROBLEMS = 50

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def canonical(rec: dict[str, Any]) -> str:
    """The signed form of a line: its JSON with sorted keys, without the mac, every string escaped
    as `assay.record.safe_text` does (in JSON text a lone surrogate stands only inside a string, where its
    escape's backslash is written as `\\\\`)."""
    text = json.dumps({k: v for k, v in rec.items() if k != "mac"}, ensure_ascii=False, sort_keys=True)
    return _LONE_SURROGATE.sub(lambda m: f"\\\\u{ord(m.group()):04x}", text)


def line_mac(key: bytes, prev_mac: str, rec: dict[str, Any]) -> str:
    return _mac(key, prev_mac, canonical(rec))


def _mac(key: bytes, prev_mac: str, signed: str) -> str:
    return hmac.new(key, (prev_mac + signed).encode("utf-8"), hashlib.sha256).hexdigest()


def _describe(rec: dict[str, Any]) -> str:
    def short(v: Any) -> str:  # agent-written lines may hold anything: never a long or deep repr
        if v is None or isinstance(v, bool | int | float):
            return repr(v)[:40]
        if not isinstance(v, str):
            return f"<{type(v).__name__}>"
        return repr(v if len(v) <= 40 else v[:37] + "...")
    return f"to={short(rec.get('to'))} at={short(rec.get('at'))} question={short(rec.get('question', ''))}"


@dataclass(frozen=True)
class _LogText:
    """The question log's text, read a line at a time (`str.splitlines` made a list of them all)."""

    text: str

    def lines(self) -> Iterator[str]:
        pos, end = 0, len(self.text)
        while pos < end:
            stop = self.text.find("\n", pos)
            if stop < 0:
                yield self.text[pos:]
                return
            yield self.text[pos:stop]
            pos = stop + 1

    def count(self) -> int:
        """How many lines `lines` yields."""
        return self.text.count("\n") + (1 if self.text and not self.text.endswith("\n") else 0)


class Ledger:
    """Appends signed lines to the workspace log and keeps the trusted copy outside it."""

    def __init__(self, log_path: str | Path, *, key: bytes | None = None,
                 head_path: str | Path | None = None, root: str | Path | None = None,
                 on_append: Callable[[dict[str, Any]], None] | None = None) -> None:
        """`on_append(line)` is called with each line as written (mac included), e.g. to mirror
        every stakeholder event into the run's transcript."""
        self.on_append = on_append
        self.log_path = Path(log_path)
        # The trusted directory the log lives under (the workspace): the components below it
        # are opened without following symlinks, so a planted `logs -> /etc` goes nowhere.
        self.root = Path(root) if root is not None else self.log_path.parent
        self._rel = self.log_path.relative_to(self.root).parts if root is not None else (self.log_path.name,)
        self.head_path = Path(head_path) if head_path is not None else None
        self._lock = threading.Lock()
        self.entries: list[dict[str, Any]] = []  # trusted copies, mac included
        self.count = 0
        self.last_mac = ""
        if key is None and self.head_path is not None and self.head_path.exists():
            head = json.loads(self.head_path.read_text(encoding="utf-8"))
            key = bytes.fromhex(head["key"])
            self.count, self.last_mac = int(head["n"]), str(head["mac"])
        self.key: bytes = key if key is not None else secrets.token_bytes(32)
        if len(self.key) < 16:
            raise ValueError("ledger key must be at least 16 bytes")
        if self.head_path is not None and not self.head_path.exists():
            self._write_head()

    @classmethod
    def for_workspace(cls, workspace: str | Path, run_dir: str | Path, *, key: bytes | None = None,
                      on_append: Callable[[dict[str, Any]], None] | None = None) -> Ledger:
        """The ledger of a run: log at <workspace>/logs/ask.jsonl, head at <run_dir>/ask.ledger.json."""
        return cls(Path(workspace) / LOG_RELPATH, key=key, head_path=Path(run_dir) / "ask.ledger.json",
                   root=workspace, on_append=on_append)

    # ------------------------------------------------------------------ writing

    def _write_head(self) -> None:
        assert self.head_path is not None
        self.head_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.head_path.with_name(self.head_path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"key": self.key.hex(), "n": self.count, "mac": self.last_mac}, f)
        os.replace(tmp, self.head_path)

    def append(self, rec: dict[str, Any]) -> dict[str, Any]:
        """Sign and append one event; returns the line as written (mac included)."""
        with self._lock:
            signed = canonical(rec)
            mac = _mac(self.key, self.last_mac, signed)
            line = dict(json.loads(signed), mac=mac)  # the escaped form, a copy of the caller's record
            text = json.dumps(line, ensure_ascii=False, sort_keys=True)
            fd = self._open_append()
            if fd >= 0:
                with os.fdopen(fd, "a", encoding="utf-8") as f:
                    f.write(text + "\n")
            self.entries.append(json.loads(text))
            self.count += 1
            self.last_mac = mac
            if self.head_path is not None:
                self._write_head()
        if self.on_append is not None:
            self.on_append(line)
        return line

    def _open_append(self) -> int:
        """An O_APPEND fd on the log, every component below the root opened with O_NOFOLLOW.

        -1 when the agent broke the path (a symlink, a file where a directory should be, a FIFO,
        device or hard link in the log's place): the trusted copy is kept all the same, and
        verify() reports the missing lines. Never blocks.
        """
        nofollow = getattr(os, "O_NOFOLLOW", 0)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            dfd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return -1
        try:
            for part in self._rel[:-1]:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=dfd)
                nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | nofollow, dir_fd=dfd)
                os.close(dfd)
                dfd = nfd
            # O_NONBLOCK: a FIFO the agent put in the log's place must not stall the harness (with
            # no reader the open fails; with one, it is refused below, never written to).
            fd = os.open(self._rel[-1], os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK | nofollow, 0o644,
                         dir_fd=dfd)
        except OSError:
            return -1
        finally:
            os.close(dfd)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:  # a special file, or a hard link elsewhere
            os.close(fd)
            return -1
        return fd

    # ------------------------------------------------------------------ checking

    def verify(self, workspace_log_path: str | Path | None = None) -> list[str]:
        """Integrity problems of the workspace log against this ledger; [] when intact (at most
        `MAX_PROBLEMS` messages, then one that counts the rest)."""
        path = Path(workspace_log_path) if workspace_log_path is not None else self.log_path
        with self._lock:
            entries = list(self.entries)
            count, last = self.count, self.last_mac
        text = self._read_log(path, count)
        if text is None:
            return [f"question log {path.name} was removed ({count} signed lines missing)"] if count else []
        if not isinstance(text, _LogText):
            return [text]
        return self._check(text, entries, count, last)

    def _read_log(self, path: Path, count: int) -> _LogText | str | None:
        """The log's lines; None when there is no log; a message when it cannot be trusted. The
        log lives in the agent's workspace: never read through a link, never blocking on a FIFO
        or device, at most MAX_LOG_BYTES; a log that is not a plain file is itself the problem."""
        root, rel = (self.root, "/".join(self._rel)) if path == self.log_path else (path.parent, path.name)
        try:
            kind = entry_kind(root, rel)
            if kind is None:
                return None
            if kind != "file":
                return (f"question log {path.name} cannot be read safely: it was replaced by a {kind} "
                        f"({count} signed lines not verifiable)")
            data = read_workspace_file(root, rel, MAX_LOG_BYTES)
        except (OSError, PathError) as exc:
            return f"question log {path.name} cannot be read safely: {exc}"
        return _LogText(data.decode("utf-8", errors="replace"))

    def _check(self, log: _LogText, entries: list[dict[str, Any]], count: int, last: str) -> list[str]:
        """The log's problems, line by line until MAX_PROBLEMS are found: then the lines left are
        counted, not read (16 MiB of forged lines once took seconds of the event loop, and 64 MiB
        of blank ones a problem message each)."""
        problems: list[str] = []
        by_mac = {e["mac"]: i for i, e in enumerate(entries)}
        seen: list[int] = []
        prev = ""
        n = 0
        for n, text in enumerate(log.lines(), 1):
            if len(problems) >= MAX_PROBLEMS:
                rest = log.count() - n + 1
                return [*problems, f"... and {rest} more line(s) of the question log not checked"]
            try:
                problem, mac = self._check_line(n, text, prev, entries, by_mac, seen)
            except (ValueError, RecursionError, TypeError):  # too deep to compare or sign, a number past the digit limit
                problem, mac = f"line {n}: not a line the stakeholder service wrote (unreadable JSON)", None
            if problem:
                problems.append(problem)
            if mac is not None:
                prev = mac
        lines = n
        if entries:
            present = set(seen)
            for k, e in enumerate(entries):
                if k not in present:
                    problems.append(f"entry {k + 1} missing from the question log ({_describe(e)})")
            dups = len(seen) - len(present)
            if dups:
                problems.append(f"{dups} signed line(s) duplicated in the question log")
        if lines != count:
            problems.append(f"count mismatch: the question log has {lines} line(s), the ledger recorded {count}")
        if prev != last and not (not lines and not last):
            problems.append("last mac mismatch: the question log does not end where the ledger does")
        if len(problems) > MAX_PROBLEMS:
            problems = [*problems[:MAX_PROBLEMS], f"... and {len(problems) - MAX_PROBLEMS} more problem(s)"]
        return problems

    def _check_line(self, n: int, text: str, prev: str, entries: list[dict[str, Any]],
                    by_mac: dict[str, int], seen: list[int]) -> tuple[str | None, str | None]:
        """(the problem of line n or None, its mac when it has one, for the next line's chain)."""
        if not text.strip():
            return f"line {n}: blank line added to the question log", None
        try:
            rec = json.loads(text)
        except json.JSONDecodeError:
            return f"line {n}: not JSON (edited or added)", None
        if not isinstance(rec, dict):
            return f"line {n}: not a JSON object (edited or added)", None
        mac = rec.get("mac")
        if not isinstance(mac, str):
            return f"line {n}: no mac: a line the stakeholder service did not write", None
        signed = canonical(rec)
        ok = mac.isascii() and hmac.compare_digest(mac, _mac(self.key, prev, signed))
        k = by_mac.get(mac)
        if k is None:
            return (None if ok else f"line {n}: bad mac: forged or edited line ({_describe(rec)})"), mac
        seen.append(k)
        if canonical(entries[k]) != signed:
            changed = sorted(f for f in set(entries[k]) | set(rec) if f != "mac" and entries[k].get(f) != rec.get(f))
            return (f"line {n}: edited (entry {k + 1}, {_describe(entries[k])}; "
                    f"changed: {', '.join(changed)})"), mac
        if not ok:
            expected = seen[-2] + 1 if len(seen) >= 2 else 0
            return (f"line {n}: out of place: it is entry {k + 1} of the ledger, "
                    f"expected entry {expected + 1} (lines reordered or removed)"), mac
        return None, mac

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.head_path is not None:
                self._write_head()
