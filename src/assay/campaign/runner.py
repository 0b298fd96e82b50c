"""One run, start to end: workspace, sandbox, agent, grade, audit, store.

Every failure becomes a value on the record (an end reason), never an exception that
takes the campaign down. Who failed decides (SPEC): a grading fault on the agent's work is a
scored failure, a task whose own grader fails on its reference (or an untouched workspace) is broken
(`assay.campaign.health`), and only a harness fault is void: stored, re-run on resume, and
after `MAX_VOID_ATTEMPTS` stored as a failed run. The agent's sandbox is closed before
grading starts, so nothing the agent left running can change what is graded.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import mimetypes
import os
import shutil
import stat
import time
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from assay.agent.base import Agent, AgentEnv, AgentOutcome, RunLimits
from assay.agent.search import offer_search
from assay.agent.tools import SearchBackend, ToolBox
from assay.agent.transcript import Transcript
from assay.campaign.health import TaskHealth
from assay.campaign.options import RunOptions
from assay.campaign.plan import PlannedRun
from assay.campaign.saver import RunSaver
from assay.env.bwrap import bwrap_available
from assay.env.sandbox import Sandbox
from assay.env.volume import WorkspaceVolume
from assay.env.workspace import materialise, needs_workspace, new_workspace
from assay.errors import GraderError, HarnessError, InputError, ProviderError
from assay.fs.copying import copy_tree
from assay.fs.paths import PathError, private_dir
from assay.fs.reads import read_regular
from assay.fs.writes import write_file
from assay.grade.grader import GradeInput, GradeOutcome, failed_grade, grade_run
from assay.grade.inputs import JudgeService
from assay.llm import cache as response_cache
from assay.llm.cache import ResponseCache
from assay.llm.messages import ImagePart
from assay.record import MAX_VOID_ATTEMPTS, VOID_REASONS, Event, Fault, Grade, RunRecord, UsageCost, safe_text
from assay.scenario.lifecycle import ScenarioRun
from assay.store import Store
from assay.task.hashing import json_digest
from assay.version import HARNESS_VERSION

__all__ = ["GRACE_S", "RunContext", "effective_limits", "execute_run", "lost_run", "runs_root"]

GRACE_S = 30.0


@dataclass
class RunContext:
    store: Store
    options: RunOptions
    judge: JudgeService | None = None
    brave: SearchBackend | None = None  # the campaign's Brave client under `--search brave`
    saver: RunSaver = field(init=False)  # finished runs go to `store` through it (group commit)
    health: TaskHealth = field(init=False)  # is a task broken (its grader faults on its probe deliverable)

    def __post_init__(self) -> None:
        self.saver = RunSaver(self.store)
        self.health = TaskHealth(self.store, lambda planned: execute_run(planned, self, probe=True),
                                 json_digest(self.options.result_options()))

    @property
    def isolated(self) -> bool:
        return bwrap_available() and not self.options.unsafe_no_sandbox


def effective_limits(planned: PlannedRun, options: RunOptions) -> RunLimits:
    """The run's limits: the campaign's, or the task's own budget where it is smaller."""
    b = planned.task.budget
    return RunLimits(
        max_turns=min(options.max_turns, b.turns) if b.turns is not None else options.max_turns,
        max_minutes=min(options.max_minutes, b.minutes) if b.minutes is not None else options.max_minutes,
        max_usd=min(options.max_usd, b.usd) if b.usd is not None else options.max_usd,
    )


def _images(paths: list[Path]) -> list[ImagePart]:
    parts = []
    for p in paths:
        mime = mimetypes.guess_type(p.name)[0] or "image/png"
        parts.append(ImagePart(media_type=mime, data_b64=base64.b64encode(read_regular(p)).decode()))
    return parts


def _prompt(planned: PlannedRun) -> str:
    return planned.task.prompt_text(planned.level)


def _searchable_by_others(path: Path) -> bool:
    return all(os.stat(anc).st_mode & stat.S_IXOTH for anc in path.parents)


def runs_root(store_dir: Path, shared: Path = Path("/var/tmp/assay-runs")) -> Path:
    """Where run folders live: under the store's folder, unless a sandbox uid cannot reach it.

    Sandboxed commands run as their own unprivileged uid, which needs search permission on
    every parent of the workspace; a store under a 0700 home (e.g. /root) does not give it,
    so such runs live under `shared`/<store digest>/ instead (recorded per run; `shared` is a
    parameter so tests can stand in for /var/tmp). Any local user can create entries in
    /var/tmp, so both folders are made or taken with `assay.fs.paths.private_dir`: a planted symlink, a
    folder of another user or one writable by others is refused (HarnessError naming it and
    why; the run is void), never chmodded or used.
    """
    root = store_dir / "runs"
    # The store's folder need not exist yet (a PostgreSQL store in a fresh folder: ./.assay).
    root.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or _searchable_by_others(root):
        return root
    digest = hashlib.sha256(str(store_dir.resolve()).encode()).hexdigest()[:12]
    for d in (shared, shared / digest):
        try:
            private_dir(d, 0o711)
        except PathError as e:
            raise HarnessError(f"the shared folder of run folders is not safe to use: {e}") from e
    return shared / digest


