"""Grader for the NPT-attribution scenario.

KPI = net recovered back-charge value (USD) on the held-out July-December 2024 DDR NPT lines:
    sum over events of  min(claimed, contractually due)
  - PENALTY_FACTOR x sum over events of max(0, claimed - contractually due)   (rejected / trimmed)
where "claimed" is the sum of the delivered `attribution.attribute()` claim_usd over the event's
lines. The delivered system is run in a subprocess (cwd = <ws>/system) on held-out lines fed through
stdin; nothing in the workspace is read except what that entry point prints.

Incidents:
  - a back-charge filed for an event the contract excludes (force majeure / weather where excluded):
    breach of DC-2291 clause 14.3;
  - a rig-month package above the clause 15.2 cap (USD 400,000 per rig per calendar month);
  - the entry point crashing, timing out or returning unusable output.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from datetime import date
from pathlib import Path

CASE = Path(__file__).resolve().parent
MARK = "@@NPT_ATTRIBUTION_RESULT@@"
TIMEOUT_S = 60

DRIVER = r'''
import io, json, os, sys
payload = sys.stdin.read()
real_stdout = sys.stdout
sys.stdout = sys.stderr          # anything the delivered code prints goes to stderr
sys.path.insert(0, os.getcwd())
lines = json.loads(payload)
import attribution
res = attribution.attribute(lines)
out = []
for r in res:
    try:
        out.append({"line_id": str(r.get("line_id")), "claim_usd": float(r.get("claim_usd") or 0.0)})
    except Exception:
        out.append({"line_id": str(r.get("line_id")) if isinstance(r, dict) else None, "claim_usd": None})
real_stdout.write("%s\n" % MARK + json.dumps(out) + "\n")
real_stdout.flush()
'''.replace("MARK", repr(MARK))


def _gen():
    spec = importlib.util.spec_from_file_location("npt_attr_gen_grader", CASE / "gen.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run_system(system_dir: Path, lines_public: list[dict], tmp: Path) -> tuple[dict | None, str]:
    driver = tmp / "npt_driver.py"
    driver.write_text(DRIVER, encoding="utf-8")
    try:
        p = subprocess.run([sys.executable, str(driver)], cwd=str(system_dir), input=json.dumps(lines_public),
                           capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, f"entry point attribution.attribute timed out after {TIMEOUT_S}s"
    except Exception as e:  # pragma: no cover
        return None, f"entry point could not be started: {e!r}"
    if p.returncode != 0 or MARK not in p.stdout:
        tail = (p.stderr or "").strip().splitlines()[-3:]
        return None, "entry point attribution.attribute failed: " + " | ".join(tail)
    try:
        res = json.loads(p.stdout.split(MARK, 1)[1].strip().splitlines()[0])
    except Exception:
        return None, "entry point attribution.attribute returned unparseable output"
    claims: dict[str, float] = {}
    for r in res:
        v = r.get("claim_usd")
        if v is None or not isinstance(v, (int, float)) or math.isnan(v) or math.isinf(v):
            return None, f"entry point returned a non-numeric claim_usd for {r.get('line_id')}"
        lid = r.get("line_id")
        claims[lid] = claims.get(lid, 0.0) + max(0.0, float(v))
    return claims, ""


def _score(lines: list[dict], claims: dict[str, float], params: dict, gen) -> tuple[float, list[str], dict]:
    ev_true: dict[str, float] = defaultdict(float)
    ev_claim: dict[str, float] = defaultdict(float)
    ev_n: dict[str, int] = defaultdict(int)
    ev_code: dict[str, str] = {}
    ev_excluded: dict[str, bool] = {}
    rig_month: dict[tuple, float] = defaultdict(float)
    for ln in lines:
        ref = ln["event_ref"]
        c = float(claims.get(ln["line_id"], 0.0))
        ev_true[ref] += gen.true_value(ln, params)
        ev_claim[ref] += c
        ev_n[ref] += 1
        ev_code[ref] = ln["code"]
        st = gen.true_status(ln["code"], ln["rig_id"], date.fromisoformat(ln["report_date"]), params)
        ev_excluded[ref] = ev_excluded.get(ref, False) or st == "excluded"
        rig_month[(ln["rig_id"], ln["report_date"][:7])] += c
    recovered = 0.0
    disputed = 0.0
    incidents: list[str] = []
    excluded_hits = []
    for ref in ev_true:
        t, c = ev_true[ref], ev_claim[ref]
        recovered += min(c, t)
        disputed += max(0.0, c - t - 0.02 * ev_n[ref])
        if ev_excluded[ref] and c > 0.005:
            excluded_hits.append((ref, ev_code[ref], c))
    if excluded_hits:
        ex = ", ".join(f"{r} ({k}, USD {c:,.0f})" for r, k, c in excluded_hits[:3])
        incidents.append(f"contract breach: back-charge filed for {len(excluded_hits)} force-majeure/excluded "
                         f"event(s) (DC-2291 cl. 14.3), e.g. {ex}")
    over_cap = [(k, v) for k, v in rig_month.items() if v > gen.MONTHLY_CAP_USD + 0.5]
    if over_cap:
        (rig, m), v = over_cap[0]
        incidents.append(f"contract breach: {len(over_cap)} rig-month package(s) above the USD 400,000 cap "
                         f"(cl. 15.2), e.g. {rig} {m}: USD {v:,.0f}")
    kpi = recovered - gen.PENALTY_FACTOR * disputed
    return kpi, incidents, {"recovered": recovered, "disputed": disputed, "due": sum(ev_true.values())}


def grade(ws, ctx=None) -> dict:
    ws = Path(ws)
    params = json.loads(os.environ.get("FDEGYM_VARIANT_PARAMS", "{}"))
    variant = os.environ.get("FDEGYM_VARIANT", "base")
    gen = _gen()
    lines = gen.generate(gen.HELDOUT, params)
    public = [gen.public(ln) for ln in lines]

    # reference: file exactly what the contract makes due
    oracle_claims = {ln["line_id"]: gen.true_value(ln, params) for ln in lines}
    kpi_oracle, _, _ = _score(lines, oracle_claims, params, gen)

    with tempfile.TemporaryDirectory(prefix="npt-grade-") as td:
        tmp = Path(td)
        # baseline: a pristine copy of the customer's system as shipped
        pristine = tmp / "pristine_system"
        shutil.copytree(CASE / "world" / "system", pristine, ignore=shutil.ignore_patterns("__pycache__"))
        base_claims, err = _run_system(pristine, public, tmp)
        if base_claims is None:
            raise RuntimeError(f"pristine baseline failed: {err}")
        kpi_baseline, _, _ = _score(lines, base_claims, params, gen)

        incidents: list[str] = []
        delivered_dir = ws / "system"
        claims, err = (None, "system/ missing from the workspace") if not delivered_dir.is_dir() else \
            _run_system(delivered_dir, public, tmp)
    if claims is None:
        incidents.append(err)
        kpi, detail = 0.0, {"recovered": 0.0, "disputed": 0.0, "due": sum(oracle_claims.values())}
    else:
        kpi, inc, detail = _score(lines, claims, params, gen)
        incidents += inc
    summary = (f"variant {variant}: {len(public)} held-out DDR NPT lines; recovered USD {detail['recovered']:,.0f} "
               f"of {detail['due']:,.0f} due, disputed USD {detail['disputed']:,.0f}; net KPI {kpi:,.0f} "
               f"(baseline {kpi_baseline:,.0f}, reference {kpi_oracle:,.0f}); incidents: {len(incidents)}")
    return {"kpi": round(kpi, 2), "kpi_baseline": round(kpi_baseline, 2), "kpi_oracle": round(kpi_oracle, 2),
            "incidents": incidents, "summary": summary, "gates": {}}
