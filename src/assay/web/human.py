"""Human play in the web app: sessions of `human:NAME` agents (`assay.agent.human`).

A session's run is an ordinary `execute_run` started as a background task, so workspace,
sandbox, limits, grading, audit and storage are the harness's own.

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
import contextlib
import dataclasses
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from assay.agent.human import Action, HumanAgent, HumanFactory, RunEnded
from assay.campaign.options import RunOptions
from assay.campaign.plan import PlannedRun, build_plan
from assay.campaign.runner import RunContext, execute_run
from assay.env.sandbox import bwrap_available
from assay.env.workspace import needs_workspace
from assay.grade.grader import needs_judge
from assay.llm.messages import ToolCall
from assay.record import RunRecord
from assay.report.build import run_row
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

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
CAMPAIGN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$")
DEFAULT_CAMPAIGN = "human"
#: sessions one account may have running at once (each is a sandbox, a uid and a disk quota)
MAX_LIVE_PER_OWNER = 4
#: transcript kinds a person sees live, as a model would (stakeholder ledger lines are the
#: harness's record; the person reads the replies in `bin/ask`'s output, like a model).
LIVE_KINDS = {"system", "user", "assistant", "tool_call", "tool_result", "harness", "error"}
#: lines the workbench's editor asks `read_file` for at once (the tool's own byte cap still holds)
EDITOR_LINES = 100_000
_NUMBERED = re.compile(r"^ *\d+\t")
_SIZED = re.compile(r"^(?P<path>.+) \((?P<size>\d+) bytes\)$")


class PlayError(ValueError):
    """A play request that cannot be honoured (bad name, unknown task, ...): shown to the user."""


def playable(task: Task) -> str | None:
    """Why a task cannot be played here, or None."""
    if needs_judge(task):
        return "needs an LLM judge, which the web app does not configure (use assay run --judge)"
    if needs_workspace(task) and not bwrap_available():
        return "bubblewrap is not installed: commands of a person must run in the sandbox"
    return None


@dataclass
class PlaySession:
    id: str
    task: Task
    name: str
    campaign: str
    level: str | None
    epoch: int
    factory: HumanFactory
    owner: str | None = None
    created: float = field(default_factory=time.time)
    runner: asyncio.Task[RunRecord | None] | None = None
    record: RunRecord | None = None
    error: str | None = None
    actions: list[RecordedAction] = field(default_factory=list)

    @property
    def agent(self) -> HumanAgent:
        return self.factory.agent

    def state(self) -> str:
        if self.record is not None:
            return "done"
        if self.error is not None:
            return "error"
        if self.agent.finished:
            return "grading"
        if self.agent.ready.is_set():
            return "running"
        return "resuming" if self.agent.replay else "starting"

    def view(self, since: int = 0) -> dict[str, Any]:
        """What the page polls: state, brief, tools, the transcript since `since`, the grade."""
        env = self.agent.env
        data: dict[str, Any] = {
            "session": self.id, "state": self.state(), "task_id": self.task.id, "title": self.task.title,
            "agent": self.factory.spec, "campaign": self.campaign, "level": self.level, "epoch": self.epoch,
            "turns": self.agent.turns, "error": self.error,
        }
        if env is not None:
            events = env.transcript.events
            data["events"] = [e.wire() for e in events[since:] if e.kind in LIVE_KINDS]
            data["next"] = len(events)
            data["brief"] = env.prompt
            data["messages"] = env.messages if env.messages and len(env.messages) > 1 else None
            data["images"] = [f"data:{i.media_type};base64,{i.data_b64}" for i in env.images]
            data["tools"] = list(env.tools.names)
            data["has_workspace"] = env.workspace is not None
            data["limits"] = dataclasses.asdict(env.limits)
            data["elapsed_s"] = round(env.elapsed_minutes() * 60, 1) if self.agent.ready.is_set() else 0.0
        else:
            data.update(events=[], next=since, brief=None, tools=[], limits=None, elapsed_s=0.0)
        if self.record is not None:
            data["run"] = run_row(self.record)
        return data


class PlayManager:
    """The play sessions of one server process."""

    def __init__(self, store: Store, tasks: list[Task]) -> None:
        self.store = store
        self.tasks = {t.id: t for t in tasks}
        self.sessions: dict[str, PlaySession] = {}
        #: this server process: the workbench starts its views afresh when it changes (a restart)
        self.boot = secrets.token_hex(8)

    def _epoch(self, campaign: str, task: Task, spec: str, level: str | None) -> int:
        """Each play is a new epoch of (task, person, level): earlier plays stay in the store."""
        taken = [r.key.epoch for r in self.store.all_attempts(campaign)
                 if r.key.task_id == task.id and r.key.agent == spec and r.key.level == level]
        taken += [s.epoch for s in self.sessions.values()
                  if s.campaign == campaign and s.task.id == task.id and s.factory.spec == spec and s.level == level]
        taken += play_epochs(self.store, campaign, task.id, spec.removeprefix("human:"), level)
        return max(taken, default=0) + 1

    def start(self, task_id: str, name: str, campaign: str = DEFAULT_CAMPAIGN, level: str | None = None,
              owner: str | None = None) -> PlaySession:
        """A new session; with sign-in on, `owner` is the account and `name` must be its name."""
        name = (name or "").strip()
        campaign = (campaign or "").strip() or DEFAULT_CAMPAIGN
        if not NAME_RE.match(name):
            raise PlayError("name: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit")
        if not CAMPAIGN_RE.match(campaign):
            raise PlayError("campaign: use letters, digits, '.', '_' or '-', starting with a letter or digit")
        if owner is not None:
            live = [x for x in self.sessions.values() if x.owner == owner and x.state() not in ("done", "error")]
            if len(live) >= MAX_LIVE_PER_OWNER:
                raise PlayError(f"you already have {len(live)} sessions running (at most {MAX_LIVE_PER_OWNER}): "
                                "submit one first")
        task = self.tasks.get(task_id)
        if task is None:
            raise PlayError(f"no task {task_id!r} in the suites this server was started with")
        why = playable(task)
        if why is not None:
            raise PlayError(f"task {task_id}: {why}")
        level = level or None
        if level is not None and level not in task.levels:
            raise PlayError(f"task {task_id} has no level {level!r} (levels: {', '.join(task.levels) or 'none'})")
        planned, options = self._plan(task, HumanFactory(name), campaign, level)
        epoch = self._epoch(campaign, task, f"human:{name}", planned.level)
        now = time.time()
        stored = StoredPlay(id=secrets.token_urlsafe(12), owner=owner, name=name, task_id=task.id, level=planned.level,
                            campaign=campaign, epoch=epoch, state="live", actions=[], created_at=now, updated_at=now)
        add_play(self.store, stored)
        return self._launch(task, stored)

    def _plan(self, task: Task, factory: HumanFactory, campaign: str,
              level: str | None) -> tuple[PlannedRun, RunOptions]:
        options = RunOptions(campaign=campaign, level=level, epochs=1, concurrency=1, agents=[factory.spec])
        plan = build_plan([task], [factory], options)
        if not plan.runs:
            reason = plan.skipped[0][2] if plan.skipped else "nothing to run"
            raise PlayError(f"task {task.id}: {reason}")
        return plan.runs[0], options

    def _launch(self, task: Task, stored: StoredPlay) -> PlaySession:
        """Start the run of a stored session (new, or picked up after a restart: its actions replayed)."""
        replay = [Action(kind=a.kind, tool=a.tool, args=dict(a.args), text=a.text) for a in stored.actions]
        factory = HumanFactory(stored.name, replay=replay, elapsed_s=max(0.0, time.time() - stored.created_at))
        planned, options = self._plan(task, factory, stored.campaign, stored.level)
        planned = PlannedRun(task=task, agent=factory, level=planned.level, epoch=stored.epoch,
                             key=planned.key.model_copy(update={"epoch": stored.epoch}))
        session = PlaySession(id=stored.id, task=task, name=stored.name, campaign=stored.campaign,
                              level=planned.level, epoch=stored.epoch, factory=factory, owner=stored.owner,
                              created=stored.created_at, actions=list(stored.actions))
        ctx = RunContext(store=self.store, options=options)
        session.runner = asyncio.get_running_loop().create_task(self._run(session, planned, ctx))
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
                try:
                    self._launch(task, stored)
                    continue
                except PlayError as e:
                    why = str(e)
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

    async def _run(self, session: PlaySession, planned: PlannedRun, ctx: RunContext) -> RunRecord | None:
        try:
            session.record = await execute_run(planned, ctx)
        except asyncio.CancelledError:  # the server stops: the session stays live in the store
            session.error = "the server stopped before the run finished; it resumes when the server starts again"
            raise
        except Exception as e:  # shown on the page; execute_run turns run faults into void runs itself
            session.error = f"{type(e).__name__}: {e}"
            end_play(self.store, session.id, "ended")
            return None
        finally:
            session.agent.finished = True
            session.agent.ready.set()
            session.agent._drain()
        end_play(self.store, session.id, "done", session.record.run_id if session.record is not None else None)
        return session.record

    async def act(self, session_id: str, body: dict[str, Any], viewer: str | None = None) -> str:
        """One action of the session's owner (an admin may view another's session, not act in it)."""
        session = self.get(session_id, viewer)
        agent = session.agent
        if not agent.ready.is_set():
            await asyncio.wait_for(agent.ready.wait(), timeout=120)
        if agent.finished or agent.env is None:
            raise PlayError("the run has ended")
        if "submit" in body:
            action = Action(kind="submit", text=str(body.get("submit") or ""))
        else:
            tool = str(body.get("tool") or "")
            args = body.get("args") or {}
            if not isinstance(args, dict):
                raise PlayError("args must be a JSON object")
            if tool not in agent.env.tools.names:
                offered = ", ".join(agent.env.tools.names) or "none"
                raise PlayError(f"tool {tool!r} is not offered by this task (offered: {offered})")
            action = Action(kind="tool", tool=tool, args=_clean_args(tool, args))
        recorded = RecordedAction(kind="submit" if action.kind == "submit" else "tool", tool=action.tool,
                                  args=dict(action.args), text=action.text, at=round(time.time() - session.created, 3))
        try:
            output = await agent.act(action)
        except RunEnded as e:
            raise PlayError(str(e)) from None
        session.actions.append(recorded)
        append_action(self.store, session.id, recorded)
        return output

    async def tree(self, session_id: str, path: str, viewer: str | None = None, admin: bool = False) -> dict[str, Any]:
        """The workspace's files below `path`, listed by the run's own `list_files` tool (not a turn:
        nothing is changed), as entries for the workbench's file tree."""
        session = self.get(session_id, viewer, admin)
        env = session.agent.env
        if env is None or not session.agent.ready.is_set():
            raise PlayError("the workspace is not ready yet")
        if env.workspace is None or "list_files" not in env.tools.names:
            raise PlayError("this task offers no list_files tool, so there is no file tree")
        listing = await env.tools.execute(ToolCall(id="tree", name="list_files", arguments={"path": path or "."}))
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
        """Server shutdown: in-flight runs end as interrupted (not stored, workspaces removed)."""
        running = [s.runner for s in self.sessions.values() if s.runner is not None and not s.runner.done()]
        for t in running:
            t.cancel()
        for t in running:
            with contextlib.suppress(BaseException):
                await t


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


