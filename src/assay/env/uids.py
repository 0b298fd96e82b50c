"""A fresh unprivileged host uid per run, unique across concurrent assay processes.

When the harness runs as root, bwrap itself is started as a dedicated unprivileged host uid,
with the workspace chowned to it (`assay.env.sandbox`). The uids are handed out here: a
counter under a flock-ed lock file, and a lease per uid naming its holder process, in a
directory only we can write. A uid still used by a process, or known to passwd/group, is
never handed out; `uid_processes` finds what a uid still runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import os
import pwd
import stat
import tempfile
from pathlib import Path

from assay.errors import HarnessError

__all__ = ["UID_BASE", "UID_RANGE", "allocate_uid", "release_uid", "uid_processes"]

UID_BASE = 200_000
"""First host uid handed to sandboxes: far above regular users, below typical subuid ranges' ends."""
UID_RANGE = 1_000_000


def _lease_dir() -> Path:
    """A directory only we can write, holding the uid counter and one lease file per uid."""
    euid = os.geteuid()
    if euid == 0 and os.access("/run", os.W_OK):
        d = Path("/run/assay-uids")
    else:
        d = Path(tempfile.gettempdir()) / f"assay-uids-{euid}"
    with contextlib.suppress(FileExistsError):
        os.mkdir(d, 0o700)
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != euid or st.st_mode & 0o022:
        raise HarnessError(f"uid lease directory {d} is not a private directory of uid {euid}")
    return d


def _proc_start_time(pid: int) -> str | None:
    """The kernel start time of pid (field 22 of /proc/pid/stat), to tell pid reuse apart."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data.rsplit(b")", 1)[1].split()[19].decode()


def _lease_alive(text: str) -> bool:
    try:
        pid_s, start = text.split()
        return _proc_start_time(int(pid_s)) == start
    except ValueError:
        return False


def uid_processes(uid: int) -> list[int]:
    """Pids of live host processes whose real, effective or saved uid is `uid`.

    Zombies are left out: they run nothing. (bwrap's pid-namespace init is reparented to the
    host's pid 1 after the command ends and stays a zombie until that init reaps it.)
    """
    key = str(uid).encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"State:") and line.split()[1] in (b"Z", b"X"):
                        break
                    if line.startswith(b"Uid:"):
                        if key in line.split()[1:4]:
                            found.append(int(name))
                        break
        except OSError:
            continue
    return found


def _uid_in_use(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        pass
    try:
        grp.getgrgid(uid)
        return True
    except KeyError:
        pass
    return bool(uid_processes(uid))


def allocate_uid() -> int:
    """A fresh unprivileged host uid for one run, unique across concurrent assay processes.

    A counter under a flock-ed lock file hands out uids from UID_BASE on; each handed-out uid
    gets a lease naming the holder process (pid + start time). A uid is skipped while its
    lease holder lives, while any process still runs as it, or if passwd/group know it.
    """
    d = _lease_dir()
    me = f"{os.getpid()} {_proc_start_time(os.getpid())}"
    with open(d / "lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            nxt = int((d / "next").read_text().strip())
        except (OSError, ValueError):
            nxt = UID_BASE
        for step in range(UID_RANGE):
            cand = UID_BASE + (nxt - UID_BASE + step) % UID_RANGE
            lease = d / str(cand)
            try:
                if _lease_alive(lease.read_text()):
                    continue
            except OSError:
                pass
            if _uid_in_use(cand):
                continue
            lease.write_text(me)
            (d / "next").write_text(str(cand + 1))
            return cand
    raise HarnessError("no free sandbox uid left")


def release_uid(uid: int) -> None:
    """Give a uid from allocate_uid back (only a lease this process holds is removed)."""
    lease = _lease_dir() / str(uid)
    with contextlib.suppress(OSError):
        if lease.read_text().split()[0] == str(os.getpid()):
            lease.unlink()
