"""Human play in the web app: sessions of `human:NAME` agents (`assay.agent.human`).

A session's run is an ordinary `execute_run`, so workspace, sandbox, limits, grading, audit
and storage are the harness's own. It runs in a **worker process of its own**
(`assay.web.playworker`), never on the server's event loop: whatever one session's action
does (a long command, a stakeholder ask, a pattern, grading), `/healthz`, every page and
every other session go on answering, and a server stop (SIGTERM) ends the workers within
`STOP_GRACE_S` (SIGTERM, then SIGKILL). The server keeps a mirror of what the page shows
(state, brief, tools, transcript events: `assay.web.play_session`), so a busy worker's page
still answers; its end of a worker is `assay.web.worker_link`.

Each action has a time limit of its own (`action_limit`: a command's `timeout_s` plus
`ACTION_GRACE_S`, other tools `TOOL_LIMIT_S`). An action past it means the worker is stuck:
the worker is stopped and the session started again by replaying its recorded actions (the
stuck one was never recorded, as after a server restart), and the person gets 504 saying
so. Grading has `GRADE_LIMIT_S`; past it the session ends with an error.

A session is kept in the store (`assay.store.play`): who started what, and every action
taken, in order. When the server stops (SIGTERM, Ctrl-C, a crash) the run in flight ends
without being stored; when it starts again (`PlayManager.resume`) each live session starts
a fresh run of the same task, level and epoch and replays its recorded actions through the
run's tools before the browser may act again (deterministic for scripted stakeholders).
Its clock is set back by the time since the session started, so the time limit holds across
restarts: an idle session ends by it and is graded as it stands (docs/web.md, "Workbench").

With sign-in on, a session belongs to the account that started it (`owner`): `get` and
`visible` hide it from everyone else (an admin sees all), so another person cannot even
learn its id. Without sign-in (a local single user) `owner` is None and everything is shared.
"""

from __future__ import annotations

import asyncio
import functools
import math
import re
import secrets
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from assay.agent.human import HumanFactory
from assay.defaults import DEFAULTS
from assay.env.bwrap import bwrap_available
from assay.env.workspace import needs_workspace
from assay.grade.grader import needs_judge
from assay.store import Store
from assay.store.play import (
    RecordedAction,
    StoredPlay,
    add_play,
    append_action,
    end_play,
    live_plays,
    play_epochs,
)
from assay.task.model import Task
from assay.web.play_session import PlaySession
from assay.web.playworker import LIVE_KINDS, Launch, plan_run
from assay.web.tool_output import tree_entries
from assay.web.worker_link import STOP_GRACE_S, WorkerGone, WorkerLink

__all__ = ["ACTION_GRACE_S", "CAMPAIGN_RE", "EDITOR_LINES", "GRADE_LIMIT_S", "LIVE_KINDS", "MAX_LIVE_PER_OWNER",
           "MAX_LIVE_SESSIONS", "TOOL_LIMIT_S", "PlayBusy", "PlayError", "PlayManager", "PlayTimeout", "action_limit",
           "playable"]

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
CAMPAIGN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$")
#: sessions one account may have running at once (each is a sandbox, a uid and a disk quota)
MAX_LIVE_PER_OWNER = 4
#: sessions the server runs at once in all (each is a worker process of about 100 MB)
MAX_LIVE_SESSIONS = 32
#: lines the workbench's editor asks `read_file` for at once (the tool's own byte cap still holds)
EDITOR_LINES = 100_000
#: a command's action may take its own `timeout_s` plus this (the sandbox kills it at `timeout_s`)
ACTION_GRACE_S = 15.0
#: any other tool's action (file tools read at most 64 MiB; a submit is answered at once)
TOOL_LIMIT_S = 120.0
#: from the end of the turns (submit, a limit) to the stored run
GRADE_LIMIT_S = 1800.0
#: how long a page's poll waits for a busy worker before the mirror answers
VIEW_WAIT_S = 2.0
#: how long the file tree waits for a worker
TREE_WAIT_S = 30.0
#: how long an action waits for a session that is starting (or replaying)
READY_WAIT_S = 120.0
#: `run_command`'s own default and cap of `timeout_s` (`assay.agent.tools`)
_COMMAND_DEFAULT_S, _COMMAND_MAX_S = 300.0, 1800.0


