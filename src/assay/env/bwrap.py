"""The bubblewrap command line every sandbox shares, and whether bwrap can build it here.

A read-only view of the host system (`system_layout`: /usr and friends, /usr/local hidden),
size-limited RAM mounts (`ram_mounts`: /tmp and /dev/shm), and / and /dev remounted
read-only last (`READ_ONLY_ROOT`). `bwrap_available` probes once per process, as an
unprivileged uid when we are root, whether unprivileged user namespaces let bwrap build that.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess

from assay.env.limits import Limits, MiB

__all__ = ["INSIDE_UID", "READ_ONLY_ROOT", "bwrap_available", "ram_mounts", "system_layout"]

INSIDE_UID = 1000
"""The uid/gid the command sees inside the isolated sandbox (mapped to the dedicated host uid)."""


def system_layout() -> list[str]:
    """bwrap arguments giving a read-only view of the host system (/usr and friends)."""
    args = ["--ro-bind", "/usr", "/usr",
            # /usr/local holds host-specific tools and Python hooks: hide it behind an empty dir.
            "--tmpfs", "/usr/local", "--remount-ro", "/usr/local"]
    for d in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = "/" + d
        if os.path.islink(host):
            args += ["--symlink", os.readlink(host), host]
        elif os.path.isdir(host):
            args += ["--ro-bind", host, host]
    args += ["--ro-bind-try", "/etc/alternatives", "/etc/alternatives",
             "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache",
             "--ro-bind-try", "/etc/nsswitch.conf", "/etc/nsswitch.conf",
             "--ro-bind-try", "/etc/localtime", "/etc/localtime"]
    return args


def ram_mounts(limits: Limits) -> list[str]:
    """bwrap arguments for the writable RAM-backed mounts, each a size-limited tmpfs (after
    `--dev /dev`, before any bind under /tmp)."""
    return ["--size", str(limits.shm_bytes), "--tmpfs", "/dev/shm", "--size", str(limits.tmp_bytes), "--tmpfs", "/tmp"]


READ_ONLY_ROOT = ("--remount-ro", "/dev", "--remount-ro", "/")
"""bwrap arguments, last among the mounts: bwrap's own root and /dev (tmpfs without a size
limit, owned by the sandbox user) become read-only; the mounts on them stay as they are."""


def _probe_argv(bwrap: str) -> list[str]:
    return [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL",
            "--die-with-parent", "--new-session", *system_layout(),
            "--proc", "/proc", "--dev", "/dev", "--size", str(MiB), "--tmpfs", "/tmp",
            "--clearenv", "--", "/usr/bin/true"]


@functools.cache
def bwrap_available() -> bool:
    """bwrap is installed and can really build our sandbox here (unprivileged user namespaces).

    Probed once per process, as an unprivileged uid when we are root, because that is how
    every real command starts it.
    """
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return False
    kw: dict[str, object] = {}
    if os.geteuid() == 0:
        kw = {"user": 65534, "group": 65534, "extra_groups": []}
    try:
        r = subprocess.run(_probe_argv(bwrap), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin"}, cwd="/",
                           timeout=20, **kw)  # type: ignore[call-overload]
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0
