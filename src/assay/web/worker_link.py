"""The server's end of one play session's worker process (`assay.web.playworker`).

The worker is started as `python -m assay.web.worker_main` with one end of a socketpair; the
server writes the launch, then requests (one JSON object a line, each with an id), and reads
the worker's replies (matched to their requests by id) and events (handed on). A worker is
stopped with SIGTERM (it ends its run cleanly) and, past STOP_GRACE_S, SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from assay.web.playworker import MAX_LINE_BYTES, Launch, encode_launch

__all__ = ["STOP_GRACE_S", "WorkerGone", "WorkerLink"]

#: how long a worker may take to stop after SIGTERM before it is killed
STOP_GRACE_S = 2.0


class WorkerGone(RuntimeError):
    """The worker exited (stopped, restarted or crashed) before it answered."""


class WorkerLink:
    """The server's end of one worker process: requests matched to replies, events handed on."""

    def __init__(self, proc: asyncio.subprocess.Process, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, on_event: Callable[[dict[str, Any]], None]) -> None:
        self.proc = proc
        self.reader = reader
        self.writer = writer
        self.on_event = on_event
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.closed = False
        self._n = 0

    @classmethod
    async def spawn(cls, launch: Launch, on_event: Callable[[dict[str, Any]], None]) -> WorkerLink:
        ours, theirs = socket.socketpair()
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "assay.web.worker_main", str(theirs.fileno()), pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        reader, writer = await asyncio.open_unix_connection(sock=ours, limit=MAX_LINE_BYTES)
        link = cls(proc, reader, writer, on_event)
        writer.write(encode_launch(launch))
        await writer.drain()
        return link

    async def pump(self) -> None:
        """Read the worker's lines until it closes its end (it exits, or was stopped)."""
        try:
            while True:
                line = await self.reader.readline()
                if not line:
                    return
                msg = json.loads(line)
                if "id" in msg:
                    fut = self.pending.pop(int(msg["id"]), None)
                    if fut is not None and not fut.done():
                        fut.set_result(msg)
                else:
                    self.on_event(msg)
        except (ConnectionError, ValueError) as e:  # a broken line (a worker fault): the worker is ended
            sys.stderr.write(f"assay serve: a play worker's channel broke ({type(e).__name__}: {e}); stopping it\n")
        finally:
            self.closed = True
            for fut in self.pending.values():
                if not fut.done():
                    fut.set_exception(WorkerGone())
            self.pending.clear()
            self.writer.close()

    async def request(self, op: str, timeout: float, **fields: Any) -> dict[str, Any]:
        """The worker's reply (TimeoutError past `timeout`, `WorkerGone` when it exits first)."""
        if self.closed or self.writer.is_closing():
            raise WorkerGone()
        self._n += 1
        n = self._n
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[n] = fut
        try:
            self.writer.write(json.dumps({"id": n, "op": op, **fields}).encode() + b"\n")
            return await asyncio.wait_for(fut, timeout)
        finally:
            self.pending.pop(n, None)

    async def stop(self, grace: float = STOP_GRACE_S) -> None:
        """SIGTERM (the worker ends its run cleanly), SIGKILL after `grace` seconds; reaped."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), grace)
            except TimeoutError:  # stuck (a pattern in C, a blocked call): killed; its lifeline cleans up
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                await self.proc.wait()
        self.writer.close()
