"""`sys.executable` while an FDE-Gym grader runs: starts /usr/bin/python3 in a fresh sandbox.

`assay.scenario.grading.write_wrapper` writes a two-line launcher (the harness's own Python,
isolated, calling `main()`) and its configuration beside it (`<launcher>.json`) for each
grade. Whatever the grader starts with `[sys.executable, ...]` (the delivered system) runs
inside bubblewrap as the grade's own unprivileged uid: the workspace copy bound read-write
at its own path, path arguments outside it staged (copied with `assay.fs.copying.copy_tree`) and
bound read-only, a private /tmp, no network, a cleared environment. Its working directory is
the grader's when that lies in the workspace copy or in the grader's own TMPDIR (staged
then), else a private empty folder (/tmp inside the sandbox): never the case folder the grader
runs in, with its held-out data.
Without bubblewrap the interpreter runs unsandboxed as that uid on the staged copies.

Limits (the sandbox's own, from the configuration): size-limited /tmp and /dev/shm, a
read-only / and /dev, the seccomp filter, and the grade's cgroup folders (`cgroup_procs`,
joined before the uid switch) or, where there is none, RLIMIT_AS per process.

When the delivered code has exited (and, without a sandbox, everything its uid still ran
has been killed), every link in the workspace copy that leads out of it and every special
file are removed before control returns to the grader, which reads the copy as root: a
`predictions.json` linked to the held-out labels or to /etc/shadow reads as nothing.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import shlex
import signal
import subprocess
import sys
import tempfile
from typing import Any

from assay.fs.copying import copy_tree, remove_unsafe

SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc", "/dev", "/sys")
KEEP_ENV = ("PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING", "PYTHONHASHSEED", "PYTHONUNBUFFERED")
LIMITS = ((resource.RLIMIT_NPROC, 512), (resource.RLIMIT_FSIZE, 1 << 30), (resource.RLIMIT_CORE, 0))
MEMORY = (resource.RLIMIT_AS, 4 << 30)  # per process, only where the grade has no memory cgroup
KILL = "/usr/bin/kill" if os.path.exists("/usr/bin/kill") else "/bin/kill"


def under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


class Staging:
    """Copies of the path arguments outside the workspace, readable by the grade's uid."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.ws: str = cfg["workspace"]
        self.uid: int | None = cfg["uid"]
        self.root = tempfile.mkdtemp(prefix="call-", dir=cfg["stage_root"])
        os.chmod(self.root, 0o755)
        self.staged: list[tuple[str, str]] = []  # (real path, copy)

    def stage(self, path: str) -> None:
        real = os.path.realpath(path)
        if under(real, self.ws) or real == "/" or any(under(real, s) for s in SYSTEM):
            return
        if any(under(real, d) for d, _ in self.staged):
            return
        dst = os.path.join(self.root, str(len(self.staged)))
        copy_tree(real, dst, owner=self.uid, skip=lambda rel: rel.rsplit("/", 1)[-1] == "__pycache__")
        self.staged.append((real, dst))

    def mapped(self, arg: str) -> str:
        """An argument pointed at its staged copy (runs without a sandbox)."""
        real = os.path.realpath(arg) if arg.startswith("/") else None
        for orig, dst in self.staged:
            if real is not None and under(real, orig):
                return dst + real[len(orig):]
        return arg


