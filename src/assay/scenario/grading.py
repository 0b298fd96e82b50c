"""The grading worker's launcher: case code (grader, pilot) run on a copy of the workspace.

`run_worker` copies the workspace (`assay.fs.copying.copy_tree`: no link followed, no special file
opened), gives the copy to a fresh unprivileged uid, writes the sys.executable stand-in
(`assay/env/inside/grader_wrapper.py`) and starts `python -m assay.scenario.worker grade`
with the variant's parameters in its environment and a time limit. Delivered code the
grader starts runs in a fresh bubblewrap sandbox as that uid, with

- the workspace copy bound read-write at the same absolute path (so `cwd=<ws>/system` and
  absolute file arguments keep working),
- every existing path argument outside the workspace copy (e.g. the grader's temporary
  driver script), and the working directory when it lies outside, copied to a staging
  folder and bound read-only at its original path,
- a private /tmp, no network, and an environment cleared to PATH, HOME, LANG (plus
  PYTHONDONTWRITEBYTECODE / PYTHONIOENCODING / PYTHONHASHSEED / PYTHONUNBUFFERED when the
  grader set them): nothing FDEGYM_*,
- for a case with the company LLM gateway or services, the grade's prod socket folder bound
  read-only at /run/assay and the forwarder started in front of the interpreter, so
  `127.0.0.1:8001` (gateway) and `8002+` (services) lead to the prod instances.
Without bubblewrap the interpreter runs unsandboxed as that uid, its path arguments and cwd
pointed at the staged copies.

The copy sits on a volume of its own with the run's disk quota
(`assay.env.workspace.grading_copy`), so delivered code cannot fill the host disk, and is
capped (`grading_copy_limits`: ASSAY_COPY_MAX_FILES, ASSAY_COPY_MAX_DEPTH, and the quota):
what passes the caps is left out and reported in the answer's `capped`. Root never follows a
link in the copy: the worker sees it in a private mount namespace where it is `nosymfollow`
(`assay.env.mountns`), so a link the still-running delivered code swaps in for its output
fails the grader's read (ELOOP) instead of reaching a host file; delivered code gets the same
copy through a second bind without that flag. The worker runs in a cgroup of its own (the
run's memory and process ceilings) and everything in it is killed when it ends, children that
called `setsid` included. The worker dies with the harness: its process group is on the lifeline
(`assay.env.lifeline`), which kills it if the harness is killed (even with -9) while it
runs. Delivered code gets the sandbox's limits: size-limited /tmp and /dev/shm, a read-only
/, the seccomp filter, and a cgroup of the grade's own where one can be had.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from assay import jsonlimits
from assay.env import lifeline, seccomp
from assay.env.bwrap import READ_ONLY_ROOT, bwrap_available, ram_mounts, system_layout
from assay.env.cgroup import RunCgroup, join
from assay.env.limits import Limits
from assay.env.mountns import nosymfollow_view
from assay.env.net.forwarder import FORWARDER_NAME, wrap_command
from assay.env.uids import allocate_uid, release_uid
from assay.env.volume import WorkspaceVolume
from assay.env.workspace import discard_copy, grading_copy
from assay.fs.paths import PathError
from assay.fs.reads import read_regular
from assay.fs.writes import write_file
from assay.task.model import ScenarioSpec

__all__ = ["WorkerCall", "case_context", "run_worker", "socket_dir", "wrapper_config", "write_wrapper"]

_MAX_SOCKET_PATH = 100


class WorkerCall(BaseModel):
    """One call of the grading worker: a grade, or one pilot day."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    mode: Literal["grade", "pilot"]
    timeout_s: float
    day: int | None = None
    ctx: dict[str, Any] = Field(default_factory=dict)
    svc_dir: Path | None = None  # socket folder bound at /run/assay for delivered code (sandboxed)
    pairs: list[tuple[int, str]] = Field(default_factory=list)  # forwarder ports in front of it
    config: dict[str, Any] = Field(default_factory=dict)  # relpath -> JSON written into the copy (no sandbox)
    two_arg: bool = False
    stop: threading.Event | None = None  # set: the worker is killed (a trial day whose run has ended)


def socket_dir(longest_name: int) -> Path:
    """A fresh socket folder (0755) at a neutral path, `$TMPDIR/assay-svc-XXXXXXXX`: short enough
    for AF_UNIX (108 bytes), and naming neither the store nor the run, since it is bound into
    sandboxes and shows in their /proc/self/mountinfo. Removed by the lifeline if the harness dies."""
    d = Path(tempfile.mkdtemp(prefix="assay-svc-"))
    if len(str(d)) + 1 + longest_name > _MAX_SOCKET_PATH:
        os.rmdir(d)
        d = Path(tempfile.mkdtemp(prefix="assay-svc-", dir="/tmp"))
    os.chmod(d, 0o755)
    lifeline.keep("tree", str(d))
    return d


