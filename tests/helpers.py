"""Shared test helpers: write small tasks, run the real CLI (in this process, or in one of its own)."""

from __future__ import annotations

import contextlib
import gc
import inspect
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import traceback
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
_NOT_INHERITED = ("OPENAI_", "ANTHROPIC_", "AZURE_OPENAI_", "ASSAY_")  # a newcomer's shell has no provider keys, no assay settings


def _inherited(name: str) -> bool:
    """A variable a newcomer's shell may have: not a provider's key or URL (the built-in
    providers' and presets' too: OLLAMA_BASE_URL, GROQ_API_KEY, ...), not an assay setting."""
    from assay.llm.providers import BUILTIN_PROVIDERS

    named = {v for p in BUILTIN_PROVIDERS.values() for v in (p.key_env, p.url_env) if v}
    return not name.startswith(_NOT_INHERITED) and name not in named
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD, signal.SIGPIPE)

HOSTILE_S = 30.0
"""The time bound on work over hostile input (a billion laughs, a ReDoS pattern, brackets
200,000 deep): far above what the bounded code takes on a loaded machine, far below what the
naive code would (minutes to hours), so it cannot flake. How fast the code is, is measured
by bench/bench_timings.py, not asserted."""


def write_task(folder: Path, spec: dict[str, Any], files: dict[str, str] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "task.yaml").write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True))
    for rel, content in (files or {}).items():
        p = folder / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(content))
    return folder


def answer_task(folder: Path, want: str = "42", **extra: Any) -> Path:
    """A tiny contract task: write answer.txt holding `want`."""
    spec = {
        "title": "write the answer", "domain": "test", "execution": "multi-step-with-tools",
        "prompt": f"Write {want} into answer.txt.",
        "contract": [{"path": "answer.txt", "predicate": "regex", "pattern": f"^{want}\\s*$"}],
        "reference": {"artifacts": "reference"},
        **extra,
    }
    return write_task(folder, spec, {"reference/answer.txt": f"{want}\n", "workspace/README.md": "hello\n"})


def reply_task(folder: Path, want: str = "42", **extra: Any) -> Path:
    """A tiny single-step task: the model's reply is the answer (written to answer.txt), which
    must be `want`. No tools, so a model agent's run is one model call."""
    spec = {
        "title": "reply with the answer", "domain": "test", "execution": "single-step",
        "prompt": f"Reply with {want} and nothing else.", "answer_path": "answer.txt",
        "contract": [{"path": "answer.txt", "predicate": "regex", "pattern": f"^{want}\\s*$"}],
        "reference": {"answer": want},
        **extra,
    }
    return write_task(folder, spec)


def assay(*args: str, cwd: Path, env: dict[str, str] | None = None,
          input: str | None = None) -> subprocess.CompletedProcess[str]:
    """`assay ARGS` in this test's process: the console script's own `assay.cli.main` under
    typer's test runner, in `cwd`, in a newcomer's environment (no provider keys, no assay
    settings) plus `env`. What a process would show is kept: main()'s exit code, the error
    lines it writes, an uncaught exception as a traceback on stderr with exit 1. What the
    command changes in this process is put back after: the working folder, the environment,
    signal handlers, garbage collection, the root logger's handlers.

    A process of its own is left to what only a process shows (`assay_process`): signals and
    kills, a hard time limit, what is probed once per process (bubblewrap on PATH)."""
    from typer.testing import CliRunner

    from assay import cli

    overrides: dict[str, str | None] = {k: None for k in os.environ if not _inherited(k)}
    overrides.update(env or {})
    runner = CliRunner(**({"mix_stderr": False} if "mix_stderr" in inspect.signature(CliRunner).parameters else {}))
    was_cwd, was_argv, was_gc = os.getcwd(), sys.argv, gc.isenabled()
    was_signals = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    root = logging.getLogger()
    was_handlers, was_level = list(root.handlers), root.level
    code: int = 0
    try:
        os.chdir(cwd)
        with runner.isolation(input=input, env=overrides) as streams:
            sys.argv = ["assay", *args]
            try:
                cli.main()
            except SystemExit as e:  # as the interpreter ends on it: None is 0, a message is printed and 1
                if e.code is None or isinstance(e.code, int):
                    code = e.code or 0
                else:
                    sys.stderr.write(f"{e.code}\n")
                    code = 1
            except Exception:  # as the interpreter ends on an exception nobody caught
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
            stdout, stderr = (s.getvalue().decode(errors="replace") for s in streams[:2])
    finally:
        os.chdir(was_cwd)
        sys.argv = was_argv
        for sig, handler in was_signals.items():
            if handler is not None:
                signal.signal(sig, handler)
        root.handlers[:] = was_handlers
        root.setLevel(was_level)
        (gc.enable if was_gc else gc.disable)()
    return subprocess.CompletedProcess(["assay", *args], code, stdout, stderr)


