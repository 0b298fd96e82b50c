"""One play session's run, in a process of its own: `python -m assay.web.worker_main FD`.

The web server never runs a play session's work on its own event loop: each session's run
(workspace, sandboxed commands, file tools, stakeholders, grading, storing) is an ordinary
`execute_run` in this worker process, so a session whose action holds its process (a
pattern run in C, a slow grade, a stuck system call) delays no other user's request and no
other session (`assay.web.human.PlayManager` starts, asks and stops the workers).

The server and the worker talk over one Unix socket (`FD`, one end of a socketpair), one
JSON object a line:

- server → worker, first line: `{"launch": BASE64}`, a pickled `Launch` (the trusted
  server's own objects: the task, the stored session, the store's URL); then requests
  `{"id": N, "op": "act" | "view" | "tree", ...}`;
- worker → server: replies `{"id": N, "ok": true, ...}` / `{"id": N, "ok": false,
  "error": TEXT, "ended": BOOL}`, and events: `{"event": "status", "ready", "finished",
  "turns", "env"?}` whenever one of those changes (`env`, the brief and the offered tools,
  once the run is ready), and last `{"event": "done", "run_id"?, "error"?}`.

Every request runs in a task of its own, so a view is answered while an action runs. The
worker stops its run (the run ends as interrupted, its workspace removed, nothing stored)
on SIGTERM or when the server's end of the socket closes (the server is gone).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import pickle
import signal
import socket
import sys
from dataclasses import dataclass
from typing import Any

from assay.agent.human import Action, HumanAgent, HumanFactory, RunEnded
from assay.campaign.options import RunOptions
from assay.campaign.plan import PlannedRun, build_plan
from assay.campaign.runner import RunContext, execute_run
from assay.llm.messages import ToolCall
from assay.record import RunRecord
from assay.store import Store
from assay.store.play import StoredPlay
from assay.task.model import Task

__all__ = ["LIVE_KINDS", "MAX_LINE_BYTES", "Launch", "encode_launch", "plan_run"]

#: the longest line either side sends (a view of a long transcript, with its images)
MAX_LINE_BYTES = 256 * 1024 * 1024
#: transcript kinds a person sees live, as a model would (stakeholder ledger lines are the
#: harness's record; the person reads the replies in `bin/ask`'s output, like a model).
LIVE_KINDS = {"system", "user", "assistant", "tool_call", "tool_result", "harness", "error"}
STATUS_EVERY_S = 0.1


@dataclass
class Launch:
    """What a worker needs to run one session (new, or replayed after a restart)."""

    task: Task
    play: StoredPlay
    store_url: str
    elapsed_s: float


def encode_launch(launch: Launch) -> bytes:
    return json.dumps({"launch": base64.b64encode(pickle.dumps(launch)).decode()}).encode() + b"\n"


def plan_run(task: Task, factory: HumanFactory, campaign: str, level: str | None,
             epoch: int | None = None) -> tuple[PlannedRun, RunOptions]:
    """The one planned run of a person's play (ValueError naming why there is none)."""
    options = RunOptions(campaign=campaign, level=level, epochs=1, concurrency=1, agents=[factory.spec])
    plan = build_plan([task], [factory], options)
    if not plan.runs:
        reason = plan.skipped[0][2] if plan.skipped else "nothing to run"
        raise ValueError(f"task {task.id}: {reason}")
    planned = plan.runs[0]
    if epoch is not None:
        planned = PlannedRun(task=task, agent=factory, level=planned.level, epoch=epoch,
                             key=planned.key.model_copy(update={"epoch": epoch}))
    return planned, options


