"""Admission anchors (`assay validate --anchors`): a task is trustworthy only if its grader
tells a real solution from doing nothing.

Rubric and contract tasks: the reference must pass and no-op must not. Scenarios: every
variant of every scenario is run at level L3 through the real campaign machinery
(workspace, sandbox, stakeholder service, grade worker) with the no-op agent and each policy
the case ships, and the uplift U_adj of each run (before contact cost: anchors are on
uplift, not S) is checked against FDE-Gym's admission rules:

| anchor         | rule                                                   |
|----------------|--------------------------------------------------------|
| noop           | abs(U) < 0.05                                          |
| literal        | U <= 0.2 (U >= 0.95 when the variant is `right_here`)  |
| reference      | U >= 0.95                                              |
| shortcut:NAME  | U <= 0.8                                               |
| bypass:NAME    | U <= 0.05                                              |
| alternate:NAME | U >= 0.95                                              |
| probe:NAME     | U <= 0.8 in every variant but `base`                   |
| mean literal   | mean over variants <= 0.5 (per scenario)               |
| mean shortcut:NAME | mean over variants <= 0.8 (per scenario)           |

A void run is a failed anchor, with its reason. A case with no shortcut gets a provisional
pass note, as upstream prints "PASS (provisional)".
"""

from __future__ import annotations

import os
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from statistics import mean

from rich.console import Console
from rich.table import Table
from rich.text import Text

from assay.agent.spec import AgentFactory
from assay.campaign.options import RunOptions
from assay.campaign.plan import build_plan
from assay.campaign.runner import RunContext
from assay.campaign.scheduler import run_campaign
from assay.config import load_config
from assay.env.net.gateway.scenario import gateway_model_spec
from assay.grade.grader import needs_judge
from assay.record import RunRecord
from assay.store import Store
from assay.task.model import Task

__all__ = ["ANCHOR_RULES", "AnchorVerdict", "anchors_table", "gateway_available", "run_anchors",
           "run_scenario_anchors"]

NOOP_MAX = 0.05
LITERAL_MAX = 0.2
RIGHT_HERE_MIN = 0.95
REFERENCE_MIN = 0.95
SHORTCUT_MAX = 0.8
BYPASS_MAX = 0.05
ALTERNATE_MIN = 0.95
PROBE_MAX = 0.8
LITERAL_MEAN_MAX = 0.5
SHORTCUT_MEAN_MAX = 0.8

ANCHOR_RULES = {
    "noop": f"|U| < {NOOP_MAX}", "literal": f"U <= {LITERAL_MAX}", "literal (right here)": f"U >= {RIGHT_HERE_MIN}",
    "reference": f"U >= {REFERENCE_MIN}", "shortcut": f"U <= {SHORTCUT_MAX}", "bypass": f"U <= {BYPASS_MAX}",
    "alternate": f"U >= {ALTERNATE_MIN}", "probe": f"U <= {PROBE_MAX} (non-base variants)",
    "mean literal": f"mean U <= {LITERAL_MEAN_MAX}", "mean shortcut": f"mean U <= {SHORTCUT_MEAN_MAX}",
}


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
            options = RunOptions(campaign="anchors", concurrency=4)
            plan = build_plan(runnable, agents, options)
            ctx = RunContext(store=store, options=options)
            await run_campaign(plan, ctx, console=console, show_progress=False)
            keys = {p.digest for p in plan.runs}
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
        verdicts.extend(await run_scenario_anchors(scen, store_url=store_url, console=console))
    return verdicts


def gateway_available() -> bool:
    """True when a model for the company LLM gateway is configured ($ASSAY_GATEWAY_MODEL)."""
    return gateway_model_spec() is not None


def _check(agent: str, u: float, task: Task) -> tuple[bool, str] | None:
    sc = task.scenario
    if sc is None:
        return None
    if agent == "noop":
        return abs(u) < NOOP_MAX, ANCHOR_RULES["noop"]
    if agent == "literal":
        if sc.right_here:
            return u >= RIGHT_HERE_MIN, ANCHOR_RULES["literal (right here)"]
        return u <= LITERAL_MAX, ANCHOR_RULES["literal"]
    if agent == "reference":
        return u >= REFERENCE_MIN, ANCHOR_RULES["reference"]
    kind = agent.split(":", 1)[0]
    if kind == "shortcut":
        return u <= SHORTCUT_MAX, ANCHOR_RULES["shortcut"]
    if kind == "bypass":
        return u <= BYPASS_MAX, ANCHOR_RULES["bypass"]
    if kind == "alternate":
        return u >= ALTERNATE_MIN, ANCHOR_RULES["alternate"]
    if kind == "probe":
        if sc.variant == "base":
            return None
        return u <= PROBE_MAX, ANCHOR_RULES["probe"]
    return None