def assay_process(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300,
                  input: str | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m assay.cli ARGS` in a process of its own, at most `timeout` seconds, in a
    newcomer's environment plus `env`: for what only a process shows."""
    full_env = clean_env()
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "assay.cli", *args], cwd=cwd, env=full_env, text=True,
                          capture_output=True, timeout=timeout, input=input)


def model_alias(cwd: Path, name: str, provider: str, base_url: str, **extra: Any) -> None:
    lines = [f"[models.{name}]", f'provider = "{provider}"', f'model = "{extra.pop("model", "fake-model")}"',
             f'base_url = "{base_url}"', "max_retries = 2", "retry_base_delay = 0.01", "timeout_s = 5.0"]
    for k, v in extra.items():
        if k == "prices":
            continue
        lines.append(f"{k} = {json.dumps(v)}")
    prices = extra.get("prices", {"input": 2.0, "cached_input": 0.5, "cache_write": 2.5, "output": 8.0})
    lines.append(f"[models.{name}.prices]")
    lines += [f"{k} = {v}" for k, v in prices.items()]
    p = cwd / "assay.toml"
    prev = p.read_text() if p.exists() else ""
    p.write_text(prev + "\n".join(lines) + "\n")


def report(cwd: Path, *extra: str) -> dict[str, Any]:
    out = cwd / "report.json"
    r = assay("report", "--json", str(out), *extra, cwd=cwd)
    assert r.returncode == 0, r.stderr
    return json.loads(out.read_text())


def stop_process(proc: subprocess.Popen[Any], timeout: float = 10) -> None:
    """End a server a test started (SIGTERM, then SIGKILL after `timeout` seconds) and reap it."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def free_port() -> int:
    """A loopback port nobody listens on right now (bound and released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def clean_env() -> dict[str, str]:
    """This environment without provider keys or assay settings, as a newcomer's shell."""
    return {k: v for k, v in os.environ.items() if _inherited(k)}


def run_docs_bash(cwd: Path, shell: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """A docs page's bash block run as is in `cwd`, with `assay` on PATH running this checkout
    (a newcomer's shell: no provider keys, no assay settings)."""
    bin_dir = cwd / "bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "assay"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m assay.cli "$@"\n')
    shim.chmod(0o755)
    env = clean_env()
    env.update(PYTHONPATH=str(REPO / "src"), PATH=f"{bin_dir}:{os.path.dirname(sys.executable)}:{env.get('PATH', '')}")
    return subprocess.run(["bash", "-euo", "pipefail", "-c", shell], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=timeout)


def start_server(cwd: Path, *args: str, port: int, log: Path, timeout: float = 60) -> subprocess.Popen[bytes]:
    """`assay serve ARGS` on 127.0.0.1:`port`, its output in `log`; returns once /healthz says ok."""
    with open(log, "ab") as out:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen([sys.executable, "-m", "assay.cli", "serve", "--host", "127.0.0.1", "--port",
                                 str(port), *args], cwd=cwd, env=clean_env(), stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError, ValueError), \
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            if r.status == 200 and json.loads(r.read())["status"] == "ok":
                return proc
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_process(proc)
            raise AssertionError(f"the server did not come up:\n{log.read_text(errors='replace')}")
        time.sleep(0.1)


@contextlib.contextmanager
def served(cwd: Path, *args: str, log_name: str = "serve.log") -> Iterator[tuple[str, int, subprocess.Popen[bytes]]]:
    """A running `assay serve ARGS` for the block: (base URL, port, process); stopped after."""
    port = free_port()
    proc = start_server(cwd, *args, port=port, log=cwd / log_name)
    try:
        yield f"http://127.0.0.1:{port}", port, proc
    finally:
        stop_process(proc, timeout=20)


def live_processes() -> Iterator[tuple[int, list[bytes]]]:
    """(pid, the fields of /proc/PID/stat after its name: state, ppid, pgrp, ...) of every live
    process (zombies left out); one that ends while this reads is passed over."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if fields and fields[0] not in (b"Z", b"X"):
            yield int(name), fields
