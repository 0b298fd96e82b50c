"""Grading an FDE-Gym case: the grade worker and the sandboxed-python wrapper.

The case's `grader.py` is trusted task code holding the held-out truth. It runs outside the
sandbox, in a separate Python process (this module run as `python -m
assay.scenario.grading`), with the variant's parameters in its environment and a time
limit enforced by the parent. While `grade()` runs, `sys.executable` names a wrapper
script (written per grade by `write_wrapper`): whatever the grader starts with
`[sys.executable, ...]` (the delivered system) runs in a fresh bubblewrap sandbox as an
unprivileged uid of its own, with

- the workspace copy bound read-write at the same absolute path (so `cwd=<ws>/system` and
  absolute file arguments keep working),
- every existing path argument outside the workspace copy (e.g. the grader's temporary
  driver script), and the working directory when it lies outside, copied to a staging
  folder and bound read-only at its original path,
- a private /tmp, no network, and an environment cleared to PATH, HOME, LANG (plus
  PYTHONDONTWRITEBYTECODE / PYTHONIOENCODING / PYTHONHASHSEED / PYTHONUNBUFFERED when the
  grader set them): nothing FDEGYM_*,
- for a case with the company LLM gateway or services, the grade's prod socket folder bound
  read-only at /run/assay and the forwarder (`assay.env.forwarder`) started in front of the
  interpreter, so `127.0.0.1:8001` (gateway) and `8002+` (services) lead to the prod instances.
Without bubblewrap the interpreter runs unsandboxed as that uid, its path arguments and cwd
pointed at the staged copies.

This module imports only the standard library at module level: the worker must start fast
and must not drag the harness into the grader's process.

Worker protocol: `python -m assay.scenario.grading --case DIR --workspace WS --ctx CTX.json
--out OUT.json --python WRAPPER [--two-arg] [--pilot-day N] [--grader FILE] [--pilot FILE]`
(with `--pilot-day`, the case's `pilot.run(WS, N)` instead of `grade()`; `--grader`/`--pilot`
name the files when they are not `DIR/grader.py`/`DIR/pilot.py`, as in a native scenario). OUT.json receives `{"ok": true, "result":
{...}}` or `{"ok": false, "error": "...", "retry": bool}`; `retry` is true when the grader
asked for it (`"retry": true` in its dict) or its exception mentions the gateway or the judge.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import os
import re
import sys
import traceback
from pathlib import Path
from typing import Any

__all__ = ["WRAPPER_SOURCE", "main", "wrapper_config", "write_wrapper"]

_RETRY_WORDS = re.compile(r"(?i)\b(gateway|judge|rate.?limit|temporar(il)?y unavailable)\b")

WRAPPER_SOURCE = r'''#!/usr/bin/python3 -IS
# assay: sys.executable during FDE-Gym grading. Starts /usr/bin/python3 in a fresh sandbox.
import json, os, shutil, stat, sys, tempfile

CFG = json.loads(__CONFIG__)
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


main()
'''


def wrapper_config(*, workspace: Path, stage_root: Path, uid: int | None, isolated: bool,
                   svc_dir: str | Path | None = None, pairs: list[tuple[int, str]] | None = None) -> dict[str, Any]:
    """What the wrapper needs, computed by the harness (the bwrap layout is the sandbox's own).

    `svc_dir` (isolated only) is bound read-only at /run/assay and, with `pairs` (port, socket
    inside), the forwarder there is started in front of the interpreter, so delivered code
    reaches the prod gateway and services at the same 127.0.0.1 ports as during development.
    """
    import shutil

    from assay.env.forwarder import FORWARDER_NAME, wrap_command
    from assay.env.sandbox import Limits, _system_layout

    return {
        "workspace": os.path.realpath(workspace),
        "stage_root": str(stage_root),
        "uid": uid,
        "isolated": isolated,
        "bwrap": shutil.which("bwrap") or "/usr/bin/bwrap",
        "layout": _system_layout(),
        "tmp_bytes": Limits().tmp_bytes,
        "python": "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "/bin/python3",
        "svc_dir": str(svc_dir) if svc_dir is not None and isolated else None,
        "prelude": wrap_command("", list(pairs), f"/run/assay/{FORWARDER_NAME}")
        if svc_dir is not None and isolated and pairs else "",
    }


def write_wrapper(path: Path, config: dict[str, Any]) -> Path:
    """Write the wrapper script (mode 0755) that stands in for sys.executable while grading."""
    text = WRAPPER_SOURCE.replace("__CONFIG__", repr(json.dumps(config)))
    path.write_text(text, encoding="utf-8")
    os.chmod(path, 0o755)
    return path


# --------------------------------------------------------------------------- the worker


def _load_grader(case: Path, path: Path | None = None) -> Any:
    sys.dont_write_bytecode = True
    path = path or case / "grader.py"
    for d in (case, path.parent):
        if str(d) not in sys.path:
            sys.path.insert(0, str(d))
    spec = importlib.util.spec_from_file_location("grader", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["grader"] = mod
    spec.loader.exec_module(mod)
    if not callable(getattr(mod, "grade", None)):
        raise RuntimeError(f"{path.name} defines no grade() function")
    return mod


def _positional_params(fn: Any) -> int:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return 1
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in sig.parameters.values()):
        return 2
    return sum(1 for p in sig.parameters.values() if p.kind in kinds)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, set | frozenset):
        return sorted(_jsonable(v) for v in obj)
    if isinstance(obj, str | int | float | bool) or obj is None:
        return obj
    if isinstance(obj, Path):
        return str(obj)
    return str(obj)


def run_grader(case: Path, workspace: Path, ctx: dict[str, Any], python: Path, two_arg: bool,
               grader: Path | None = None) -> dict[str, Any]:
    mod = _load_grader(case, grader)
    call_ctx = dict(ctx)
    call_ctx["facts"] = set(ctx.get("facts", []))
    original = sys.executable
    sys.executable = str(python)
    try:
        if two_arg or _positional_params(mod.grade) >= 2:
            result = mod.grade(str(workspace), call_ctx)
        else:
            result = mod.grade(str(workspace))
    finally:
        sys.executable = original
    if not isinstance(result, dict):
        raise RuntimeError(f"grade() returned {type(result).__name__}, not a dict")
    return result


def run_pilot(case: Path, workspace: Path, day: int, python: Path, pilot: Path | None = None) -> dict[str, Any]:
    """The case's `pilot.run(workspace, day)`, delivered code contained as in grading."""
    sys.dont_write_bytecode = True
    pilot = pilot or case / "pilot.py"
    for d in (case, pilot.parent):
        if str(d) not in sys.path:
            sys.path.insert(0, str(d))
    spec = importlib.util.spec_from_file_location("pilot", pilot)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {pilot}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["pilot"] = mod
    spec.loader.exec_module(mod)
    original = sys.executable
    sys.executable = str(python)
    try:
        result = mod.run(str(workspace), day)
    finally:
        sys.executable = original
    return result if isinstance(result, dict) else {"feedback": str(result)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m assay.scenario.grading")
    ap.add_argument("--case", required=True, type=Path)
    ap.add_argument("--workspace", required=True, type=Path)
    ap.add_argument("--ctx", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--python", required=True, type=Path)
    ap.add_argument("--two-arg", action="store_true")
    ap.add_argument("--pilot-day", type=int, default=None)
    ap.add_argument("--grader", type=Path, default=None, help="the grader file (default: CASE/grader.py)")
    ap.add_argument("--pilot", type=Path, default=None, help="the pilot file (default: CASE/pilot.py)")
    a = ap.parse_args(argv)
    ctx = json.loads(a.ctx.read_text(encoding="utf-8"))
    try:
        if a.pilot_day is not None:
            result = run_pilot(a.case, a.workspace, a.pilot_day, a.python, a.pilot)
        else:
            result = run_grader(a.case, a.workspace, ctx, a.python, a.two_arg, a.grader)
        out: dict[str, Any] = {"ok": True, "result": _jsonable(result)}
        if result.get("retry"):
            out = {"ok": False, "retry": True, "error": f"grader asked for a retry: {result.get('summary', '')}",
                   "result": _jsonable(result)}
    except BaseException as e:  # everything is reported to the parent, which voids the run
        msg = f"{type(e).__name__}: {e}"
        out = {"ok": False, "error": msg, "traceback": traceback.format_exc(limit=12),
               "retry": bool(_RETRY_WORDS.search(msg))}
    tmp = a.out.with_name(a.out.name + ".tmp")
    tmp.write_text(json.dumps(out, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
