"""Admission anchors (`assay validate --anchors`): a task is trustworthy only if its grader
tells a real solution from doing nothing.

Rubric and contract tasks: the reference must pass and no-op must not. Scenarios add the
FDE-Gym anchors (literal, shortcuts, bypasses, alternates, probes) in `assay.scenario_anchors`.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from assay.agent.spec import AgentFactory
from assay.campaign.plan import CampaignOptions, build_plan
from assay.campaign.runner import RunContext
from assay.campaign.scheduler import run_campaign
from assay.config import load_config
from assay.grade.grader import needs_judge
from assay.store import Store
from assay.task.model import Task


@dataclass
class AnchorVerdict:
    task_id: str
    anchor: str
    score: float | None
    rule: str
    ok: bool


async def run_anchors(tasks: list[Task], *, store_url: str | None = None, console: Console | None = None
                      ) -> list[AnchorVerdict]:
    verdicts: list[AnchorVerdict] = []
    plain = [t for t in tasks if "scenario" not in t.kinds]
    runnable = []
    for t in plain:
        if needs_judge(t):
            verdicts.append(AnchorVerdict(t.id, "reference", None, "needs a judge: not checked offline", True))
        else:
            runnable.append(t)
    if runnable:
        with tempfile.TemporaryDirectory(prefix="assay-anchors-") as tmp:
            url = store_url or f"sqlite:///{Path(tmp) / 'anchors.db'}"
            store = Store(url)
            config = load_config()
            agents = [AgentFactory("noop", config), AgentFactory("reference", config)]
            options = CampaignOptions(campaign="anchors", concurrency=4)
            plan = build_plan(runnable, agents, options)
            ctx = RunContext(store=store, options=options)
            await run_campaign(plan, ctx, console=console, show_progress=False)
            keys = {p.key.digest for p in plan.runs}
            by = {(r.key.task_id, r.key.agent): r for r in store.runs("anchors") if r.key.digest in keys}
            store.close()
            for t in runnable:
                for agent, must_pass in (("reference", True), ("noop", False)):
                    if agent == "reference" and "reference" not in t.policies:
                        # Upstream tasks ship no reference; the no-op anchor still applies.
                        verdicts.append(AnchorVerdict(t.id, "reference", None, "no reference shipped: not checked",
                                                      True))
                        continue
                    r = by.get((t.id, agent))
                    if r is None or r.status != "done":
                        why = r.void_reason if r is not None else "no run"
                        verdicts.append(AnchorVerdict(t.id, agent, None, f"run void: {why}", False))
                        continue
                    rule = f"must pass (>= {t.pass_threshold():g})" if must_pass else "must not pass"
                    verdicts.append(AnchorVerdict(t.id, agent, r.score, rule, bool(r.passed) == must_pass))
    scen = [t for t in tasks if "scenario" in t.kinds]
    if scen:
        from assay.scenario_anchors import run_scenario_anchors

        verdicts.extend(await run_scenario_anchors(scen, store_url=store_url, console=console))
    return verdicts