def case_context(spec: ScenarioSpec, level: str | None, run_dir: Path, facts: list[str]) -> dict[str, Any]:
    """`ctx` of a two-argument `grade(ws, ctx)`: as upstream, plus a native scenario's held-out path."""
    ref = spec.case_file("reference")
    ctx: dict[str, Any] = {"judge_log": str(run_dir / "judge_log.jsonl"), "facts": sorted(facts),
                           "run_dir": str(run_dir), "services": {}, "level": level,
                           "reference_solution": str(ref) if ref is not None and ref.is_file() else None}
    if spec.held_out:  # a native scenario's held-out data, never in the workspace
        ctx["held_out"] = str(spec.case / spec.held_out)
    return ctx


# --------------------------------------------------------------------------- the sys.executable stand-in


def wrapper_config(*, workspace: Path, stage_root: Path, uid: int | None, isolated: bool,
                   svc_dir: str | Path | None = None, pairs: list[tuple[int, str]] | None = None,
                   source: Path | None = None) -> dict[str, Any]:
    """What the wrapper needs, computed by the harness (the bwrap layout is the sandbox's own).

    `source`: the same copy in a view where links work, when the worker sees the copy
    `nosymfollow` (`assay.env.mountns`). `svc_dir` (isolated only) is bound read-only at /run/assay and, with `pairs` (port, socket
    inside), the forwarder there is started in front of the interpreter, so delivered code
    reaches the prod gateway and services at the same 127.0.0.1 ports as during development.
    """
    return {
        "workspace": os.path.realpath(workspace),
        # where the sandbox binds the copy from: its link-following view (`mountns`), else itself
        "workspace_source": os.path.realpath(source or workspace),
        "stage_root": str(stage_root),
        "uid": uid,
        "isolated": isolated,
        "bwrap": shutil.which("bwrap") or "/usr/bin/bwrap",
        "layout": system_layout(),
        "ram_mounts": ram_mounts(Limits()),
        "read_only_root": list(READ_ONLY_ROOT),
        "seccomp": (seccomp.program() or b"").hex(),
        "python": "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "/bin/python3",
        "svc_dir": str(svc_dir) if svc_dir is not None and isolated else None,
        "prelude": wrap_command("", list(pairs), f"/run/assay/{FORWARDER_NAME}")
        if svc_dir is not None and isolated and pairs else "",
    }


def write_wrapper(path: Path, config: dict[str, Any]) -> Path:
    """Write the stand-in for sys.executable while grading (mode 0755): a launcher of
    `assay.env.inside.grader_wrapper` under this Python, its configuration beside it."""
    Path(f"{path}.json").write_text(json.dumps(config), encoding="utf-8")
    path.write_text(f"#!{sys.executable} -IB\nimport sys\nfrom assay.env.inside.grader_wrapper import main\n"
                    "sys.exit(main())\n", encoding="utf-8")
    os.chmod(path, 0o755)
    return path


# --------------------------------------------------------------------------- the worker launcher