class _Channel:
    """The worker's end of the socket: one JSON line at a time."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.lock = asyncio.Lock()

    async def send(self, msg: dict[str, Any]) -> None:
        line = json.dumps(msg, default=str).encode() + b"\n"
        async with self.lock:
            if self.writer.is_closing():
                return  # the server is gone; the run is being stopped
            self.writer.write(line)
            with contextlib.suppress(ConnectionError):  # the server closed its end meanwhile
                await self.writer.drain()


class _Worker:
    def __init__(self, launch: Launch, channel: _Channel) -> None:
        self.launch = launch
        self.channel = channel
        play = launch.play
        replay = [Action(kind=a.kind, tool=a.tool, args=dict(a.args), text=a.text) for a in play.actions]
        self.factory = HumanFactory(play.name, replay=replay, elapsed_s=launch.elapsed_s)
        self.stopping = False  # the run is being stopped: an action cut short by it is not an answer
        self.mirrored = 0  # the server's mirror holds the transcript's events before this index

    @property
    def agent(self) -> HumanAgent:
        return self.factory.agent

    def status(self) -> dict[str, Any]:
        a = self.agent
        return {"ready": a.ready.is_set(), "finished": a.finished, "turns": a.turns}

    def env_facts(self) -> dict[str, Any] | None:
        """What the page shows of the run beside its transcript (fixed once the run is ready)."""
        env = self.agent.env
        if env is None:
            return None
        return {"brief": env.prompt, "messages": env.messages if env.messages and len(env.messages) > 1 else None,
                "images": [f"data:{i.media_type};base64,{i.data_b64}" for i in env.images],
                "tools": list(env.tools.names), "has_workspace": env.workspace is not None,
                "limits": dataclasses.asdict(env.limits)}

    async def report_status(self) -> None:
        """Tell the server whenever ready / finished / turns change (the page's state)."""
        last: dict[str, Any] | None = None
        sent_env = False
        while True:
            now = self.status()
            if now != last:
                msg: dict[str, Any] = {"event": "status", **now}
                if now["ready"] and not sent_env:
                    msg["env"] = self.env_facts()
                    sent_env = True
                await self.channel.send(msg)
                last = now
            await asyncio.sleep(STATUS_EVERY_S)

    def view(self, since: int) -> dict[str, Any]:
        env = self.agent.env
        if env is None:
            return {"events": [], "next": since, "elapsed_s": 0.0, **self.status()}
        events = env.transcript.events
        return {"events": [[i, e.wire()] for i, e in enumerate(events[since:], since) if e.kind in LIVE_KINDS],
                "next": len(events), **self.status(),
                "elapsed_s": round(env.elapsed_minutes() * 60, 1) if self.agent.ready.is_set() else 0.0}

    async def answer(self, req: dict[str, Any]) -> None:
        rid = req.get("id")
        try:
            reply = await self._do(req)
        except RunEnded as e:
            reply = {"ok": False, "ended": True, "error": str(e)}
        except (KeyError, TypeError, ValueError) as e:  # a malformed request of the server: said, not fatal
            reply = {"ok": False, "ended": False, "error": f"bad request: {e}"}
        await self.channel.send({"id": rid, **reply})

    async def _do(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req["op"]
        if op == "view":
            since = max(0, int(req.get("since", 0)))
            self.mirrored = max(self.mirrored, since)  # the server asks from the end of its mirror
            return {"ok": True, **self.view(since)}
        if op == "act":
            a = req["action"]
            out = await self.agent.act(Action(kind=str(a["kind"]), tool=str(a.get("tool", "")),
                                              args=dict(a.get("args") or {}), text=str(a.get("text", ""))))
            if self.stopping:  # cut short by the stop: not a result, and not to be recorded and replayed
                raise RunEnded("the server stopped while this action ran; it was not kept")
            return {"ok": True, "output": out}
        if op == "tree":
            env = self.agent.env
            if env is None:
                raise RunEnded("the workspace is not ready yet")
            listing = await env.tools.execute(ToolCall(id="tree", name="list_files",
                                                       arguments={"path": str(req.get("path") or ".")}))
            return {"ok": True, "listing": listing}
        raise ValueError(f"unknown op {op!r}")

    async def run(self) -> RunRecord:
        play = self.launch.play
        planned, options = plan_run(self.launch.task, self.factory, play.campaign, play.level, play.epoch)
        store = Store(self.launch.store_url)
        try:
            return await execute_run(planned, RunContext(store=store, options=options))
        finally:
            store.close()


async def _serve(sock: socket.socket) -> int:
    reader, writer = await asyncio.open_unix_connection(sock=sock, limit=MAX_LINE_BYTES)
    channel = _Channel(writer)
    first = await reader.readline()
    if not first:
        return 0  # the server went away before it said what to run
    launch: Launch = pickle.loads(base64.b64decode(json.loads(first)["launch"]))  # the server's own objects, on a private socketpair
    worker = _Worker(launch, channel)
    loop = asyncio.get_running_loop()
    runner = loop.create_task(worker.run())

    def stop() -> None:
        worker.stopping = True
        runner.cancel()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
    helpers: set[asyncio.Task[Any]] = {loop.create_task(worker.report_status())}

    async def read_requests() -> None:
        while True:
            line = await reader.readline()
            if not line:  # the server closed its end (it stopped, or died): stop the run
                stop()
                return
            t = loop.create_task(worker.answer(json.loads(line)))
            helpers.add(t)
            t.add_done_callback(helpers.discard)

    helpers.add(loop.create_task(read_requests()))
    done: dict[str, Any] = {"event": "done"}
    try:
        record = await runner
        done["run_id"] = record.run_id
    except asyncio.CancelledError:
        done["error"] = "the server stopped before the run finished; it resumes when the server starts again"
    except Exception as e:  # execute_run voids run faults itself; this is the harness failing around it
        # The page says only that it failed: the message may name the host's files (the store's path).
        done["error"] = (f"a harness fault ended this session ({type(e).__name__}); "
                         "the server's log has the details")
        sys.stderr.write(f"assay serve: play session {launch.play.id} failed: {type(e).__name__}: {e}\n")
    finally:
        worker.agent.finished = True
        worker.agent.ready.set()
        worker.agent._drain()
    # The rest of the transcript for the server's mirror of the finished session: what it has
    # not asked for yet (not the whole transcript again, in one line of the channel).
    done["view"] = worker.view(worker.mirrored)
    await channel.send({"event": "status", **worker.status()})
    await channel.send(done)
    for t in list(helpers):
        t.cancel()
    for t in list(helpers):
        with contextlib.suppress(asyncio.CancelledError, ConnectionError):
            await t
    writer.close()
    return 0


def main(argv: list[str]) -> int:
    """The worker's process: serve the session on the socket at descriptor `argv[1]`."""
    sock = socket.socket(fileno=int(argv[1]))
    with asyncio.Runner() as runner:
        try:
            return runner.run(_serve(sock))
        finally:
            _ignore_stops(runner.get_loop())


def _ignore_stops(loop: asyncio.AbstractEventLoop) -> None:
    """Once the session has ended, a stop signal has nothing left to stop. Its handler is taken
    off the loop here, before the loop closes: the close shuts the loop's wakeup socket first,
    and a SIGTERM arriving between the two was written to a closed descriptor (Python prints
    "Exception ignored ... Bad file descriptor" with a traceback into the server's log)."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.remove_signal_handler(sig)
        signal.signal(sig, signal.SIG_IGN)