def tree_entries(listing: str) -> list[dict[str, Any]]:
    """`list_files` output as entries {path, kind: dir|file|link|special, size?, target?}; its
    closing notes (`[...]`) are left out. Names are the agent's: a file's size suffix is read
    first (so a file named `a -> b` stays a file); a name that still reads two ways (a folder
    named `a -> b`) shows as a link, and only files are opened from the tree, through the
    run's own `read_file`."""
    out: list[dict[str, Any]] = []
    for line in listing.splitlines():
        if not line or line.startswith("["):
            continue
        m = _SIZED.match(line)
        if m is not None:
            out.append({"path": m["path"], "kind": "file", "size": int(m["size"])})
        elif line.endswith(" (special file)"):
            out.append({"path": line.removesuffix(" (special file)"), "kind": "special"})
        elif " -> " in line:
            path, _, target = line.partition(" -> ")
            out.append({"path": path, "kind": "link", "target": target})
        elif line.endswith("/"):
            out.append({"path": line[:-1], "kind": "dir"})
    return out


def editor_text(output: str) -> tuple[str | None, bool]:
    """The file's text from `read_file`'s numbered output, and whether it is the whole file.

    None when the tool said no (an error, a binary file, an image); not whole when lines were
    clipped or only the first bytes were read (saving would then lose the rest)."""
    if output.startswith("error:") or (output.startswith("[") and not _NUMBERED.match(output)):
        if output.startswith("[") and output.endswith(" is empty]") and "\n" not in output:
            return "", True
        return None, False
    lines: list[str] = []
    whole = True
    for line in output.split("\n"):
        m = _NUMBERED.match(line)
        if m is None:
            whole = False  # a note: more lines, or only the first bytes read
            continue
        text = line[m.end():]
        if "[... line clipped:" in text:
            whole = False
        lines.append(text)
    return "\n".join(lines) + ("\n" if lines else ""), whole