def run_worker(call: WorkerCall, *, workspace: Path, spec: ScenarioSpec, isolated: bool, env: dict[str, str],
               wdir: Path) -> dict[str, Any]:
    """Copy the workspace for the worker, start it (grade or pilot) in `wdir` with the case's
    environment `env`, wait; the worker's answer dict. The copy, the grader's TMPDIR and the
    staged arguments live at a neutral path (`$TMPDIR/assay-grade-XXXXXXXX/`), as the socket
    folder does: delivered code sees them in its mount table, and they name neither the store
    nor the run."""
    ws_parent = Path(tempfile.mkdtemp(prefix="assay-grade-"))
    os.chmod(ws_parent, 0o711)
    lifeline.keep("tree", str(ws_parent))
    ws_copy = ws_parent / "ws"
    tmp = ws_parent / "tmp"  # the grader's TMPDIR: files it hands to delivered code are bound at their paths
    stage = ws_parent / "stage"
    uid = allocate_uid() if os.geteuid() == 0 else None
    cgroup: RunCgroup | None = None
    worker_cg: RunCgroup | None = None
    volume: WorkspaceVolume | None = None
    try:
        volume, copied = grading_copy(workspace, ws_copy, owner=uid)
        for rel, data in call.config.items():
            write_file(ws_copy, rel, json.dumps(data, indent=2) + "\n", owner=uid)
        tmp.mkdir(mode=0o700)
        stage.mkdir()
        os.chmod(stage, 0o711)
        isolated = isolated and bwrap_available()
        view = ws_parent / "view" if os.geteuid() == 0 and isolated else None
        if view is not None:
            view.mkdir(mode=0o700)
        cfg = wrapper_config(workspace=ws_copy, stage_root=stage, uid=uid, isolated=isolated,
                             svc_dir=call.svc_dir if isolated else None, pairs=call.pairs if isolated else None,
                             source=view)
        if uid is not None:
            cgroup = _cgroup(f"grade-{uid}")
            if cgroup is not None:
                cfg["cgroup_procs"] = cgroup.procs_files()
            worker_cg = _cgroup(f"worker-{uid}")  # the worker's own ceilings, and a whole it is killed as
        out_file = wdir / "result.json"
        argv = _worker_argv(call, spec, ws_copy, out_file, write_wrapper(wdir / "python3", cfg), wdir)
        answer = _wait_worker(argv, spec.case, {**env, "TMPDIR": str(tmp)}, wdir, out_file, call,
                              view=(os.path.realpath(ws_copy), str(view)) if view is not None else None,
                              cgroup=worker_cg)
        if copied.capped:
            answer["capped"] = copied.capped
        return answer
    finally:
        for cg in (worker_cg, cgroup):
            if cg is not None and cg.remove():
                for path in cg.paths:
                    lifeline.drop("cgroup", str(path))
        if volume is not None:
            discard_copy(volume)
        if uid is not None:
            release_uid(uid)
        for d in (ws_parent, stage, tmp):
            shutil.rmtree(d, ignore_errors=True)
        lifeline.drop("tree", str(ws_parent))


def _cgroup(tag: str) -> RunCgroup | None:
    """A cgroup with a run's memory and process ceilings, on the lifeline (None where none can be had)."""
    cg = RunCgroup.create(Limits().memory_bytes, tag, pids_max=Limits().nproc)
    for path in cg.paths if cg is not None else ():
        lifeline.keep("cgroup", str(path))
    return cg


def _worker_argv(call: WorkerCall, spec: ScenarioSpec, ws_copy: Path, out_file: Path, wrapper: Path,
                 wdir: Path) -> list[str]:
    """The grading worker's command line (its context written beside it)."""
    argv = [sys.executable, "-m", "assay.scenario.worker", "grade", "--case", str(spec.case),
            "--workspace", os.path.realpath(ws_copy), "--out", str(out_file), "--python", str(wrapper)]
    grader, pilot = spec.case_file("grader"), spec.case_file("pilot")
    if call.mode == "pilot" and pilot is not None:
        argv += ["--pilot", str(pilot), "--pilot-day", str(call.day)]
    elif grader is not None:
        argv += ["--grader", str(grader)]
    ctx_file = wdir / "ctx.json"
    ctx_file.write_text(json.dumps(call.ctx, ensure_ascii=False, default=str), encoding="utf-8")
    argv += ["--ctx", str(ctx_file)]
    if call.two_arg:
        argv.append("--two-arg")
    return argv


def _wait_worker(argv: list[str], case: Path, env: dict[str, str], wdir: Path, out_file: Path,
                 call: WorkerCall, view: tuple[str, str] | None = None,
                 cgroup: RunCgroup | None = None) -> dict[str, Any]:
    """Run the worker to its answer. `view` (copy, alias): the worker sees the copy in a private
    mount namespace where no link on it is followed (`assay.env.mountns`). `cgroup`: the worker
    joins it before it runs anything (its memory and process ceilings) and everything in it is
    killed when the worker ends, by time or by itself."""
    fds = cgroup.open_procs() if cgroup is not None else []

    def hook() -> None:
        join(fds)
        if view is not None:
            nosymfollow_view(*view)

    r, w = os.pipe()
    try:
        p = subprocess.Popen(argv, cwd=str(case), env=env, stdin=subprocess.DEVNULL, stdout=w,
                             stderr=subprocess.STDOUT, start_new_session=True,
                             preexec_fn=hook if fds or view else None)  # noqa: PLW1509
    except BaseException:
        os.close(r)
        raise
    finally:
        os.close(w)
        for fd in fds:
            os.close(fd)
    log = WorkerLog(r, wdir / "worker.log")
    try:
        return _wait(p, wdir, out_file, call, log)
    finally:
        if cgroup is not None:
            cgroup.kill_all()
        log.finish(grace_s=0.5)


