"""One run, start to end: workspace, sandbox, agent, grade, audit, store.

Every failure becomes a value on the record (an end reason), never an exception that
takes the campaign down; a void run is stored and re-run on resume.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay import HARNESS_VERSION
from assay.agent.base import AgentEnv, AgentOutcome, RunLimits
from assay.agent.messages import ImagePart
from assay.agent.tools import ToolBox
from assay.agent.transcript import Transcript
from assay.campaign.plan import CampaignOptions, PlannedRun
from assay.env import fs
from assay.env.sandbox import Sandbox, bwrap_available
from assay.env.workspace import materialise, needs_workspace
from assay.errors import GraderError, HarnessError, InputError
from assay.grade.grader import GradeInput, grade_run
from assay.record import VOID_REASONS, RunRecord, UsageCost
from assay.store import Store

GRACE_S = 30.0


@dataclass
class RunContext:
    store: Store
    options: CampaignOptions
    judge: Any = None
    search_factory: Any = None  # task -> SearchBackend | None

    @property
    def isolated(self) -> bool:
        return bwrap_available() and not self.options.unsafe_no_sandbox


def effective_limits(planned: PlannedRun, options: CampaignOptions) -> RunLimits:
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
        parts.append(ImagePart(media_type=mime, data_b64=base64.b64encode(Path(p).read_bytes()).decode()))
    return parts


def _prompt(planned: PlannedRun) -> str:
    task = planned.task
    text = task.brief(planned.level)
    if task.messages and not text:
        text = "\n\n".join(f"{m.get('role', 'user')}: {m.get('content', '')}" for m in task.messages)
    return text


def _searchable_by_others(path: Path) -> bool:
    return all(os.stat(anc).st_mode & stat.S_IXOTH for anc in path.parents)


def runs_root(store_dir: Path) -> Path:
    """Where run folders live: under the store's folder, unless a sandbox uid cannot reach it.

    Sandboxed commands run as their own unprivileged uid, which needs search permission on
    every parent of the workspace; a store under a 0700 home (e.g. /root) does not give it,
    so such runs live under /var/tmp/assay-runs/<store digest>/ instead (recorded per run).
    """
    root = store_dir / "runs"
    if os.geteuid() != 0 or _searchable_by_others(root):
        return root
    digest = hashlib.sha256(str(store_dir.resolve()).encode()).hexdigest()[:12]
    base = Path("/var/tmp/assay-runs")
    for d in (base, base / digest):
        d.mkdir(exist_ok=True)
        os.chmod(d, 0o711)
    return base / digest


async def execute_run(planned: PlannedRun, ctx: RunContext, attempt: int = 1) -> RunRecord:
    task = planned.task
    run_id = uuid.uuid4().hex[:16]
    started_wall = time.time()
    t0 = time.monotonic()
    transcript = Transcript()
    limits = effective_limits(planned, ctx.options)
    outcome = AgentOutcome(end_reason="harness_error")
    workspace: Path | None = None
    run_dir: Path | None = None
    sandbox: Sandbox | None = None
    grade: dict[str, Any] = {}
    score = passed = None
    judge_usage = UsageCost()
    void_reason: str | None = None
    agent = None
    session = None
    try:
        agent = planned.agent.for_task(task)
        prompt = _prompt(planned)
        binds = list(agent.binds())
        sandbox_env: dict[str, str] = {}
        if needs_workspace(task):
            run_dir = runs_root(ctx.store.dir) / run_id
            run_dir.mkdir(parents=True)
            os.chmod(run_dir, 0o711)
            workspace = materialise(task, run_dir / "workspace")
            if task.scenario is not None:
                from assay.scenario.session import ScenarioSession

                session = ScenarioSession(task, planned.level, run_dir, workspace, transcript=transcript,
                                          options=ctx.options, agent_spec=planned.agent.spec,
                                          trusted_agent=planned.agent.kind in ("noop", "policy"))
                await session.setup()
                prompt = session.prompt()
                binds += session.ro_binds()
                sandbox_env.update(session.sandbox_env())
            wrapper = session.command_wrapper() if session is not None else None  # gateway/service forwarder
            sandbox = Sandbox(workspace, isolated=ctx.isolated, ro_binds=binds, env=sandbox_env,
                              command_wrapper=wrapper)
            sandbox.prepare()
        search = ctx.search_factory(task) if ctx.search_factory is not None else None
        tools = ToolBox(workspace, sandbox, task.tools, search=search)
        env = AgentEnv(task=task, level=planned.level, prompt=prompt, system_prompt=task.system_prompt,
                       images=_images(task.images), workspace=workspace, sandbox=sandbox, tools=tools,
                       limits=limits, transcript=transcript, messages=task.messages)
        try:
            outcome = await asyncio.wait_for(agent.run(env), timeout=limits.max_minutes * 60 + GRACE_S)
        except TimeoutError:
            outcome = AgentOutcome(end_reason="max_time")
            transcript.emit("harness", note="run exceeded its time limit; graded as the workspace stands")
        except (InputError, HarnessError, OSError):
            raise
        except Exception as e:  # an agent-side bug voids this run; the campaign goes on
            outcome = AgentOutcome(end_reason="harness_error", error=f"{type(e).__name__}: {e}")
            transcript.emit("error", source="harness", reason=traceback.format_exc(limit=8))
        if outcome.end_reason not in VOID_REASONS:
            if workspace is not None and task.answer_path and not task.tools:
                fs.write_file(workspace, task.answer_path, outcome.final_message,
                              owner=sandbox.uid if sandbox else None)
            try:
                t_grade = time.monotonic()
                result = await grade_run(GradeInput(task=task, level=planned.level, workspace=workspace,
                                                    final_message=outcome.final_message, events=transcript.events,
                                                    end_reason=outcome.end_reason, judge=ctx.judge,
                                                    scenario=session, commands=tools.commands))
                score, passed, grade, judge_usage = result.score, result.passed, result.grade, result.judge_usage
                grade["grade_seconds"] = round(time.monotonic() - t_grade, 4)
            except GraderError as e:
                void_reason = str(e)
                outcome.end_reason = "grader_error"
                transcript.emit("error", source="grader", reason=str(e))
            except Exception as e:  # a grader bug must void the run, not crash the campaign
                void_reason = f"{type(e).__name__}: {e}"
                outcome.end_reason = "grader_error"
                transcript.emit("error", source="grader", reason=void_reason)
        else:
            void_reason = outcome.error or outcome.end_reason
    except asyncio.CancelledError:
        outcome.end_reason = "interrupted"
        void_reason = "interrupted"
        raise
    except (HarnessError, InputError, OSError) as e:
        outcome.end_reason = "harness_error"
        void_reason = f"{type(e).__name__}: {e}"
        transcript.emit("error", source="harness", reason=void_reason)
    finally:
        if sandbox is not None:
            await _close(sandbox)
        if session is not None:
            await asyncio.shield(session.close())
        record = _record(planned, ctx, run_id, attempt, outcome, score, passed, grade, judge_usage,
                         void_reason, agent, sandbox, started_wall, time.monotonic() - t0, run_dir)
        if outcome.end_reason != "interrupted":
            # Blocking database I/O goes off the event loop so other runs' model calls go on;
            # the save is one transaction, finished by its thread even if this task is cancelled.
            await asyncio.to_thread(ctx.store.save_run, record, transcript.events)
        elif run_dir is not None:
            shutil.rmtree(run_dir, ignore_errors=True)
    return record


async def _close(sandbox: Sandbox) -> None:
    try:
        await asyncio.shield(sandbox.close())
    except asyncio.CancelledError:
        sandbox_kill_sync(sandbox)


def sandbox_kill_sync(sandbox: Sandbox) -> None:
    """Last resort on cancellation: the sandbox's own close did not get to run."""
    kill = getattr(sandbox, "kill_now", None)
    if callable(kill):
        kill()