def stage_readable(src: Path, dst: Path) -> Path:
    """A copy of `src` (`assay.fs.copying.copy_tree`) that every uid may read: folders 0755, files
    0644 (0755 when executable). The copy is ours alone, so fixing its modes races nothing."""
    copy_tree(src, dst, skip=lambda rel: rel.rsplit("/", 1)[-1] == "__pycache__")
    for root, _dirs, files in os.walk(dst):
        os.chmod(root, 0o755)
        for name in files:
            p = os.path.join(root, name)
            if not os.path.islink(p):
                os.chmod(p, 0o755 if os.stat(p).st_mode & 0o111 else 0o644)
    os.chmod(dst.parent, 0o711)
    return dst


class _Run:
    """The state of one run while it goes: what it built, what it got, how it ended."""

    def __init__(self, planned: PlannedRun, ctx: RunContext, attempt: int, probe: bool = False) -> None:
        self.planned = planned
        self.ctx = ctx
        self.attempt = attempt
        self.probe = probe  # a run of the task's own deliverable for `TaskHealth`: not stored
        self.broken_reason: str | None = None  # the task's grader fails on its probe deliverable
        self.run_id = uuid.uuid4().hex[:16]
        self.started_wall = time.time()
        self.t0 = time.monotonic()
        self.transcript = Transcript()
        self.limits = effective_limits(planned, ctx.options)
        self.outcome = AgentOutcome(end_reason="harness_error")
        self.workspace: Path | None = None
        self.run_dir: Path | None = None
        self.sandbox: Sandbox | None = None
        self.volume: WorkspaceVolume | None = None
        self.scenario: ScenarioRun | None = None
        self.agent: Agent | None = None
        self.graded = GradeOutcome(score=None, passed=None)
        self.void_reason: str | None = None
        self.commands: list[str] = []
        self.search: str | None = None  # the search backend the run was offered

    async def build(self) -> AgentEnv:
        planned, ctx, task = self.planned, self.ctx, self.planned.task
        self.agent = agent = planned.agent.for_task(task)
        prompt = _prompt(planned)
        binds = list(agent.binds())
        sandbox_env: dict[str, str] = {}
        keep: list[str] = []
        if needs_workspace(task):
            self.run_dir = runs_root(ctx.store.dir) / self.run_id
            self.run_dir.mkdir(parents=True)
            os.chmod(self.run_dir, 0o711)
            self.volume = await asyncio.to_thread(new_workspace, self.run_dir / "workspace")
            self.workspace = await asyncio.to_thread(materialise, task, self.volume.path)
            if task.scenario is not None:
                self.scenario = ScenarioRun(task, planned.level, self.run_dir, self.workspace,
                                            transcript=self.transcript, options=ctx.options,
                                            agent_spec=planned.agent.spec,
                                            trusted_agent=planned.agent.kind in ("noop", "policy"))
                await self.scenario.setup()
                prompt = self.scenario.prompt()
                binds += self.scenario.ro_binds()
                sandbox_env.update(self.scenario.sandbox_env())
                keep = self.scenario.keep_owner()
            wrapper = self.scenario.command_wrapper() if self.scenario is not None else None
            binds = await asyncio.to_thread(self._staged, binds)
            self.sandbox = Sandbox(self.workspace, isolated=ctx.isolated, ro_binds=binds, env=sandbox_env,
                                   command_wrapper=wrapper, keep_owner=keep, volume=self.volume)
            await asyncio.to_thread(self.sandbox.prepare)
            self.transcript.harness(f"sandbox limits: {self.sandbox.describe()}")
        offer = await asyncio.to_thread(offer_search, task, ctx.options.search, planned.agent.kind, ctx.brave)
        self.search = offer.label
        tools = ToolBox(self.workspace, self.sandbox, task.tools, search=offer.backend, images=agent.accepts_images)
        self.commands = tools.commands
        return AgentEnv(task=task, level=planned.level, prompt=prompt, system_prompt=task.system_prompt,
                        images=_images(task.images), workspace=self.workspace, sandbox=self.sandbox, tools=tools,
                        limits=self.limits, transcript=self.transcript, messages=task.messages,
                        native_search=offer.native)

    def _staged(self, binds: list[tuple[Path, str]]) -> list[tuple[Path, str]]:
        """Read-only binds from the suite (a policy's folder) are copied into the run folder
        first, readable by the sandbox's uid: the suite's own folder permissions (a clone under
        /root, a 0700 `mktemp -d`) never matter, and nothing of the suite is bound live."""
        assert self.run_dir is not None
        own = [self.run_dir] + ([self.scenario.svc_dir] if self.scenario is not None else [])
        copies: dict[Path, Path] = {}
        out: list[tuple[Path, str]] = []
        for host, dest in binds:
            if any(Path(host).is_relative_to(d) for d in own):
                out.append((host, dest))
                continue
            if host not in copies:
                copies[host] = stage_readable(host, self.run_dir / "binds" / str(len(copies)))
            out.append((copies[host], dest))
        return out

    async def work(self, env: AgentEnv) -> None:
        assert self.agent is not None
        cache = (ResponseCache(self.ctx.store, self.planned.key.cache_salt)
                 if self.ctx.options.response_cache else None)
        try:
            with response_cache.activate(cache):
                self.outcome = await asyncio.wait_for(self.agent.run(env),
                                                      timeout=self.limits.max_minutes * 60 + GRACE_S)
        except TimeoutError:
            self.outcome = AgentOutcome(end_reason="max_time")
            self.transcript.harness("run exceeded its time limit; graded as the workspace stands")
        except (HarnessError, OSError):
            raise
        except ProviderError as e:  # a search provider that failed (model agents handle their own)
            self.outcome = AgentOutcome(end_reason="api_error", error=e.reason, error_status=e.status)
            self.transcript.error("provider", reason=e.reason, status=e.status)
        except InputError as e:  # a policy's own bad input is a fault of this run, not the user's command
            self.outcome = AgentOutcome(end_reason="harness_error", error=e.message)
            self.transcript.error("harness", e.message)
        except Exception as e:  # an agent-side bug voids this run; the campaign goes on
            self.outcome = AgentOutcome(end_reason="harness_error", error=f"{type(e).__name__}: {e}")
            self.transcript.error("harness", traceback.format_exc(limit=8))
        if cache is not None and cache.hits + cache.misses:
            self.transcript.harness(f"response cache: {cache.hits} of {cache.hits + cache.misses} model replies "
                                    "came from it")

    async def grade(self) -> None:
        task, out = self.planned.task, self.outcome
        out.final_message = safe_text(out.final_message)  # graded, written and stored as the record keeps it
        if self.workspace is not None and task.answer_path and not task.tools:
            await asyncio.to_thread(write_file, self.workspace, task.answer_path, out.final_message,
                                    owner=self.sandbox.uid if self.sandbox else None)
        await self.close_sandbox()  # nothing the agent started runs while its work is graded
        try:
            t_grade = time.monotonic()
            self.graded = await grade_run(GradeInput(
                task=task, level=self.planned.level, workspace=self.workspace, final_message=out.final_message,
                events=self.transcript.events, end_reason=out.end_reason, judge=self.ctx.judge,
                delivered=self.scenario.delivered(self.workspace) if self.scenario is not None else None,
                commands=self.commands, injection_screen=self.ctx.options.injection_screen == "on",
                probe=self.planned.agent.spec if self.probe else None))
            self.graded.grade.grade_seconds = round(time.monotonic() - t_grade, 4)
        except GraderError as e:
            self._void_grade(str(e))
            return
        except Exception as e:  # a bug of assay's own grading code voids the run, not the campaign
            self._void_grade(f"{type(e).__name__}: {e}")
            return
        faults = self.graded.grade.faults
        for f in faults:
            self.transcript.error("grader", f"{f.part}: {f.reason}")
        if not self.probe:  # every run asks: whether a task is broken is never up to a run's faults
            try:
                self.broken_reason = await self.ctx.health.broken_reason(self.planned, faults)
            except HarnessError as e:
                self.outcome.end_reason = "harness_error"
                self.void_reason = str(e)
                self.transcript.error("harness", self.void_reason)

    def _void_grade(self, reason: str) -> None:
        self.void_reason = reason
        self.outcome.end_reason = "grader_error"
        self.transcript.error("grader", reason)

    async def release_workspace(self, keep_data: bool = True) -> None:
        """The workspace back as a plain folder (its quota volume unmounted), noting a quota hit."""
        vol, self.volume = self.volume, None
        if vol is None:
            return
        if vol.quota_hit:
            self.transcript.harness(f"the workspace reached its disk quota of {vol.quota_bytes} bytes during the run "
                                    "(ASSAY_WORKSPACE_QUOTA_BYTES); graded as it stands")
        try:
            report = await asyncio.to_thread(vol.release, keep_data)
        except (HarnessError, OSError) as e:  # the run is graded; its kept workspace is what is wrong
            self.transcript.error("harness", f"workspace volume not released: {e}")
            return
        except Exception as e:  # the same, from a fault of assay's own: the run is still stored
            self.transcript.error("harness", f"workspace volume not released: {type(e).__name__}: {e}")
            return
        if report is not None and (report.capped or report.refused):
            self.transcript.harness("workspace kept after the run without: "
                                    + "; ".join([*report.capped, *(f"{r}: {why}" for r, why in report.refused[:20])]))

    async def close_sandbox(self) -> None:
        if self.sandbox is None:
            return
        sandbox = self.sandbox
        try:
            await asyncio.shield(sandbox.close())
        except asyncio.CancelledError:
            sandbox.kill_now()
            raise

    def record(self) -> RunRecord:
        planned, ctx, task, out = self.planned, self.ctx, self.planned.task, self.outcome
        void = out.end_reason in VOID_REASONS
        isolated = self.sandbox.isolated if self.sandbox is not None else ctx.isolated
        agent = self.agent
        rec = RunRecord(
            run_id=self.run_id, key=planned.key, attempt=self.attempt, kinds=task.kinds,
            harness_version=HARNESS_VERSION, model=getattr(agent, "model", None),
            prices=getattr(agent, "prices", None), sandbox="bwrap" if isolated else "none",
            status="void" if void else "broken" if self.broken_reason else "done", end_reason=out.end_reason,
            void_reason=self.void_reason if void else self.broken_reason,
            provider_status=out.error_status if out.end_reason == "api_error" else None,
            score=None if void or self.broken_reason else self.graded.score,
            passed=None if void or self.broken_reason else self.graded.passed,
            value={"amount": task.value.amount, "currency": task.value.currency} if task.value else None,
            usage=UsageCost.of(out.usage, out.cost_usd),
            judge_usage=self.graded.judge_usage, grade=self.graded.grade if not void else Grade(),
            final_message=safe_text(out.final_message), turns=out.turns, started_at=self.started_wall,
            duration_s=time.monotonic() - self.t0, options=ctx.options.result_options(),
            task_meta=task.meta(),
            run_dir=str(self.run_dir) if self.run_dir else None, search=self.search,
        )
        if void and out.end_reason != "interrupted" and self.attempt >= MAX_VOID_ATTEMPTS and not self.probe:
            # Void this often: counted as a failed run, with the reason, until --retry-void.
            reason = f"void {self.attempt} times; the last: {self.void_reason or out.end_reason}"[:1000]
            rec.status, rec.score, rec.passed, rec.void_attempts = "done", 0.0, False, self.attempt
            rec.grade = failed_grade(task, planned.level, Fault(part="run", reason=reason))
        return rec