LOG_HEAD_BYTES = 4 * 1024**2
LOG_TAIL_BYTES = 64 * 1024
"""What `worker.log` keeps of a grading worker's output (the grader's own prints, and those of
the delivered code it starts without capturing them): the first LOG_HEAD_BYTES and the last
LOG_TAIL_BYTES. A grader printing without end wrote 200 MB a second to the run folder until its
time limit (600 s by default): enough to fill the disk under every run of the campaign."""


class WorkerLog:
    """Drains a worker's output pipe in a thread of its own into `path`, capped: the head, then
    a note of how much was left out, then the tail (written when the output ends). The thread
    owns the pipe's read end: it polls it, and stops (closing it, so a child still writing gets
    EPIPE) when the output ends or `finish` tells it to."""

    def __init__(self, fd: int, path: Path) -> None:
        self._fd = fd
        self._file = open(path, "wb")  # noqa: SIM115 (closed by `finish`, after the thread)
        self._written = 0
        self._dropped = 0
        self._tail = bytearray()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drain, name="grading-worker-log", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        try:
            while not self._stop.is_set():
                if not poller.poll(200):
                    continue
                chunk = os.read(self._fd, 256 * 1024)
                if not chunk:
                    break
                room = LOG_HEAD_BYTES - self._written
                if room > 0:
                    self._file.write(chunk[:room])
                    self._written += min(room, len(chunk))
                    chunk = chunk[room:]
                if chunk:
                    self._dropped += len(chunk)
                    self._tail += chunk
                    del self._tail[:-LOG_TAIL_BYTES]
        finally:
            os.close(self._fd)

    def finish(self, grace_s: float = 1.0) -> None:
        """Wait (at most `grace_s`) for the output to end, then write what the log keeps, so the
        output's end is on disk for `_tail`. A child still holding the pipe is cut off."""
        self._thread.join(grace_s)
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join()
        if self._file.closed:
            return
        dropped = self._dropped - len(self._tail)
        if dropped > 0:
            self._file.write(f"\n[... {dropped:,} bytes of output left out by assay ...]\n".encode())
        self._file.write(bytes(self._tail))
        self._file.close()


def _wait(p: subprocess.Popen[bytes], wdir: Path, out_file: Path, call: WorkerCall,
          log: WorkerLog | None = None) -> dict[str, Any]:
    entry = lifeline.keep_group(p.pid)  # killed with its group if the harness dies while it runs
    try:
        if not _waited(p, call):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            return {"ok": False, "stopped": True, "error": f"{call.mode} stopped: its run has ended"}
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        return {"ok": False, "timeout": True, "error": f"{call.mode} timed out after {call.timeout_s:g} s"}
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)
        lifeline.drop_group(entry)
        p.wait()
    if log is not None:
        log.finish()
    if not out_file.is_file():
        tail = " | ".join(_tail(wdir / "worker.log").strip().splitlines()[-4:])
        return {"ok": False, "error": f"{call.mode} worker crashed (exit {p.returncode}): {tail[:600]}"}
    try:  # the grader's answer may carry what the delivered system printed: read it within limits
        answer = jsonlimits.loads(read_regular(out_file, max_bytes=ANSWER_BYTES), max_depth=ANSWER_DEPTH)
    except (jsonlimits.JSONLimitError, PathError) as e:
        return {"ok": False, "error": f"{call.mode} worker's answer refused: {e}"}
    if not isinstance(answer, dict):
        return {"ok": False, "error": f"{call.mode} worker's answer is not an object"}
    return answer


STOP_POLL_S = 0.2


def _waited(p: subprocess.Popen[bytes], call: WorkerCall) -> bool:
    """Wait for the worker to end (TimeoutExpired past `call.timeout_s`); False when `call.stop`
    was set first (a trial day left running when its run ended: it must not outlive the run)."""
    if call.stop is None:
        p.wait(timeout=call.timeout_s)
        return True
    deadline = time.monotonic() + call.timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise subprocess.TimeoutExpired(p.args, call.timeout_s)
        try:
            p.wait(timeout=min(STOP_POLL_S, left))
            return True
        except subprocess.TimeoutExpired:
            if call.stop.is_set():
                return False


ANSWER_BYTES = 64 * 1024**2
ANSWER_DEPTH = 200
"""Limits of a grading worker's answer file (it may quote the delivered system's output)."""


def _tail(log: Path, limit: int = 64 * 1024) -> str:
    """The end of the worker's log (it holds the delivered system's output: never read whole)."""
    with open(log, "rb") as f:
        f.seek(max(0, os.fstat(f.fileno()).st_size - limit))
        return f.read().decode("utf-8", errors="replace")