class PlayError(ValueError):
    """A play request that cannot be honoured (bad name, unknown task, ...): shown to the user."""


class PlayBusy(RuntimeError):
    """The session's worker did not answer in time (it is busy with an action): try again."""


class PlayTimeout(RuntimeError):
    """An action ran past its limit: its worker was stopped and the session replayed without it."""


def playable(task: Task) -> str | None:
    """Why a task cannot be played here, or None."""
    if needs_judge(task):
        return "needs an LLM judge, which the web app does not configure (use assay run --judge)"
    if needs_workspace(task) and not bwrap_available():
        return "bubblewrap is not installed: commands of a person must run in the sandbox"
    return None


def action_limit(tool: str, args: dict[str, Any]) -> float:
    """Seconds the server waits for one action before it takes the worker for stuck."""
    if tool != "run_command":
        return TOOL_LIMIT_S
    raw = args.get("timeout_s")
    try:
        asked = float(raw) if raw is not None and not isinstance(raw, bool) else _COMMAND_DEFAULT_S
    except (TypeError, ValueError):  # the tool refuses it at once; the default bounds the wait
        asked = _COMMAND_DEFAULT_S
    if not math.isfinite(asked) or asked <= 0:
        asked = _COMMAND_DEFAULT_S
    return min(asked, _COMMAND_MAX_S) + ACTION_GRACE_S