def _bwrap_argv(cfg: dict[str, Any], staging: Staging, argv: list[str], cwd: str,
                env: dict[str, str], seccomp_fd: int | None = None) -> list[str]:
    ws, python = cfg["workspace"], cfg["python"]
    args = [cfg["bwrap"], "--unshare-all", "--unshare-user", "--disable-userns", "--uid", "1000", "--gid", "1000",
            "--cap-drop", "ALL", "--hostname", "sandbox", "--die-with-parent", "--new-session", *cfg["layout"]]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    args += ["--proc", "/proc", "--dev", "/dev", *cfg["ram_mounts"], "--bind", cfg.get("workspace_source", ws), ws]
    for real, dst in staging.staged:
        args += ["--ro-bind", dst, real]
    if cfg.get("svc_dir"):
        args += ["--ro-bind", cfg["svc_dir"], "/run/assay"]
    real_cwd = os.path.realpath(cwd)
    known = under(real_cwd, ws) or any(under(real_cwd, real) for real, _dst in staging.staged)
    inner_cwd = real_cwd if known else "/tmp"  # not the workspace nor a staged folder: private, empty
    args += [*cfg["read_only_root"], "--chdir", inner_cwd, "--clearenv"]
    for k, v in env.items():
        args += ["--setenv", k, v]
    if cfg.get("prelude"):  # the service forwarder first, then the interpreter in its place
        return [*args, "--", "/bin/sh", "-c", cfg["prelude"] + "exec " + shlex.join([python, *argv])]
    return [*args, "--", python, *argv]


def _private_dir(staging: Staging) -> str:
    """An empty folder of the grade's uid: the cwd of delivered code a grader starts without
    one inside the workspace (never the grader's own cwd, the case folder with its held-out data)."""
    d = tempfile.mkdtemp(prefix="cwd-", dir=staging.root)
    if staging.uid is not None:
        os.chown(d, staging.uid, staging.uid)
    return d


def _drop_to(uid: int, cgroup_procs: list[str] | None) -> None:
    """preexec: join the grade's cgroup folders (as root), become the grade's uid, with the
    run's limits, dying with this process."""
    for procs in cgroup_procs or ():
        fd = os.open(procs, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    for res, val in (*LIMITS, *(() if cgroup_procs else (MEMORY,))):
        _soft, hard = resource.getrlimit(res)
        v = val if hard == resource.RLIM_INFINITY else min(val, hard)
        resource.setrlimit(res, (v, v))
    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


def main() -> int:
    with open(sys.argv[0] + ".json", encoding="utf-8") as f:
        cfg: dict[str, Any] = json.load(f)
    argv = sys.argv[1:]
    cwd = os.getcwd()
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"}
    env.update({k: os.environ[k] for k in KEEP_ENV if k in os.environ})
    staging = Staging(cfg)
    for a in argv:
        if a.startswith("/") and os.path.exists(a):
            staging.stage(a)
    grader_tmp = os.environ.get("TMPDIR")
    if grader_tmp and under(os.path.realpath(cwd), os.path.realpath(grader_tmp)):
        staging.stage(cwd)  # the grader's own temporary folder (its driver script): staged like an argument
    uid = cfg["uid"] if os.geteuid() == 0 else None
    pass_fds: list[int] = []
    if cfg["isolated"]:
        seccomp_fd = None
        if cfg.get("seccomp"):
            seccomp_fd, w = os.pipe()
            os.write(w, bytes.fromhex(cfg["seccomp"]))  # a few hundred bytes: fits in the pipe
            os.close(w)
            pass_fds.append(seccomp_fd)
        cmd = _bwrap_argv(cfg, staging, argv, cwd, env, seccomp_fd)
        run_env, run_cwd = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, "/"
    else:  # no sandbox: point the arguments and the cwd at the staged copies the uid can read
        cmd = [cfg["python"], *(staging.mapped(a) for a in argv)]
        run_env, run_cwd = env, staging.mapped(os.path.realpath(cwd))
        if run_cwd == os.path.realpath(cwd) and not under(run_cwd, cfg["workspace"]):
            run_cwd = _private_dir(staging)
    cg = cfg.get("cgroup_procs")
    try:
        child = subprocess.Popen(cmd, env=run_env, cwd=run_cwd, pass_fds=pass_fds,
                                 preexec_fn=(lambda: _drop_to(uid, cg)) if uid else None)  # noqa: PLW1509
    finally:
        for fd in pass_fds:
            os.close(fd)
    try:
        code = child.wait()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if uid and not cfg["isolated"]:  # what it left running as its uid (setsid, nohup) goes too;
            # in a sandbox the pid namespace ended with bwrap
            subprocess.run([KILL, "-9", "-1"], user=uid, group=uid, extra_groups=[], check=False,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        remove_unsafe(cfg["workspace"])
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