async def execute_run(planned: PlannedRun, ctx: RunContext, attempt: int = 1, *, probe: bool = False) -> RunRecord:
    """One run to its record, stored (a `probe` of the task's own deliverable is not: its
    folder is removed and the record only returned)."""
    run = _Run(planned, ctx, attempt, probe)
    try:
        env = await run.build()
        await run.work(env)
        if run.outcome.end_reason not in VOID_REASONS:
            await run.grade()
        else:
            run.void_reason = run.outcome.error or run.outcome.end_reason
    except asyncio.CancelledError:
        run.outcome.end_reason = "interrupted"
        run.void_reason = "interrupted"
        raise
    except (HarnessError, InputError, OSError, PathError) as e:
        run.outcome.end_reason = "harness_error"
        run.void_reason = f"{type(e).__name__}: {e}"
        run.transcript.error("harness", run.void_reason)
    except Exception as e:  # a fault of assay's own setting up this run voids it (re-run, then failed); the campaign goes on
        run.outcome.end_reason = "harness_error"
        run.void_reason = f"{type(e).__name__}: {e}"
        run.transcript.error("harness", traceback.format_exc(limit=8))
    finally:
        await run.close_sandbox()
        if run.scenario is not None:
            await asyncio.shield(run.scenario.close())
        await asyncio.shield(run.release_workspace(keep_data=run.outcome.end_reason != "interrupted"))
        record = run.record()
        if probe:
            if run.run_dir is not None:
                shutil.rmtree(run.run_dir, ignore_errors=True)
        elif run.outcome.end_reason != "interrupted":
            # The save is written off the event loop (other runs' model calls go on), together
            # with the runs that finished meanwhile, and finished even if this task is cancelled.
            await ctx.saver.save(record, run.transcript.events)
        elif run.run_dir is not None:
            shutil.rmtree(run.run_dir, ignore_errors=True)
    return record


def lost_run(planned: PlannedRun, ctx: RunContext, attempt: int, reason: str) -> tuple[RunRecord, list[Event]]:
    """The void record (and its one event) of a run that never came back from the worker it was
    sent to (`--backend ray`: the worker died every time it was tried); re-run on resume."""
    run = _Run(planned, ctx, attempt)
    run.outcome = AgentOutcome(end_reason="harness_error", error=reason)
    run.void_reason = reason
    run.transcript.error("harness", reason)
    return run.record(), run.transcript.events
