#!/usr/bin/python3 -IS
"""`sys.executable` while an FDE-Gym grader runs: starts /usr/bin/python3 in a fresh sandbox.

Written next to its configuration (`<this file>.json`, made by
`assay.scenario.grading.write_wrapper`) for each grade. Whatever the grader starts with
`[sys.executable, ...]` (the delivered system) runs inside bubblewrap as the grade's own
unprivileged uid: the workspace copy bound read-write at its own path, path arguments
outside it staged and bound read-only, a private /tmp, no network, a cleared environment.
Without bubblewrap the interpreter runs unsandboxed as that uid on the staged copies.
Standard library only: it runs under the system's python, not the harness's.
"""
import json
import os
import shutil
import sys
import tempfile

CFG = {}
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc", "/dev", "/sys")
KEEP_ENV = ("PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING", "PYTHONHASHSEED", "PYTHONUNBUFFERED")


def under(path, root):
    return path == root or path.startswith(root.rstrip("/") + "/")


def readable_copy(src, dst):
    if os.path.isdir(src):
        shutil.copytree(src, dst, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    else:
        shutil.copy2(src, dst)
    for root, dirs, files in os.walk(dst):
        os.chmod(root, 0o755)
        for f in files:
            p = os.path.join(root, f)
            if not os.path.islink(p):
                st = os.lstat(p)
                os.chmod(p, 0o755 if st.st_mode & 0o111 else 0o644)
    if not os.path.isdir(dst) and not os.path.islink(dst):
        st = os.lstat(dst)
        os.chmod(dst, 0o755 if st.st_mode & 0o111 else 0o644)


def main():
    with open(sys.argv[0] + ".json", encoding="utf-8") as f:
        CFG.update(json.load(f))
    argv = sys.argv[1:]
    ws = CFG["workspace"]
    cwd = os.getcwd()
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"}
    for k in KEEP_ENV:
        if k in os.environ:
            env[k] = os.environ[k]
    stage_root = tempfile.mkdtemp(prefix="call-", dir=CFG["stage_root"])
    os.chmod(stage_root, 0o755)
    staged = []

    def stage(path):
        real = os.path.realpath(path)
        if under(real, ws) or real == "/" or any(under(real, s) for s in SYSTEM):
            return
        if any(under(real, d) for d, _ in staged):
            return
        dst = os.path.join(stage_root, str(len(staged)))
        readable_copy(real, dst)
        staged.append((real, dst))

    for a in argv:
        if a.startswith("/") and os.path.exists(a):
            stage(a)
    if not under(os.path.realpath(cwd), ws):
        stage(cwd)
    python = CFG["python"]
    uid = CFG["uid"]
    if CFG["isolated"]:
        args = [CFG["bwrap"], "--unshare-all", "--unshare-user", "--disable-userns",
                "--uid", "1000", "--gid", "1000", "--cap-drop", "ALL", "--hostname", "sandbox",
                "--die-with-parent", "--new-session"] + CFG["layout"] + [
                "--proc", "/proc", "--dev", "/dev", "--size", str(CFG["tmp_bytes"]), "--tmpfs", "/tmp",
                "--bind", ws, ws]
        for real, dst in staged:
            args += ["--ro-bind", dst, real]
        if CFG.get("svc_dir"):
            args += ["--ro-bind", CFG["svc_dir"], "/run/assay"]
        args += ["--chdir", os.path.realpath(cwd), "--clearenv"]
        for k, v in env.items():
            args += ["--setenv", k, v]
        if CFG.get("prelude"):  # the service forwarder first, then the interpreter in its place
            import shlex
            args += ["--", "/bin/sh", "-c", CFG["prelude"] + "exec " + shlex.join([python] + argv)]
        else:
            args += ["--", python] + argv
        exe, exe_env = CFG["bwrap"], {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    else:  # no sandbox: point the arguments and the cwd at the staged copies the uid can read
        def mapped(a):
            r = os.path.realpath(a) if a.startswith("/") else None
            for real, dst in staged:
                if r is not None and under(r, real):
                    return dst + r[len(real):]
            return a

        argv = [mapped(a) for a in argv]
        os.chdir(mapped(os.path.realpath(cwd)))
        args, exe, exe_env = [python] + argv, python, env
    if os.geteuid() == 0 and uid:
        import resource
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        for res, val in ((resource.RLIMIT_NPROC, 512), (resource.RLIMIT_AS, 4 << 30),
                         (resource.RLIMIT_FSIZE, 1 << 30), (resource.RLIMIT_CORE, 0)):
            try:
                _s, hard = resource.getrlimit(res)
                v = val if hard == resource.RLIM_INFINITY else min(val, hard)
                resource.setrlimit(res, (v, v))
            except (ValueError, OSError):
                pass
    os.execve(exe, args, exe_env)


if __name__ == "__main__":
    main()
