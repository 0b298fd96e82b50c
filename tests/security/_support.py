"""Shared machinery of the red-team tests.

Everything here drives the public surface (the `assay` CLI in a subprocess, the report JSON,
`assay show --json`, the SQLite file of the store read with the standard `sqlite3` module),
so the tests survive the refactoring of the internals.

- `workdir(tag)`: a fresh folder under /tmp (mode 0711, so sandbox uids can reach the run
  folders under it); its path is the *marker* by which leftover processes of the runs
  started there are found (`reap`). Removed afterwards.
- `host_secret()`: a root-only folder outside every work folder with files holding a random
  token; an attack "wins" when that token shows up anywhere the agent or the store can see.
- `cli(...)`: `python -m assay.cli ...` with a hard time bound; a hung command is killed
  (its process group, then every process carrying the work folder's marker) and reported
  as `timed_out` instead of hanging the test session.
- `store_dump(cwd)`: every value of every table of the store (what `assay show --json` prints
  comes from there) and the report JSON, as one string to search for leaked secrets.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.helpers import REPO

__all__ = ["REPO", "CliResult", "HostSecret", "cli", "host_secret", "leaks", "outputs", "reap", "report_json",
           "runs_by_name", "script", "show", "store_dump", "workdir", "write_yaml", "shadow_line", "cmd",
           "bwrap_ok", "run_dir_of", "du_bytes"]


def bwrap_ok() -> bool:
    return shutil.which("bwrap") is not None


# --------------------------------------------------------------------------- processes


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def marked_pids(marker: str) -> list[int]:
    """Live (non-zombie) processes whose command line contains `marker` (never this process)."""
    me = os.getpid()
    key = marker.encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        if key not in _cmdline(pid):
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in (b"Z", b"X"):
            found.append(pid)
    return found


def reap(marker: str) -> list[int]:
    """SIGKILL every process carrying `marker` (processes our own runs started); their pids."""
    killed = []
    for _ in range(3):
        pids = marked_pids(marker)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        time.sleep(0.2)
    return killed


@dataclass
class CliResult:
    returncode: int | None  # None: still running at the time bound, then killed
    stdout: str
    stderr: str
    seconds: float
    reaped: list[int] = field(default_factory=list)

    @property
    def max_rss_bytes(self) -> int | None:
        import re

        m = re.search(r"ASSAY-MAXRSS-KB (\d+)", self.stderr)
        return int(m.group(1)) * 1024 if m else None

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    def tail(self, n: int = 3000) -> str:
        return f"[exit {self.returncode}, {self.seconds:.1f} s]\nstdout: {self.stdout[-n:]}\nstderr: {self.stderr[-n:]}"


_N = [0]


_RSS_WRAPPER = ("import resource, subprocess, sys\n"
                "p = subprocess.run(sys.argv[1:])\n"
                "print('ASSAY-MAXRSS-KB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
                "sys.exit(p.returncode)\n")


def cli(*args: str, cwd: Path, timeout: float = 120, env: dict[str, str] | None = None,
        measure_rss: bool = False) -> CliResult:
    """Run `assay ARGS` in `cwd`, at most `timeout` seconds (then kill it and what it left).

    With `measure_rss`, `result.max_rss_bytes` is the peak resident memory of the assay process
    (or of the largest process it waited for)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "ASSAY_"))}
    full_env.update(env or {})
    _N[0] += 1
    out_p, err_p = cwd / f".cli-{_N[0]}.out", cwd / f".cli-{_N[0]}.err"
    t0 = time.monotonic()
    with open(out_p, "w") as out, open(err_p, "w") as err:
        argv = [sys.executable, "-m", "assay.cli", *args]
        if measure_rss:
            argv = [sys.executable, "-c", _RSS_WRAPPER, *argv]
        p = subprocess.Popen(argv, cwd=cwd, env=full_env, stdout=out,
                             stderr=err, stdin=subprocess.DEVNULL, start_new_session=True, text=True)
        code: int | None
        try:
            code = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    seconds = time.monotonic() - t0
    reaped = reap(str(cwd)) if code is None else []
    res = CliResult(code, out_p.read_text(errors="replace"), err_p.read_text(errors="replace"), seconds, reaped)
    out_p.unlink(missing_ok=True)
    err_p.unlink(missing_ok=True)
    return res


# --------------------------------------------------------------------------- folders and secrets


def _rm_rf(path: Path) -> None:
    # GNU rm: never follows symlinks, copes with trees deeper than Python's recursion limit.
    subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=False)


@contextlib.contextmanager
def workdir(tag: str) -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix=f"assay-rt-{tag}-", dir="/tmp"))
    os.chmod(d, 0o711)
    try:
        yield d
    finally:
        reap(str(d))
        _rm_rf(d)


