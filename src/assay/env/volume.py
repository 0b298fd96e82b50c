"""A run's workspace with a disk quota: a size-limited filesystem of its own.

When the harness is root (as on these machines) the workspace is an ext4 filesystem in a
sparse image file beside it (`<run>/.workspace.ext4`, exactly the quota in size), loop-
mounted at the workspace folder with nosuid,nodev for the run. Anything that writes there
(the agent's commands, the file tools, whatever the agent left running) gets ENOSPC ("No
space left on device") at the quota, so an agent cannot fill the store's disk. It also
makes the workspace the root of its own filesystem: bound into the sandbox, it shows as
`/` in /proc/self/mountinfo instead of the host path of the run folder.

`release()` at the end of the run copies the workspace out into a plain folder at the same
path (`assay.fs.copying.copy_tree`, capped), unmounts and deletes the image, so `assay show` and
the web app read it as before. If the harness dies first, the lifeline unmounts it; the
data stays in the image.

Fallback ("checked", when the harness is not root or the image cannot be mounted): the
workspace is a plain folder and the quota is a checked budget: the file tools refuse a
write that would pass it, and after every command the sandbox measures the workspace and
says so when it is over. One command can pass the quota before the check (up to the
sandbox's file-size limit per file); docs/user-guide.md, "Sandbox limits", says so.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
from pathlib import Path

from assay.env import lifeline
from assay.errors import HarnessError
from assay.fs.copying import CopyLimits, CopyReport, copy_tree
from assay.fs.writes import QuotaError

__all__ = ["WorkspaceVolume", "tree_bytes"]

MiB = 1024**2
_FULL_MARGIN = MiB  # "full" when less than this is left
_ENOSPC_TEXT = "No space left on device"


def tree_bytes(root: Path, limit_entries: int = 200_000, max_depth: int = 256) -> int:
    """Disk blocks in use below `root` (bytes), links not followed, special files counted as
    their blocks; the walk stops after `limit_entries` entries (an estimate from below)."""
    total = 0
    seen = 0
    stack: list[tuple[int, int]] = []
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return 0
    stack.append((fd, 0))
    try:
        while stack:
            dfd, depth = stack.pop()
            try:
                with os.scandir(dfd) as it:
                    entries = list(it)
                for e in entries:
                    seen += 1
                    if seen > limit_entries:
                        return total
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += st.st_blocks * 512
                    if stat.S_ISDIR(st.st_mode) and depth < max_depth:
                        with contextlib.suppress(OSError):
                            stack.append((os.open(e.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                                                  | os.O_CLOEXEC, dir_fd=dfd), depth + 1))
            finally:
                os.close(dfd)
    finally:
        for dfd, _ in stack:
            os.close(dfd)
    return total


def _run(argv: list[str]) -> None:
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, check=False)
    if p.returncode != 0:
        raise OSError(f"{argv[0]} failed (exit {p.returncode}): {(p.stderr or p.stdout).strip()[:300]}")


class WorkspaceVolume:
    """The disk quota of one run's workspace: `mount` (own filesystem), `checked` (a budget
    measured by the harness) or `none` (no quota asked for)."""

    def __init__(self, path: Path, quota_bytes: int, kind: str, image: Path | None = None) -> None:
        self.path = path
        self.quota_bytes = quota_bytes
        self.kind = kind
        self.image = image
        self.quota_hit = False  # the workspace was found full (or over) at least once
        self.fallback_reason: str | None = None

    @classmethod
    def create(cls, path: Path, quota_bytes: int) -> WorkspaceVolume:
        """Make the (empty) workspace folder `path` with its quota."""
        path = Path(path)
        path.mkdir(parents=True)
        if quota_bytes <= 0:
            return cls(path, 0, "none")
        why = cls._mount_unavailable()
        if why is None:
            image = path.parent / f".{path.name}.ext4"
            try:
                cls._make_and_mount(image, path, quota_bytes)
                return cls(path, quota_bytes, "mount", image)
            except (OSError, subprocess.SubprocessError) as e:
                with contextlib.suppress(OSError):
                    image.unlink()
                why = str(e)
        vol = cls(path, quota_bytes, "checked")
        vol.fallback_reason = why
        return vol

    @staticmethod
    def _mount_unavailable() -> str | None:
        if os.geteuid() != 0:
            return "the harness is not root (mounting needs it)"
        for tool in ("mkfs.ext4", "mount", "umount"):
            if shutil.which(tool) is None and not os.path.exists(f"/usr/sbin/{tool}"):
                return f"{tool} is not installed"
        if not os.path.exists("/dev/loop-control"):
            return "no loop devices (/dev/loop-control)"
        return None

    @staticmethod
    def _make_and_mount(image: Path, path: Path, quota_bytes: int) -> None:
        fd = os.open(image, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fd, quota_bytes)  # sparse: the disk holds only what is written
        finally:
            os.close(fd)
        mkfs = shutil.which("mkfs.ext4") or "/usr/sbin/mkfs.ext4"
        _run([mkfs, "-q", "-F", "-m", "0", "-O", "^has_journal", "-E", "nodiscard", "-i", "8192", str(image)])
        lifeline.keep("mount", str(path))
        try:
            _run([shutil.which("mount") or "/usr/bin/mount", "-t", "ext4", "-o",
                  "loop,nosuid,nodev,noatime,noinit_itable", str(image), str(path)])
        except OSError:
            lifeline.drop("mount", str(path))
            raise
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(path / "lost+found")

    # ------------------------------------------------------------------ measuring

    def used_bytes(self) -> int:
        if self.kind == "mount":
            st = os.statvfs(self.path)
            return (st.f_blocks - st.f_bfree) * st.f_frsize
        return tree_bytes(self.path)

    def free_bytes(self) -> int:
        """What can still be written (0 when full or over)."""
        if self.kind == "none":
            return 1 << 62
        if self.kind == "mount":
            st = os.statvfs(self.path)
            return st.f_bavail * st.f_frsize
        return max(0, self.quota_bytes - self.used_bytes())

    def check_write(self, size: int, replaced: int = 0) -> None:
        """Refuse (OSError ENOSPC-like, as QuotaError) a file-tool write of `size` bytes
        replacing a file of `replaced` bytes, when it would pass the quota."""
        if self.kind == "none":
            return
        if size - replaced > self.free_bytes():
            self.quota_hit = True
            raise QuotaError(f"refused: writing {size} bytes would pass the workspace's disk quota of "
                             f"{self.quota_bytes} bytes ({self.free_bytes()} bytes free)")

    def after_command(self, output: str) -> str | None:
        """A note for the agent when the quota was hit by the command just run, else None."""
        if self.kind == "none":
            return None
        free = self.free_bytes()
        full = free < _FULL_MARGIN
        if full or (self.kind == "mount" and _ENOSPC_TEXT in output):
            self.quota_hit = True
            return (f"[note: the workspace has a disk quota of {self.quota_bytes // MiB} MiB "
                    f"({free // MiB} MiB free now); writes past it fail with 'No space left on device'"
                    + ("; delete files to go on" if full else "") + "]")
        return None

    def describe(self) -> str:
        if self.kind == "none":
            return "no workspace quota"
        how = {"mount": "own filesystem", "checked": "checked budget"}[self.kind]
        text = f"workspace quota {self.quota_bytes // MiB} MiB ({how})"
        return text + (f"; no mount: {self.fallback_reason}" if self.fallback_reason else "")

    # ------------------------------------------------------------------ the end

    def release(self, keep_data: bool = True, limits: CopyLimits | None = None) -> CopyReport | None:
        """Turn the workspace back into a plain folder (its content copied out when
        `keep_data`), unmount it, delete the image. Idempotent. None when nothing was copied."""
        if self.kind != "mount" or self.image is None:
            return None
        report = None
        out = self.path.parent / f".{self.path.name}.out"
        if keep_data:
            shutil.rmtree(out, ignore_errors=True)
            # The volume holds at most its quota, so copying it out is capped by the quota (not the
            # default 4 GiB): sparse files, whose size is not their blocks, cannot blow it up on
            # the host disk; what is left out is recorded.
            lim = limits or CopyLimits(on_limit="skip", max_bytes=self.quota_bytes)
            report = copy_tree(self.path, out, limits=lim)
        self._unmount()
        lifeline.drop("mount", str(self.path))
        try:
            os.rmdir(self.path)
        except OSError as e:
            raise HarnessError(f"workspace {self.path}: still not empty after unmounting ({e.strerror})") from None
        if keep_data:
            os.replace(out, self.path)
        else:
            self.path.mkdir()
        with contextlib.suppress(FileNotFoundError):
            self.image.unlink()
        self.image = None
        return report

    def _unmount(self) -> None:
        umount = shutil.which("umount") or "/usr/bin/umount"
        try:
            _run([umount, str(self.path)])
        except OSError:
            # still busy (a process of the run that escaped its kill?): detach it lazily
            _run([umount, "-l", str(self.path)])
