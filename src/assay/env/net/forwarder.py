"""Loopback-to-Unix-socket forwarder, started inside the sandbox with each command.

Case code written for upstream FDE-Gym reaches the company LLM gateway and the customer's
services at `http://127.0.0.1:PORT` (`system/config/llm.json`, `services.json`). Inside
bubblewrap there is no route to the host's loopback, by design; the services listen on Unix
sockets in the run directory instead, bound read-only at `/run/assay/`. `assay/env/inside/forwarder.py`
(stdlib only, run as the sandbox uid) listens on the sandbox's own 127.0.0.1:PORT and relays
every TCP connection byte for byte to its Unix socket:

    python3 forwarder.py 8001=/run/assay/llm.sock 8002=/run/assay/svc_crm.sock

It prints `ready` once every port listens (or an error line and exits 1). `wrap_command`
prefixes a command so that it gets its own forwarder; bubblewrap kills the forwarder with
the rest of the sandbox when the command ends.
"""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Sequence
from pathlib import Path

from assay.env.inside import source

__all__ = ["FORWARDER_NAME", "FORWARDER_SCRIPT", "install_forwarder", "wrap_command"]

FORWARDER_NAME = "forwarder.py"

FORWARDER_SCRIPT = source(FORWARDER_NAME)
"""The forwarder's program (`assay/env/inside/forwarder.py`), run as the sandbox uid."""


def install_forwarder(directory: str | Path) -> Path:
    """Write FORWARDER_SCRIPT as `directory/forwarder.py` (0644), e.g. into the run's socket dir
    that is bound read-only at /run/assay, so it is `/run/assay/forwarder.py` inside."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    path = d / FORWARDER_NAME
    if path.is_symlink() or (path.exists() and not stat.S_ISREG(os.lstat(path).st_mode)):
        raise FileExistsError(f"{path} exists and is not a regular file")
    tmp = d / f".{FORWARDER_NAME}.tmp"
    tmp.write_text(FORWARDER_SCRIPT, encoding="utf-8")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return path


def wrap_command(command: str, pairs: Sequence[tuple[int, str]], script_path_inside: str, *,
                 python: str = "python3", wait_s: float = 2.0) -> str:
    """A shell command that starts the forwarder for `pairs` in the background, waits (at most
    about `wait_s`) until it listens, then runs `command` in the same shell, so the exit status
    is the command's own, exactly as unwrapped.

    The forwarder is started from a subshell, so it is no job of the command's shell: a `wait`
    in the command does not wait for it. Should it not come up, a line on stderr says why and
    the command runs anyway (it may not need the services). For an argv rather than a shell
    command, pass `shlex.join(argv)`.
    """
    if not pairs:
        return command
    args = []
    for port, sock in pairs:
        if not isinstance(port, int) or not 0 < port < 65536:
            raise ValueError(f"bad port {port!r}")
        if not sock or "\0" in sock or "\n" in sock:
            raise ValueError(f"bad socket path {sock!r}")
        args.append(shlex.quote(f"{port}={sock}"))
    tries = max(1, int(wait_s / 0.01))
    prelude = (
        "_assay_f=/tmp/.assay-forwarder-$$.log\n"
        f"( {shlex.quote(python)} -I -S {shlex.quote(script_path_inside)} {' '.join(args)} "
        '>"$_assay_f" 2>&1 </dev/null & )\n'
        "_assay_i=0\n"
        "while :; do\n"
        '  if [ -s "$_assay_f" ] && read -r _assay_l < "$_assay_f"; then break; fi\n'
        "  _assay_l=\n"
        f'  [ "$_assay_i" -ge {tries} ] && break\n'
        "  _assay_i=$((_assay_i + 1))\n"
        "  sleep 0.01\n"
        "done\n"
        '[ "$_assay_l" = ready ] || '
        'echo "assay: the service forwarder did not start: ${_assay_l:-no answer}" >&2\n'
        "unset _assay_f _assay_i _assay_l\n"
    )
    return prelude + command