def _record(planned: PlannedRun, ctx: RunContext, run_id: str, attempt: int, outcome: AgentOutcome,
            score: float | None, passed: bool | None, grade: dict[str, Any], judge_usage: UsageCost,
            void_reason: str | None, agent: Any, sandbox: Sandbox | None, started: float, duration: float,
            run_dir: Path | None) -> RunRecord:
    task = planned.task
    void = outcome.end_reason in VOID_REASONS
    u = outcome.usage
    isolated = sandbox.isolated if sandbox is not None else ctx.isolated
    return RunRecord(
        run_id=run_id, key=planned.key, attempt=attempt, kinds=task.kinds, harness_version=HARNESS_VERSION,
        model=getattr(agent, "model", None), prices=getattr(agent, "prices", None),
        sandbox="bwrap" if isolated else "none",
        status="void" if void else "done", end_reason=outcome.end_reason, void_reason=void_reason,
        score=None if void else score, passed=None if void else passed,
        value={"amount": task.value.amount, "currency": task.value.currency} if task.value else None,
        usage=UsageCost(input_tokens=u.input_tokens, output_tokens=u.output_tokens,
                        cache_read_tokens=u.cache_read_tokens, cache_write_tokens=u.cache_write_tokens,
                        cost_usd=outcome.cost_usd),
        judge_usage=judge_usage, grade=grade if not void else {}, final_message=outcome.final_message,
        turns=outcome.turns, started_at=started, duration_s=duration,
        options=ctx.options.result_options(),
        task_meta={"domain": task.domain, "subset": task.subset, "language": task.language,
                   "modality": task.modality, "execution": task.execution, "source": task.source,
                   "title": task.title},
        run_dir=str(run_dir) if run_dir else None,
    )
