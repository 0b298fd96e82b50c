"""What the small asyncio servers of a run share (stakeholders, relays, the LLM gateway).

Every run of a campaign serves its sandbox through a few sockets (`ask.sock`, `llm.sock`,
`svc_<name>.sock`) from the one harness process that serves every other run too. An agent
controls the client side of those sockets, so each server bounds what a client can take from
that shared process:

- **A cap on open connections per server** (`MAX_CONNECTIONS`, 64). `Connections.guard`
  wraps a server's per-connection handler: past the cap a new connection is answered at once
  with the server's one refusal line and closed, without waiting on the client, so a flood
  of connections holds at most the cap plus one accept batch (the listen backlog,
  `BACKLOG`) of the harness's descriptors, however many the client opens. The rest wait in
  the kernel's listen queue and cost the harness nothing. Refusals are counted (`refused`)
  and logged, the first one at once and then at most one summary line per
  `LOG_INTERVAL_S` (`LogThrottle`, which the servers also use for their other per-client
  log lines), so a flood cannot flood the harness's log either.
- **Timeouts per connection** are each server's own (its protocol decides what idle means):
  the stakeholder server's read and write timeouts, the relays' idle timeout.
- **The process's descriptor limit.** The first `Connections` of a process raises the soft
  `RLIMIT_NOFILE` to the hard limit (`raise_open_file_limit`), so that the cap of every
  server of every concurrent run (a scenario run: `ask.sock`, and two descriptors per
  relayed connection) fits beside what the harness itself keeps open.

The company LLM gateway (`assay.env.net.gateway`) takes the cap the same way, with a lower
one (each of its connections may buffer a 32 MiB request) and its own request timeouts.

    conns = Connections("ask.sock", refusal=b'{"ok": false, "error": "busy"}\\n')
    server = await listen_unix(path, conns.guard(serve), limit=MAX_REQUEST_BYTES)
    ...
    await conns.close(server)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import resource
import stat
import time
from collections.abc import Awaitable, Callable, Collection
from pathlib import Path
from typing import Any

__all__ = ["BACKLOG", "LOG_INTERVAL_S", "MAX_CONNECTIONS", "Connections", "LogThrottle", "listen_unix",
           "raise_open_file_limit", "shutdown"]

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 64
BACKLOG = 64
LOG_INTERVAL_S = 10.0

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
Callback = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None] | None]


@functools.cache
def raise_open_file_limit() -> tuple[int, int]:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit (once); the (soft, hard) after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, hard, exc)
        else:
            log.info("open-file limit raised from %d to %d", soft, hard)
            soft = hard
    return soft, hard


async def shutdown(server: asyncio.AbstractServer, conns: Collection[asyncio.Task[Any]]) -> None:
    """Stop accepting, cancel the open connections and wait until they and the server are gone."""
    server.close()
    for t in list(conns):
        t.cancel()
    for t in list(conns):
        with contextlib.suppress(asyncio.CancelledError, OSError, ConnectionError):
            await t
    with contextlib.suppress(OSError):
        await server.wait_closed()


async def listen_unix(path: str | Path, callback: Callback, *, limit: int = 65536) -> asyncio.Server:
    """A Unix-socket server at `path`, mode 0666 (the sandbox uid connects through a read-only
    bind). A stale socket there is replaced; anything else there is refused (FileExistsError)."""
    path = Path(path)
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise FileExistsError(f"{path} exists and is not a socket")
        os.unlink(path)
    server = await asyncio.start_unix_server(callback, path=str(path), limit=limit, backlog=BACKLOG)
    os.chmod(path, 0o666)
    return server


class LogThrottle:
    """Counts events of one kind and says when one may be logged: the first, then at most one per
    `interval_s`; each logged line can carry how many happened since the previous one."""

    def __init__(self, interval_s: float = LOG_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.count = 0
        self._logged = 0
        self._at: float | None = None

    def note(self) -> int | None:
        """Count one event; the number of events since the last logged one when this one may be
        logged, else None."""
        self.count += 1
        now = time.monotonic()
        if self._at is not None and now - self._at < self.interval_s:
            return None
        since, self._logged, self._at = self.count - self._logged, self.count, now
        return since

    @property
    def unlogged(self) -> int:
        """Events counted since the last one logged."""
        return self.count - self._logged


class Connections:
    """The open connections of one server: the cap, their tasks (for `close`), the counts.

    `name` names the server in log lines; `refusal` is what a connection past the cap gets
    before it is closed (one line of the server's protocol, or nothing).
    """

    def __init__(self, name: str, *, limit: int = MAX_CONNECTIONS, refusal: bytes = b"") -> None:
        if limit < 1:
            raise ValueError("a server needs room for at least one connection")
        raise_open_file_limit()
        self.name = name
        self.limit = limit
        self.refusal = refusal
        self.tasks: set[asyncio.Task[Any]] = set()
        self.accepted = 0
        self._refused = LogThrottle()
        self._failed = LogThrottle()  # connections whose handler raised (logged with the traceback)
        self._open = 0  # admitted and not finished (counted before their task first runs)
        self._closing = False

    @property
    def open(self) -> int:
        return self._open

    @property
    def refused(self) -> int:
        return self._refused.count

    @property
    def failed(self) -> int:
        return self._failed.count

    def guard(self, serve: Handler) -> Callback:
        """The server's `client_connected_cb`: `serve(reader, writer)` for a connection within the
        cap (the writer is closed when it returns), the refusal for one past it."""

        def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Awaitable[None] | None:
            if self._closing or self._open >= self.limit:
                self._refuse(writer)
                return None
            self._open += 1
            self.accepted += 1
            return self._run(serve, reader, writer)

        return connected

    async def _run(self, serve: Handler, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self.tasks.add(task)
        try:
            if not self._closing:
                await serve(reader, writer)
        except asyncio.CancelledError:
            # Cancelled by close(). Not re-raised: on Python 3.11 the streams layer's done-callback
            # calls task.exception() on the task, which raises for a cancelled one.
            pass
        except Exception:  # one client never takes the server down; a handler bug is logged
            since = self._failed.note()
            if since is not None:
                log.exception("%s: connection failed (%d failure(s) since the last report)", self.name, since)
        finally:
            self._open -= 1
            if task is not None:
                self.tasks.discard(task)
            writer.close()

    def _refuse(self, writer: asyncio.StreamWriter) -> None:
        transport = writer.transport
        if self.refusal:
            transport.write(self.refusal)  # a fresh socket's buffer takes one line at once
        if transport.get_write_buffer_size():
            transport.abort()  # never hold a descriptor for a client that does not read
        else:
            transport.close()
        since = self._refused.note()
        if since is not None:
            log.warning("%s: %d connections open (the cap); refused %d new connection(s) (%d in all)",
                        self.name, self._open, since, self.refused)

    async def close(self, server: asyncio.AbstractServer) -> None:
        """Stop accepting, cancel the open connections, wait until they and the server are gone."""
        self._closing = True
        try:
            await shutdown(server, self.tasks)
        finally:
            self._closing = False  # the server may be started again
        if self._refused.unlogged:
            log.warning("%s: refused %d connection(s) past the cap of %d in all",
                        self.name, self.refused, self.limit)
