"""The stakeholder service: a StakeholderWorld behind a Unix socket, reached from the sandbox.

The socket lives in a per-run directory outside the workspace, bound read-only into the
sandbox at `/run/assay/` (a Unix socket works across bubblewrap's network namespace; TCP to
the host does not). `bin/ask` and `bin/pilot` (`assay/env/inside/ask.py`, installed by `install_clients`) are its clients.

Protocol: JSON lines over the socket. A client sends one request per line (one per connection
is the usual use; several are answered in order) and gets one reply line per request:

    {"op": "who"}                                  -> the directory
    {"op": "ask", "to": "<id>", "question": "..."} -> the person's reply
    {"op": "now"}                                  -> the customer's date and time
    {"op": "wait", "duration": "6h"|"2d"|"90m"}    -> let time pass (or "hours": <number>)
    {"op": "inbox"}                                -> read the inbox
    {"op": "pilot", "day": <n, optional>}          -> one trial day

    reply: {"ok": true, "text": "..."}  or  {"ok": false, "error": "..."}

Garbage (not JSON, not an object, unknown op, missing fields, an oversized line) gets an
`ok: false` reply; nothing a client sends can stop the server. Model-backed routers and
the pilot (which runs delivered code) run in a worker thread so other clients are served
meanwhile; the world's own lock keeps its state consistent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from assay import fs
from assay.env.inside import source
from assay.env.net.unixserver import shutdown
from assay.people.world import AskError, StakeholderWorld

__all__ = ["ASK_SCRIPT", "MAX_REQUEST_BYTES", "PILOT_SCRIPT", "SOCKET_NAME", "StakeholderServer", "install_clients"]

log = logging.getLogger(__name__)

SOCKET_NAME = "ask.sock"
MAX_REQUEST_BYTES = 256 * 1024
REQUEST_TIMEOUT_S = 60.0


class StakeholderServer:
    """Serves one world on one Unix socket; `await start()`, `await stop()`."""

    def __init__(self, world: StakeholderWorld, socket_path: str | Path) -> None:
        self.world = world
        self.socket_path = Path(socket_path)
        self._server: asyncio.base_events.Server | None = None
        self._conns: set[asyncio.Task[Any]] = set()
        self.requests = 0
        self.errors = 0

    async def start(self) -> None:
        d = self.socket_path.parent
        d.mkdir(parents=True, exist_ok=True)
        os.chmod(d, 0o755)  # the sandbox uid must reach the socket through the read-only bind
        with contextlib.suppress(FileNotFoundError):
            st = os.lstat(self.socket_path)
            if not stat.S_ISSOCK(st.st_mode):
                raise FileExistsError(f"{self.socket_path} exists and is not a socket")
            os.unlink(self.socket_path)
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.socket_path),
                                                       limit=MAX_REQUEST_BYTES)
        os.chmod(self.socket_path, 0o666)

    async def stop(self) -> None:
        if self._server is not None:
            await shutdown(self._server, self._conns)
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)

    async def __aenter__(self) -> StakeholderServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ------------------------------------------------------------------ connections

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._conns.add(task)
        try:
            while True:
                try:
                    line = await asyncio.wait_for(reader.readline(), REQUEST_TIMEOUT_S)
                except (ValueError, asyncio.LimitOverrunError):
                    await self._send(writer, {"ok": False, "error": "request too large"})
                    return
                except (TimeoutError, ConnectionError):
                    return
                if not line:
                    return
                if not line.strip():
                    continue
                reply = await self.handle_line(line)
                if not await self._send(writer, reply):
                    return
        except asyncio.CancelledError:
            pass
        except Exception:  # never let one client take the service down
            log.exception("stakeholder connection failed")
        finally:
            if task is not None:
                self._conns.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, reply: dict[str, Any]) -> bool:
        try:
            writer.write((json.dumps(reply, ensure_ascii=False) + "\n").encode("utf-8"))
            await writer.drain()
            return True
        except (ConnectionError, OSError):
            return False

    async def handle_line(self, line: bytes) -> dict[str, Any]:
        self.requests += 1
        try:
            req = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            self.errors += 1
            return {"ok": False, "error": "bad request: not a JSON object"}
        try:
            call, slow = self._dispatch(req)
            text = await asyncio.to_thread(call) if slow else call()
            return {"ok": True, "text": text}
        except AskError as exc:
            self.errors += 1
            return {"ok": False, "error": str(exc)}
        except _BadRequest as exc:
            self.errors += 1
            return {"ok": False, "error": f"bad request: {exc}"}
        except Exception as exc:
            self.errors += 1
            log.exception("stakeholder request failed: %r", req)
            return {"ok": False, "error": f"internal error: {type(exc).__name__}"}

    # ------------------------------------------------------------------ requests

    def _dispatch(self, req: Any) -> tuple[Callable[[], str], bool]:  # noqa: C901 (one branch per operation of the JSON-lines protocol)
        if not isinstance(req, dict):
            raise _BadRequest("not a JSON object")
        op = req.get("op")
        w = self.world
        blocking = bool(getattr(w.router, "blocking", False))
        if op == "who":
            return w.who, False
        if op == "now":
            return w.now, False
        if op == "inbox":
            return w.read_inbox, False
        if op == "ask":
            to = req.get("to", req.get("id"))
            question = req.get("question", req.get("message"))
            if not isinstance(to, str) or not to:
                raise _BadRequest("`to` (a person id) is required")
            if not isinstance(question, str) or not question.strip():
                raise _BadRequest("`question` (a non-empty string) is required")
            return (lambda: w.ask(to, question)), blocking
        if op == "wait":
            if "hours" in req:
                hours = req["hours"]
                if isinstance(hours, bool) or not isinstance(hours, int | float):
                    raise _BadRequest("`hours` must be a number")
                return (lambda: w.wait(float(hours))), False
            duration = req.get("duration")
            if not isinstance(duration, str):
                raise _BadRequest("`duration` (like 6h, 2d or 90m) is required")
            return (lambda: w.wait(duration)), False
        if op == "pilot":
            day = req.get("day")
            if day is not None:
                if isinstance(day, bool) or not isinstance(day, int):
                    raise _BadRequest("`day` must be an integer")
                if day != w.next_pilot_day and day <= w.pilot_spec.max_runs:
                    raise AskError(f"the next trial day is day {w.next_pilot_day}")
            return w.pilot, True
        raise _BadRequest(f"unknown op {op!r} (expected who, ask, now, wait, inbox or pilot)")


class _BadRequest(Exception):
    pass


ASK_SCRIPT = source("ask.py")
PILOT_SCRIPT = ASK_SCRIPT.replace('\nMODE = "ask"', '\nMODE = "pilot"', 1)


def install_clients(workspace: Path, *, pilot: bool) -> None:
    """Write bin/ask (and bin/pilot when the scenario has a pilot) into a workspace, mode 0755,
    never through a link the workspace holds."""
    fs.write_file(Path(workspace), "bin/ask", ASK_SCRIPT, mode=0o755)
    if pilot:
        fs.write_file(Path(workspace), "bin/pilot", PILOT_SCRIPT, mode=0o755)