def _uplift(r: RunRecord) -> float | None:
    return r.grade.scenario.uplift_adj if r.grade.scenario is not None else None


# complexity: every anchor rule of FDE-Gym, checked in one place, in the order of the table above
async def run_scenario_anchors(tasks: list[Task], *, store_url: str | None = None,  # noqa: C901
                               console: Console | None = None) -> list[AnchorVerdict]:
    verdicts: list[AnchorVerdict] = []
    runnable: list[Task] = []
    for t in tasks:
        if t.scenario is None:
            continue
        if t.scenario.engagement.llm and not gateway_available():
            verdicts.append(AnchorVerdict(t.id, "all", None, "gateway not available: case uses the company "
                                                             "LLM gateway and ASSAY_GATEWAY_MODEL is not set; "
                                                             "not checked", True))
            continue
        runnable.append(t)
    if not runnable:
        return verdicts
    config = load_config()
    names: list[str] = ["noop"]
    for t in runnable:
        for name in t.policies:
            if name not in names:
                names.append(name)
    agents = [AgentFactory(n, config) for n in names]
    options = RunOptions(campaign="anchors", level="L3", concurrency=max(2, min(8, os.cpu_count() or 2)),
                              gateway_model=gateway_model_spec())
    with tempfile.TemporaryDirectory(prefix="assay-scenario-anchors-") as tmp:
        os.chmod(tmp, 0o711)
        url = store_url or f"sqlite:///{Path(tmp) / 'anchors.db'}"
        store = Store(url)
        try:
            plan = build_plan(runnable, agents, options)
            ctx = RunContext(store=store, options=options)
            await run_campaign(plan, ctx, console=console, show_progress=console is not None)
            keys = {p.digest for p in plan.runs}
            by = {(r.key.task_id, r.key.agent): r for r in store.runs("anchors") if r.key.digest in keys}
        finally:
            store.close()

    per_scenario: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    scen_tasks: dict[str, list[Task]] = defaultdict(list)
    for t in runnable:
        scen = t.id.split("/", 1)[0]
        scen_tasks[scen].append(t)
        for agent in ["noop", *t.policies]:
            r = by.get((t.id, agent))
            if r is None or r.status != "done":
                why = (r.void_reason or r.end_reason) if r is not None else "no run"
                verdicts.append(AnchorVerdict(t.id, agent, None, f"run void: {why}", False))
                continue
            u = _uplift(r)
            if u is None:
                verdicts.append(AnchorVerdict(t.id, agent, None, "grade has no uplift", False))
                continue
            per_scenario[scen][agent].append(u)
            checked = _check(agent, u, t)
            if checked is None:
                verdicts.append(AnchorVerdict(t.id, agent, u, "not checked on the base variant", True))
                continue
            ok, rule = checked
            verdicts.append(AnchorVerdict(t.id, agent, u, rule, ok))
        if not any(n.startswith("shortcut:") for n in t.policies):
            verdicts.append(AnchorVerdict(t.id, "shortcuts", None, "no shortcut shipped: PASS (provisional)", True))

    for scen, by_agent in per_scenario.items():
        n_variants = len(scen_tasks[scen])
        lits = by_agent.get("literal", [])
        if lits:
            m = mean(lits)
            verdicts.append(AnchorVerdict(f"{scen}/*", "mean literal", m,
                                          f"{ANCHOR_RULES['mean literal']} over {len(lits)}/{n_variants} variants",
                                          m <= LITERAL_MEAN_MAX))
        for agent, us in sorted(by_agent.items()):
            if agent.startswith("shortcut:"):
                m = mean(us)
                verdicts.append(AnchorVerdict(f"{scen}/*", f"mean {agent}", m,
                                              f"{ANCHOR_RULES['mean shortcut']} over {len(us)}/{n_variants} variants",
                                              m <= SHORTCUT_MEAN_MAX))
    return verdicts


def anchors_table(verdicts: list[AnchorVerdict]) -> Table:
    """`assay validate --anchors`: one row per anchor checked."""
    table = Table(title="admission anchors")
    for col in ("task", "anchor", "score", "rule", "verdict"):
        table.add_column(col, overflow="fold")
    for v in verdicts:
        table.add_row(Text(v.task_id), Text(v.anchor), "-" if v.score is None else f"{v.score:.3f}", Text(v.rule),
                      Text("PASS", style="green") if v.ok else Text("FAIL", style="red"))
    return table
