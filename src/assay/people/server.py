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
the pilot (which runs delivered code) run in the server's own two worker threads, so other
clients are served meanwhile and a run's slow requests never occupy the threads other runs'
services share; the world's own lock keeps its state consistent.

Bounds (the client is the agent, the server lives in the harness process every run shares):

- at most `MAX_CONNECTIONS` connections at once (`assay.env.net.unixserver.Connections`);
  past that a connection gets `{"ok": false, "error": "... busy ...", "busy": true}` and is
  closed at once (`bin/ask` retries a busy service for a few seconds);
- a request line is at most `MAX_REQUEST_BYTES` (else `request too large`) and must arrive
  within `READ_TIMEOUT_S` (else the connection is closed and counted in `timeouts`); a reply
  the client does not take within `WRITE_TIMEOUT_S` closes the connection;
- a line that does not parse, however it fails (not JSON, not UTF-8, a number past Python's
  integer-digit limit, nesting deeper than the parser's recursion limit, NaN or Infinity),
  is refused as `{"ok": false, "error": "bad request: ..."}`, with no traceback logged;
- bytes that are not UTF-8 and JSON escapes of lone surrogates reach the world as escaped
  text (`assay.record.safe_text`), so such a question is answered and recorded;
- the world bounds a question's length and the events one run records
  (`assay.people.world`: `MAX_QUESTION_CHARS`, `MAX_EVENTS`), refused as `ok: false`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from assay.env.inside import source
from assay.env.net.unixserver import MAX_CONNECTIONS, Connections, LogThrottle, listen_unix
from assay.fs.writes import write_file
from assay.people.world import AskError, StakeholderWorld
from assay.record import safe_text

__all__ = ["ASK_SCRIPT", "MAX_REQUEST_BYTES", "PILOT_SCRIPT", "SOCKET_NAME", "StakeholderServer", "install_clients"]

log = logging.getLogger(__name__)

SOCKET_NAME = "ask.sock"
MAX_REQUEST_BYTES = 256 * 1024
READ_TIMEOUT_S = 60.0  # a request line must arrive within this (also the idle time allowed between two)
WRITE_TIMEOUT_S = 30.0
SLOW_WORKERS = 2  # threads per server for model-backed routing and pilot days


class StakeholderServer:
    """Serves one world on one Unix socket; `await start()`, `await stop()`."""

    def __init__(self, world: StakeholderWorld, socket_path: str | Path, *,
                 max_connections: int = MAX_CONNECTIONS) -> None:
        self.world = world
        self.socket_path = Path(socket_path)
        busy = {"ok": False, "busy": True,
                "error": f"the stakeholder service is busy: {max_connections} connections of this run are "
                         "open, the most it serves at once; try again in a moment"}
        self.conns = Connections(f"{SOCKET_NAME} ({self.socket_path.parent})", limit=max_connections,
                                 refusal=(json.dumps(busy) + "\n").encode())
        self._server: asyncio.base_events.Server | None = None
        self._executor: ThreadPoolExecutor | None = None
        self.requests = 0
        self.errors = 0  # requests answered ok: false
        self.timeouts = 0  # connections closed because no complete request line came in time
        self._failures = LogThrottle()  # requests that failed inside the service (logged, throttled)

    async def start(self) -> None:
        d = self.socket_path.parent
        d.mkdir(parents=True, exist_ok=True)
        os.chmod(d, 0o755)  # the sandbox uid must reach the socket through the read-only bind
        self._executor = ThreadPoolExecutor(max_workers=SLOW_WORKERS, thread_name_prefix="ask")
        self._server = await listen_unix(self.socket_path, self.conns.guard(self._serve), limit=MAX_REQUEST_BYTES)

    async def stop(self) -> None:
        if self._server is not None:
            await self.conns.close(self._server)
            self._server = None
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)  # a pilot day in progress ends on its own
            self._executor = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)

    async def __aenter__(self) -> StakeholderServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ------------------------------------------------------------------ connections

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                line = await asyncio.wait_for(reader.readline(), READ_TIMEOUT_S)
            except (ValueError, asyncio.LimitOverrunError):
                await self._send(writer, {"ok": False, "error": "request too large"})
                return
            except TimeoutError:
                self.timeouts += 1
                return
            except ConnectionError:
                return  # the client went away
            if not line:
                return
            if not line.strip():
                continue
            reply = await self.handle_line(line)
            if not await self._send(writer, reply):
                return

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, reply: dict[str, Any]) -> bool:
        """Write one reply line (its text escaped to valid UTF-8); False when the client is gone
        or does not take it within WRITE_TIMEOUT_S."""
        clean = {k: safe_text(v) if isinstance(v, str) else v for k, v in reply.items()}
        try:
            writer.write((json.dumps(clean, ensure_ascii=False) + "\n").encode("utf-8"))
            await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_S)
            return True
        except (ConnectionError, OSError, TimeoutError):
            return False

    async def handle_line(self, line: bytes) -> dict[str, Any]:
        self.requests += 1
        req: Any = None
        try:
            req = _parse(line)
            call, slow = self._dispatch(req)
            if slow:
                text = await asyncio.get_running_loop().run_in_executor(self._executor, call)
            else:
                text = call()
            return {"ok": True, "text": text}
        except AskError as exc:
            self.errors += 1
            return {"ok": False, "error": str(exc)}
        except _BadRequest as exc:
            self.errors += 1
            return {"ok": False, "error": f"bad request: {exc}"}
        except Exception as exc:
            self.errors += 1
            since = self._failures.note()
            if since is not None:
                log.exception("stakeholder request failed (op %s; %d failure(s) since the last report)",
                              _shown(req.get("op") if isinstance(req, dict) else req), since)
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
                try:
                    h = float(hours)
                except OverflowError:
                    raise _BadRequest("`hours` is out of range") from None
                return (lambda: w.wait(h)), False
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
        raise _BadRequest(f"unknown op {_shown(op)} (expected who, ask, now, wait, inbox or pilot)")


class _BadRequest(Exception):
    pass


def _no_constant(name: str) -> Any:
    raise _BadRequest(f"{name} is not a number this service takes")


def _parse(line: bytes) -> Any:
    """The request of one line; _BadRequest however the line fails to parse."""
    text = line.decode("utf-8", errors="surrogateescape")  # the world escapes what is not UTF-8
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError:
        raise _BadRequest("not a JSON object") from None
    except RecursionError:
        raise _BadRequest("not a JSON object: nested too deeply") from None
    except ValueError:  # an integer past sys.get_int_max_str_digits()
        raise _BadRequest("not a JSON object: a number with too many digits") from None


def _shown(value: Any) -> str:
    """A client's value as a reply or a log line may quote it: short, never a deep repr."""
    if isinstance(value, str):
        return repr(value if len(value) <= 40 else value[:37] + "...")
    if value is None or isinstance(value, bool | float):
        return repr(value)
    return f"<{type(value).__name__}>"


ASK_SCRIPT = source("ask.py")
PILOT_SCRIPT = ASK_SCRIPT.replace('\nMODE = "ask"', '\nMODE = "pilot"', 1)


def install_clients(workspace: Path, *, pilot: bool) -> None:
    """Write bin/ask (and bin/pilot when the scenario has a pilot) into a workspace, mode 0755,
    never through a link the workspace holds."""
    write_file(Path(workspace), "bin/ask", ASK_SCRIPT, mode=0o755)
    if pilot:
        write_file(Path(workspace), "bin/pilot", PILOT_SCRIPT, mode=0o755)
