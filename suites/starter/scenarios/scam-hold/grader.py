"""Grader for the scam-hold case.

Generates five weeks of held-out live payments for the variant (a different seed and period
from data/), runs the DELIVERED `holds.decide` on them in a subprocess (cwd = <ws>/system,
one fresh import per day, payments in time order, like the production batch), and replays the
call-back queue: call-backs in arrival order up to the team's real daily capacity, the rest
breach the 24h release obligation.

KPI (GBP, net benefit from docs/hold_policy_2024.md):
  + 80% of scam value held and called back - 40 per genuine payment held - 15 per call-back
  - 150 per held payment not called back within 24h (its scam loss stands).
Incidents: any day holding more than the call-back capacity (24h release breach); any payment
to a blocklisted (sanctioned) payee released; the entry point failing on held-out payments.

kpi_baseline: the pristine rules (threshold 50) computed here from the case's own copy of the
original system; kpi_oracle: the reference fix for the variant, computed here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

CASE = Path(__file__).resolve().parent
if str(CASE) not in sys.path:
    sys.path.insert(0, str(CASE))

import gen  # noqa: E402

MARK = "@@SCAMHOLD-DECISIONS@@"

DRIVER = r'''
import importlib, json, os, sys
real_out = sys.stdout
sys.stdout = sys.stderr          # delivered code may print; keep our channel clean
cwd = os.path.abspath(os.getcwd())
if cwd not in sys.path:
    sys.path.insert(0, cwd)
days = json.load(sys.stdin)
out = []
for day in days:
    for name, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", None) or ""
        if f and os.path.abspath(f).startswith(cwd + os.sep):
            del sys.modules[name]
    importlib.invalidate_caches()
    try:
        holds = importlib.import_module("holds")
    except BaseException as e:
        out.append({"import_error": repr(e)[:300]})
        continue
    res = []
    for p in day:
        try:
            d = holds.decide(dict(p))
        except BaseException as e:
            d = "__error__:" + repr(e)[:200]
        res.append(d if isinstance(d, str) else "__invalid__:" + repr(d)[:50])
    out.append(res)
real_out.write("\n" + "@@SCAMHOLD-DECISIONS@@" + json.dumps(out) + "\n")
real_out.flush()
'''


def _variant() -> tuple[str, dict]:
    return (os.environ.get("FDEGYM_VARIANT", "base"),
            json.loads(os.environ.get("FDEGYM_VARIANT_PARAMS", "{}") or "{}"))


def _by_day(pays: list[dict]) -> list[list[dict]]:
    days: dict[str, list[dict]] = {}
    for p in pays:
        days.setdefault(p["ts"][:10], []).append(gen.public(p))
    return [days[k] for k in sorted(days)]


def _run_delivered(ws: Path, days: list[list[dict]]) -> tuple[list[str], list[str]]:
    """Decisions for every payment (flattened, in order) and a list of problems."""
    n = sum(len(d) for d in days)
    system = ws / "system"
    if not (system / "holds.py").is_file():
        return ["release"] * n, ["entry_point_error: system/holds.py is missing"]
    with tempfile.TemporaryDirectory(prefix="scamhold-grade-") as tmp:
        drv = Path(tmp) / "driver.py"
        drv.write_text(DRIVER, encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith("FDEGYM_")}
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        try:
            proc = subprocess.run([sys.executable, str(drv)], cwd=str(system), input=json.dumps(days),
                                  capture_output=True, text=True, timeout=120, env=env)
        except subprocess.TimeoutExpired:
            return ["release"] * n, ["entry_point_error: holds.decide timed out on the held-out payments (120 s)"]
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(MARK)), None)
    if line is None:
        tail = (proc.stderr or "").strip().splitlines()[-3:]
        return ["release"] * n, [f"entry_point_error: the batch did not complete (exit {proc.returncode}): "
                                 + " | ".join(tail)[:400]]
    try:
        per_day = json.loads(line[len(MARK):])
    except json.JSONDecodeError:
        return ["release"] * n, ["entry_point_error: unreadable driver output"]
    out: list[str] = []
    bad = Counter()
    first_bad = ""
    for day, res in zip(days, per_day):
        if isinstance(res, dict) or len(res) != len(day):
            bad["import"] += len(day)
            first_bad = first_bad or (res.get("import_error", "") if isinstance(res, dict) else "length mismatch")
            out.extend(["release"] * len(day))
            continue
        for d in res:
            if d in ("hold", "release"):
                out.append(d)
            else:
                bad["decide"] += 1
                first_bad = first_bad or d
                out.append("release")
    problems = []
    if len(per_day) != len(days):
        problems.append("entry_point_error: the batch returned fewer days than it was given")
        out.extend(["release"] * (n - len(out)))
    if bad:
        problems.append(f"entry_point_error: holds.decide failed or returned an invalid value for "
                        f"{sum(bad.values())} held-out payments (first: {first_bad[:200]})")
    return out, problems


# ---------------------------------------------------------------- baseline and reference (in-process, own code)
def _pristine_rules():
    spec = importlib.util.spec_from_file_location("_scamhold_rules_grade", CASE / "world" / "system" / "rules.py")
    mod = importlib.util.module_from_spec(spec)
    prev, sys.dont_write_bytecode = sys.dont_write_bytecode, True   # keep the case folder clean
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.dont_write_bytecode = prev
    return mod, mod.load_rules(str(CASE / "world" / "system" / "config" / "rules.json"))


def reference_plan(params: dict) -> dict:
    """The expert fix for this world (mirrors solutions/oracle.py)."""
    cap = int(params.get("callback_capacity", 60))
    plan = {"threshold": 50, "crypto_night": False, "drop_watch": set(), "daily_cap": cap}
    if float(params.get("crypto_night_rate", 0)) > 0:
        plan["crypto_night"] = True
    if params.get("payroll_watchlisted"):
        plan["drop_watch"] = {gen.NORTHGATE[0]}
    if float(params.get("mid_band_scam_rate", 0)) == 0:
        plan["threshold"] = 70
    if cap < 20:
        # scarce call-backs: 80+ (investment scams, watchlist mules) always get a slot;
        # 70-79 only while at least 3 slots are still free that day
        plan.update(threshold=70, priority_score=80, reserve=3)
    return plan


def _decisions(pays: list[dict], params: dict, plan: dict | None) -> list[str]:
    rules, R = _pristine_rules()
    W = gen.world(params)
    watch = {w["payee_id"] for w in W["watchlist"]}
    blocked = set(W["blocked_ids"])
    if plan is None:
        plan = {"threshold": R["threshold"], "crypto_night": False, "drop_watch": set(), "daily_cap": None}
    watch = watch - plan["drop_watch"]
    out, count = [], Counter()
    for p in pays:
        if p["payee_id"] in blocked:
            out.append("hold")
            continue
        s, _ = rules.score(p, R, watch)
        hold = s >= plan["threshold"]
        if plan["crypto_night"] and p["new_payee"] and p["payee_type"] == "crypto_exchange":
            h = int(p["ts"][11:13])
            hold = hold or h >= 22 or h < 6
        day = p["ts"][:10]
        if hold and plan["daily_cap"] is not None:
            limit = plan["daily_cap"]
            if s < plan.get("priority_score", -1):
                limit -= plan.get("reserve", 0)
            if count[day] >= limit:
                hold = False
        if hold:
            count[day] += 1
        out.append("hold" if hold else "release")
    return out


_CACHE: dict[str, tuple] = {}


def _references(params: dict, pays: list[dict], cap: int, blocked) -> tuple[dict, dict]:
    key = json.dumps(params, sort_keys=True)
    if key not in _CACHE:
        base = gen.evaluate(pays, _decisions(pays, params, None), cap, blocked)
        orac = gen.evaluate(pays, _decisions(pays, params, reference_plan(params)), cap, blocked)
        _CACHE[key] = (base, orac)
    return _CACHE[key]


def grade(ws, ctx=None) -> dict:
    ws = Path(ws)
    name, params = _variant()
    cap = int(params.get("callback_capacity", 60))
    W = gen.world(params)
    pays = gen.payments(params, gen.HELD_SEED, gen.HELD_START, gen.HELD_DAYS)
    days = _by_day(pays)
    flat = [p for d in days for p in d]
    assert [p["payment_id"] for p in flat] == [p["payment_id"] for p in pays]

    decisions, problems = _run_delivered(ws, days)
    res = gen.evaluate(pays, decisions, cap, W["blocked_ids"])
    base, orac = _references(params, pays, cap, W["blocked_ids"])
    incidents = problems + res["incidents"]
    summary = (f"variant {name}: {len(pays)} held-out payments over {gen.HELD_DAYS} days; delivered held "
               f"{res['holds']} (max {res['max_day']}/day, call-back capacity {cap}/day, {res['breached']} "
               f"breached 24h), net benefit GBP {res['kpi']:,.0f} (prevented {res['prevented']:,.0f}, "
               f"friction {res['friction']:,.0f}, call-backs {res['callback']:,.0f}, breaches {res['breach']:,.0f}); "
               f"baseline GBP {base['kpi']:,.0f} ({base['holds']} held), reference GBP {orac['kpi']:,.0f} "
               f"({orac['holds']} held)")
    if incidents:
        summary += "; incidents: " + "; ".join(incidents)
    return {"kpi": res["kpi"], "kpi_baseline": base["kpi"], "kpi_oracle": orac["kpi"],
            "incidents": incidents, "summary": summary,
            "gates": {}}