@dataclass
class HostSecret:
    dir: Path  # root-only folder (0700) outside every work folder
    file: Path  # dir/answer.txt: "42\n<token>\n", mode 0600
    token: str

    def needles(self) -> list[str]:
        out = [self.token]
        line = shadow_line()
        if line:
            out.append(line)
        return out


def shadow_line() -> str | None:
    """The first line of the host's /etc/shadow (a root-only file every machine has), if any."""
    try:
        first = Path("/etc/shadow").read_text(errors="replace").splitlines()[0]
    except (OSError, IndexError):
        return None
    return first if len(first) >= 12 else None


@contextlib.contextmanager
def host_secret() -> Iterator[HostSecret]:
    d = Path(tempfile.mkdtemp(prefix="assay-rt-hostsecret-", dir="/tmp"))
    os.chmod(d, 0o700)
    token = "SECRET-" + secrets.token_hex(8)
    f = d / "answer.txt"
    f.write_text(f"42\n{token}\n")
    os.chmod(f, 0o600)
    try:
        yield HostSecret(dir=d, file=f, token=token)
    finally:
        _rm_rf(d)


# --------------------------------------------------------------------------- tasks and agents


def write_yaml(folder: Path, spec: dict[str, Any], files: dict[str, str] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "task.yaml").write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True))
    for rel, content in (files or {}).items():
        p = folder / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(content))
    return folder


def cmd(command: str, timeout_s: float | None = None) -> dict[str, Any]:
    args: dict[str, Any] = {"command": command}
    if timeout_s is not None:
        args["timeout_s"] = timeout_s
    return {"tool": "run_command", "args": args}


def script(folder: Path, name: str, lines: list[dict[str, Any]]) -> str:
    """Write a script agent `folder/NAME.jsonl`; its agent spec."""
    p = folder / f"{name}.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return f"script:{p}"


# --------------------------------------------------------------------------- reading results


def report_json(cwd: Path, *extra: str) -> dict[str, Any]:
    out = cwd / ".report.json"
    r = cli("report", "--json", str(out), *extra, cwd=cwd, timeout=120)
    assert r.returncode == 0, "assay report failed: " + r.tail()
    data = json.loads(out.read_text())
    out.unlink()
    return data


def runs_by_name(rep: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Report rows keyed by agent name: the script's file stem (`script:/x/NAME.jsonl` -> NAME),
    else the agent spec; `NAME@TASK` when the agent ran several tasks."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for run in rep["runs"]:
        agent = run["agent"]
        name = Path(agent.split(":", 1)[1]).stem if agent.startswith("script:") else agent
        rows[(name, run["task_id"])] = run
    names = [n for n, _ in rows]
    return {(n if names.count(n) == 1 else f"{n}@{t}"): run for (n, t), run in rows.items()}


def show(cwd: Path, run_id: str) -> dict[str, Any]:
    r = cli("show", run_id, "--json", cwd=cwd, timeout=60)
    assert r.returncode == 0, f"assay show {run_id} failed: " + r.tail()
    return json.loads(r.stdout)


def outputs(events: list[dict[str, Any]]) -> list[str]:
    return [str(e["data"].get("output", "")) for e in events if e["kind"] == "tool_result"]


def store_dump(cwd: Path) -> str:
    """Every value in every table of the SQLite store (runs with their records and grades, the
    events `assay show` prints, the judge cache, ...) and the report JSON."""
    parts: list[str] = []
    db = cwd / ".assay" / "assay.db"
    if db.exists():
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        con.text_factory = lambda b: b.decode("utf-8", errors="replace")
        try:
            tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            for t in tables:
                for row in con.execute(f'SELECT * FROM "{t}"'):
                    parts.extend(str(v) for v in row)
        finally:
            con.close()
        with contextlib.suppress(AssertionError):
            parts.append(json.dumps(report_json(cwd), ensure_ascii=False))
    return "\n".join(parts)


def leaks(cwd: Path, needles: list[str]) -> list[str]:
    blob = store_dump(cwd)
    return [n for n in needles if n and n in blob]


def run_dir_of(cwd: Path, run_id: str) -> Path | None:
    """The run folder of a stored run: as recorded in the store, else found by its id."""
    db = cwd / ".assay" / "assay.db"
    with contextlib.suppress(sqlite3.Error, ValueError, KeyError, TypeError):
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            row = con.execute("SELECT record FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        finally:
            con.close()
        if row and json.loads(row[0]).get("run_dir"):
            return Path(json.loads(row[0])["run_dir"])
    for base in (cwd / ".assay" / "runs", Path("/var/tmp/assay-runs")):
        for cand in base.glob(f"**/{run_id}"):
            if cand.is_dir():
                return cand
    return None


def du_bytes(path: Path) -> int:
    """Disk blocks in use under `path` (bytes), symlinks not followed."""
    total = 0
    for root, dirs, files in os.walk(path, followlinks=False):
        for n in files + dirs:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, n)).st_blocks * 512
    return total