class PlayManager:
    """The play sessions of one server process, each run in a worker process."""

    def __init__(self, store: Store, tasks: list[Task], campaign: str = DEFAULTS.campaign) -> None:
        self.store = store
        self.tasks = {t.id: t for t in tasks}
        #: where plays go unless one names another: by default `assay run`'s, beside the models
        self.campaign = campaign
        self.sessions: dict[str, PlaySession] = {}
        #: this server process: the workbench starts its views afresh when it changes (a restart)
        self.boot = secrets.token_hex(8)
        self.stopping = False
        self._background: set[asyncio.Task[Any]] = set()

    def live(self) -> list[PlaySession]:
        return [s for s in self.sessions.values() if s.state() not in ("done", "error")]

    def _epoch(self, campaign: str, task: Task, spec: str, level: str | None) -> int:
        """Each play is a new epoch of (task, person, level): earlier plays stay in the store."""
        taken = [self.store.last_epoch(campaign, task.id, spec, level)]
        taken += [s.epoch for s in self.sessions.values()
                  if s.campaign == campaign and s.task.id == task.id and s.spec == spec and s.level == level]
        taken += play_epochs(self.store, campaign, task.id, spec.removeprefix("human:"), level)
        return max(taken, default=0) + 1

    def start(self, task_id: str, name: str, campaign: str | None = None, level: str | None = None,
              owner: str | None = None) -> PlaySession:
        """A new session (in `campaign`, else the server's play campaign); with sign-in on,
        `owner` is the account and `name` must be its name."""
        name = (name or "").strip()
        campaign = (campaign or "").strip() or self.campaign
        if not NAME_RE.match(name):
            raise PlayError("name: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit")
        if not CAMPAIGN_RE.match(campaign):
            raise PlayError("campaign: use letters, digits, '.', '_' or '-', starting with a letter or digit")
        if self.stopping:
            raise PlayError("the server is stopping")
        live = self.live()
        if owner is not None:
            mine = [x for x in live if x.owner == owner]
            if len(mine) >= MAX_LIVE_PER_OWNER:
                raise PlayError(f"you already have {len(mine)} sessions running (at most {MAX_LIVE_PER_OWNER}): "
                                "submit one first")
        if len(live) >= MAX_LIVE_SESSIONS:
            raise PlayError(f"the server is running {len(live)} play sessions, its most at once: try again later")
        task = self.tasks.get(task_id)
        if task is None:
            raise PlayError(f"no task {task_id!r} in the suites this server was started with")
        why = playable(task)
        if why is not None:
            raise PlayError(f"task {task_id}: {why}")
        level = level or None
        if level is not None and level not in task.levels:
            raise PlayError(f"task {task_id} has no level {level!r} (levels: {', '.join(task.levels) or 'none'})")
        try:
            planned, _options = plan_run(task, HumanFactory(name), campaign, level)
        except ValueError as e:
            raise PlayError(str(e)) from None
        epoch = self._epoch(campaign, task, f"human:{name}", planned.level)
        now = time.time()
        stored = StoredPlay(id=secrets.token_urlsafe(12), owner=owner, name=name, task_id=task.id, level=planned.level,
                            campaign=campaign, epoch=epoch, state="live", actions=[], created_at=now, updated_at=now)
        add_play(self.store, stored)
        return self._launch(task, stored)

    def _launch(self, task: Task, stored: StoredPlay) -> PlaySession:
        """Start the worker of a stored session (new, or picked up after a restart: its actions replayed)."""
        session = PlaySession(id=stored.id, task=task, name=stored.name, campaign=stored.campaign,
                              level=stored.level, epoch=stored.epoch, owner=stored.owner, created=stored.created_at,
                              actions=list(stored.actions), replaying=bool(stored.actions))
        session.supervisor = asyncio.get_running_loop().create_task(self._supervise(session))
        self.sessions[session.id] = session
        return session

    def resume(self) -> list[str]:
        """Pick up the store's live sessions (server start); returns a line for each one that cannot be."""
        notes = []
        for stored in live_plays(self.store):
            if stored.id in self.sessions:
                continue
            done = self._stored_run(stored)
            if done is not None:  # stored, but the server stopped before the session was marked done
                end_play(self.store, stored.id, "done", done)
                continue
            task = self.tasks.get(stored.task_id)
            why = "its task is not in the suites this server was started with" if task is None else playable(task)
            if task is not None and why is None:
                self._launch(task, stored)
                continue
            end_play(self.store, stored.id, "ended")
            notes.append(f"play session of human:{stored.name} on {stored.task_id} ended: {why}")
        return notes

    def _stored_run(self, stored: StoredPlay) -> str | None:
        """The run id of a stored run of this session's key (campaign, task, person, level, epoch)."""
        for r in self.store.all_attempts(stored.campaign):
            k = r.key
            if (k.task_id, k.agent, k.level, k.epoch) == (stored.task_id, f"human:{stored.name}", stored.level,
                                                          stored.epoch) and r.status == "done":
                return r.run_id
        return None

    def _on_event(self, session: PlaySession, generation: int, msg: dict[str, Any]) -> None:
        if generation != session.generation:
            return  # a stopped worker's last words
        if msg.get("event") == "status":
            if msg.get("env") is not None:
                session.env = msg["env"]
            session.turns = int(msg.get("turns", session.turns))
            if msg.get("finished") and not session.finished:
                session.finished = True
                self._later(GRADE_LIMIT_S, lambda: self._grade_overrun(session, generation))
            if msg.get("ready"):
                session.replaying = False
                session.ready.set()
        elif msg.get("event") == "done":
            session.done = msg

    def _later(self, delay: float, then: Callable[[], Awaitable[None]]) -> None:
        async def after() -> None:
            await asyncio.sleep(delay)
            await then()

        t = asyncio.get_running_loop().create_task(after())
        self._background.add(t)
        t.add_done_callback(self._background.discard)

    async def _grade_overrun(self, session: PlaySession, generation: int) -> None:
        if session.generation == generation and session.done is None and session.link is not None:
            session.error = f"grading did not finish within {GRADE_LIMIT_S:.0f} s; the run was stopped"
            await session.link.stop()

    async def _supervise(self, session: PlaySession) -> None:  # noqa: C901 (each way a worker can end, in turn)
        """Run the session's worker; start it again (replaying) when an action got stuck; then
        record how the session ended."""
        rc: int | None = None
        while True:
            generation = session.generation
            launch = Launch(task=session.task, play=session.stored(), store_url=self.store.url,
                            elapsed_s=max(0.0, time.time() - session.created))
            try:
                link = await WorkerLink.spawn(launch, functools.partial(self._on_event, session, generation))
            except OSError as e:  # no process or descriptor to be had: said on the page, the session ends
                session.error = f"the session's worker could not start: {e.strerror or e}"
                end_play(self.store, session.id, "ended")
                return
            session.link = link
            if self.stopping:  # the server began to stop while this worker started
                await link.stop()
            try:
                await link.pump()
            finally:
                await link.stop()
            rc = link.proc.returncode
            done = session.done or {}
            if done.get("run_id"):
                break
            if session.restart and not self.stopping:  # `_restart` made the session fresh already
                session.restart = False
                stored = await asyncio.to_thread(self._stored_run, session.stored())
                if stored is not None:  # the stuck worker stored its run after all: never a second one
                    session.done = {"run_id": stored}
                    break
                continue
            break
        session.link = None
        session.finished = True
        session.ready.set()
        done = session.done or {}
        if "view" in done:
            session.merge(done["view"])
        if done.get("run_id"):
            session.record = await asyncio.to_thread(self.store.get_run, str(done["run_id"]))
            end_play(self.store, session.id, "done", str(done["run_id"]))
        elif self.stopping:  # the session stays live in the store: resumed at the next start
            session.error = "the server stopped before the run finished; it resumes when the server starts again"
        else:
            session.error = session.error or done.get("error") or f"the session's worker ended (exit status {rc})"
            end_play(self.store, session.id, "ended")

    async def act(self, session_id: str, body: dict[str, Any], viewer: str | None = None) -> str:
        """One action of the session's owner (an admin may view another's session, not act in it)."""
        session = self.get(session_id, viewer)
        if not session.ready.is_set():
            await asyncio.wait_for(session.ready.wait(), timeout=READY_WAIT_S)
        link, generation = session.link, session.generation
        if session.finished or session.env is None or link is None:
            raise PlayError("the run has ended")
        tools = list(session.env.get("tools") or [])
        if "submit" in body:
            recorded = RecordedAction(kind="submit", text=str(body.get("submit") or ""))
        else:
            tool = str(body.get("tool") or "")
            args = body.get("args") or {}
            if not isinstance(args, dict):
                raise PlayError("args must be a JSON object")
            if tool not in tools:
                raise PlayError(f"tool {tool!r} is not offered by this task (offered: {', '.join(tools) or 'none'})")
            recorded = RecordedAction(kind="tool", tool=tool, args=_clean_args(tool, args))
        recorded.at = round(time.time() - session.created, 3)
        limit = action_limit(recorded.tool, recorded.args) if recorded.kind == "tool" else TOOL_LIMIT_S
        try:
            reply = await link.request("act", limit, action={"kind": recorded.kind, "tool": recorded.tool,
                                                             "args": recorded.args, "text": recorded.text})
        except TimeoutError:
            self._restart(session, link)
            raise PlayTimeout(f"the action ran past its limit of {limit:.0f} s, so its run was stopped; the session "
                              "starts again from its earlier actions (this one is not kept)") from None
        except WorkerGone:
            raise PlayError("the session's run stopped while this action ran (the server is stopping, or the "
                            "session is starting again): do it again once it is running") from None
        if not reply.get("ok"):
            raise PlayError(str(reply.get("error") or "the run has ended"))
        if self.stopping or session.generation != generation:  # cut short by a stop or a restart: not kept
            raise PlayError("the session's run stopped while this action ran: do it again once it is running")
        session.actions.append(recorded)
        append_action(self.store, session.id, recorded)
        return str(reply.get("output", ""))

    def _restart(self, session: PlaySession, link: WorkerLink) -> None:
        """Stop a stuck worker; the supervisor starts a fresh one that replays the recorded actions."""
        if session.restart or session.link is not link:
            return
        session.restart = True
        session.fresh_worker()  # from now on the stuck worker's words are not the session's
        sys.stderr.write(f"assay serve: play session {session.id}: an action ran past its limit; its worker is "
                         "stopped and the session replayed\n")
        t = asyncio.get_running_loop().create_task(link.stop())
        self._background.add(t)
        t.add_done_callback(self._background.discard)

    async def view(self, session: PlaySession, since: int = 0) -> dict[str, Any]:
        """The page's poll: fresh from the worker, or from the mirror when the worker is busy."""
        link, generation = session.link, session.generation
        if link is not None and session.env is not None:
            try:
                view = await link.request("view", VIEW_WAIT_S, since=session._next)
                if session.generation == generation:  # not a worker stopped meanwhile
                    session.merge(view)
                session.busy = False
            except TimeoutError:
                session.busy = True
            except WorkerGone:
                session.busy = False
        data = session.view(since)
        data["boot"] = f"{self.boot}.{session.generation}"
        return data

    async def tree(self, session_id: str, path: str, viewer: str | None = None, admin: bool = False) -> dict[str, Any]:
        """The workspace's files below `path`, listed by the run's own `list_files` tool (not a turn:
        nothing is changed), as entries for the workbench's file tree."""
        session = self.get(session_id, viewer, admin)
        env, link = session.env, session.link
        if env is None or not session.ready.is_set() or link is None:
            raise PlayError("the workspace is not ready yet" if not session.finished else "the run has ended")
        if not env.get("has_workspace") or "list_files" not in (env.get("tools") or []):
            raise PlayError("this task offers no list_files tool, so there is no file tree")
        try:
            reply = await link.request("tree", TREE_WAIT_S, path=path or ".")
        except TimeoutError:
            raise PlayBusy("the session is busy with an action; the file tree comes after it") from None
        except WorkerGone:
            raise PlayError("the session's run stopped") from None
        if not reply.get("ok"):
            raise PlayError(str(reply.get("error")))
        listing = str(reply.get("listing", ""))
        if listing.startswith("error:"):
            raise PlayError(listing.removeprefix("error:").strip())
        return {"path": path or ".", "entries": tree_entries(listing)}

    def get(self, session_id: str, viewer: str | None = None, admin: bool = False) -> PlaySession:
        """The session, if `viewer` may see it (KeyError otherwise, as for an unknown id)."""
        s = self.sessions.get(session_id)
        if s is None or not _may_see(s, viewer, admin):
            raise KeyError(session_id)
        return s

    def visible(self, viewer: str | None = None, admin: bool = False) -> list[PlaySession]:
        """The sessions `viewer` may see, newest first."""
        return sorted((s for s in self.sessions.values() if _may_see(s, viewer, admin)), key=lambda s: -s.created)

    async def aclose(self) -> None:
        """Server shutdown: every worker is stopped at once (SIGTERM, SIGKILL after `STOP_GRACE_S`);
        runs in flight end as interrupted, not stored; their sessions stay live in the store.
        Called by the server's stop and again by the app's shutdown: the second call does nothing."""
        if self.stopping:
            return
        self.stopping = True
        links = [s.link for s in self.sessions.values() if s.link is not None]
        await asyncio.gather(*(link.stop() for link in links))
        supervisors = [s.supervisor for s in self.sessions.values() if s.supervisor is not None]
        done, pending = await asyncio.wait(supervisors, timeout=STOP_GRACE_S) if supervisors else (set(), set())
        for t in pending:
            t.cancel()
        for t in done:
            if not t.cancelled() and t.exception() is not None:
                exc = t.exception()
                sys.stderr.write(f"assay serve: a play session's supervisor failed: {type(exc).__name__}: {exc}\n")
        for t in list(self._background):
            t.cancel()


def _may_see(s: PlaySession, viewer: str | None, admin: bool) -> bool:
    return admin or s.owner == viewer


def _clean_args(tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """Form fields arrive as strings; drop empty optional ones, type the numeric ones."""
    out: dict[str, Any] = {}
    for k, v in args.items():
        if v is None or (isinstance(v, str) and v == "" and k not in ("content", "new_text", "old_text")):
            continue
        if k in ("offset", "limit", "timeout_s") and isinstance(v, str):
            try:
                v = int(v)
            except ValueError as e:
                raise PlayError(f"{k} must be a whole number") from e
        if k == "replace_all" and isinstance(v, str):
            v = v.lower() in ("1", "true", "on", "yes")
        out[k] = v
    return out


