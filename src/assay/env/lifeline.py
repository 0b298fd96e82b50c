"""What dies with the harness: a small watchdog that cleans up after a `kill -9` of assay.

Sandboxed commands already die with the harness (bwrap's --die-with-parent and a parent-
death signal). Other helpers do not: the grading worker and a case's services run in
sessions of their own (`start_new_session`), and PR_SET_PDEATHSIG would fire when the
*thread* that started them exits (the grading worker is started from an asyncio worker
thread), not when the harness dies. The lifeline handles them all, and what is not a
process at all:

* the harness starts one watchdog process per harness process (lazily, on first `keep`):
  `python -m assay.env.lifeline`, in a session of its own, reading lines on a pipe whose
  only writer is the harness;
* the harness registers what must not outlive it (`keep`) and unregisters it when it has
  cleaned it up itself (`drop`): a process group (with the leader's start time, so a
  recycled pid is never signalled), a mount (the run's workspace volume), a cgroup folder,
  a temporary folder (socket folders);
* when the pipe reaches end of file (the harness exited, however it died), the watchdog
  SIGKILLs the registered process groups, lazily unmounts the mounts, removes the cgroup
  folders and the temporary folders, and exits.

A normal exit has dropped everything first, so the watchdog then just exits.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

__all__ = ["drop", "keep", "keep_group", "drop_group"]

_lock = threading.Lock()
_proc: list[subprocess.Popen[bytes]] = []
KINDS = ("group", "mount", "cgroup", "tree")


def _start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def _send(line: str) -> None:
    with _lock:
        for _attempt in range(2):
            if not _proc or _proc[0].poll() is not None:
                _proc[:] = [subprocess.Popen(
                    [sys.executable, "-I", "-m", "assay.env.lifeline"], stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/", start_new_session=True)]
            stdin = _proc[0].stdin
            assert stdin is not None
            try:
                stdin.write(line.encode("utf-8", "surrogateescape") + b"\n")
                stdin.flush()
                return
            except BrokenPipeError:
                _proc.clear()
        raise OSError("the harness lifeline (assay.env.lifeline) cannot be started")


def keep(kind: str, value: str) -> None:
    """Have `value` (of `kind`: mount, cgroup, tree) cleaned up if the harness dies."""
    if kind not in KINDS or "\n" in value:
        raise ValueError(f"bad lifeline entry {kind!r} {value!r}")
    _send(f"+{kind} {value}")


def drop(kind: str, value: str) -> None:
    """The harness cleaned `value` up itself: forget it."""
    if not _proc:
        return
    _send(f"-{kind} {value}")


def keep_group(pid: int) -> str | None:
    """Have the process group led by `pid` (a `start_new_session` child) killed if the harness
    dies; the entry to give `drop_group` once the harness has ended the group itself (None
    when the process is already gone)."""
    start = _start_time(pid)
    if start is None:
        return None
    entry = f"{pid} {start}"
    keep("group", entry)
    return entry


def drop_group(entry: str | None) -> None:
    if entry is not None:
        drop("group", entry)


# --------------------------------------------------------------------------- the watchdog itself


def _cleanup(entries: dict[str, set[str]]) -> None:
    for value in entries["group"]:
        pid_s, start = value.split(" ", 1)
        if _start_time(int(pid_s)) == start:
            with contextlib.suppress(OSError):
                os.killpg(int(pid_s), signal.SIGKILL)
    for path in entries["mount"]:
        subprocess.run(["umount", "-l", path], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False)
    deadline = time.monotonic() + 5
    pending = set(entries["cgroup"])
    while pending and time.monotonic() < deadline:
        for path in list(pending):
            try:
                os.rmdir(path)
                pending.discard(path)
            except FileNotFoundError:
                pending.discard(path)
            except OSError:
                continue
        if pending:
            time.sleep(0.05)
    for path in entries["tree"]:
        shutil.rmtree(path, ignore_errors=True)


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C for the harness's terminal is not for us
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    entries: dict[str, set[str]] = {k: set() for k in KINDS}
    for raw in sys.stdin.buffer:
        line = raw.decode("utf-8", "surrogateescape").rstrip("\n")
        kind, _, value = line[1:].partition(" ")
        if kind in entries and value and line[:1] in "+-":
            (entries[kind].add if line[:1] == "+" else entries[kind].discard)(value)
    _cleanup(entries)
    return 0


if __name__ == "__main__":
    sys.exit(main())
