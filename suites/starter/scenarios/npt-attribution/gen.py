"""Deterministic generator for the NPT-attribution scenario (Nordvik Petroleum / Ferrovia Drilling).

Shared by build_world.py (history in data/) and grader.py (held-out production reports).
Nothing in here is copied into the workspace.

A DDR "line" is one NPT entry on one rig's daily drilling report. An NPT event that crosses
midnight is reported as one line per report day, all carrying the same event_ref; lines after
the first have cont = "Y".
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from datetime import date, datetime, timedelta

RIGS = {  # rig -> operating day rate (USD/day) under DC-2291
    "R-07": 41500.0,
    "R-11": 39800.0,
    "R-14": 44200.0,
    "R-22": 52500.0,
    "R-31": 47900.0,
}
CONTRACTOR = "Ferrovia Drilling AS"

# Schedule B of DC-2291 as originally signed (what the system implements).
BASE_CONTRACTOR_CODES = ["RR", "TDF", "MPF", "DWF", "HSE"]
BASE_EXCLUDED_CODES = ["WOW", "FM"]
MONTHLY_CAP_USD = 400000.0
DDR_UPGRADE = date(2024, 2, 12)  # rig reporting tool upgrade (the midnight quirk starts here)
PENALTY_FACTOR = 0.5  # cost of a rejected / trimmed claim per USD over-claimed

HISTORY = (date(2024, 1, 1), date(2024, 6, 30), 20240101, 1)
HELDOUT = (date(2024, 7, 1), date(2024, 12, 31), 77731207, 2001)

# code: (weight, median hours, sigma)
CODES = {
    "RR": (0.14, 3.0, 0.8),
    "TDF": (0.07, 4.0, 0.7),
    "MPF": (0.08, 2.5, 0.7),
    "DWF": (0.04, 5.0, 0.7),
    "HSE": (0.03, 6.0, 0.5),
    "WOE": (0.10, 6.0, 0.8),
    "WOW": (0.14, 10.0, 0.7),
    "WOO": (0.08, 2.0, 0.6),
    "DHT": (0.08, 5.0, 0.7),
    "HOLE": (0.12, 8.0, 0.8),
    "SVC": (0.10, 3.0, 0.6),
    "FM": (0.02, 12.0, 0.5),
}

DESCRIPTIONS = {
    "RR": ["Repair iron roughneck hydraulic leak", "Replace failed HPU hose on pipe handler",
           "Rig repair: SCR house cooling fault", "Repair catwalk machine", "Fix mousehole tensioner"],
    "TDF": ["Top drive failure: gearbox temperature trip", "Top drive IBOP actuator failed",
            "Top drive wash pipe leak, change out", "TDS-11 lost rotation, troubleshoot VFD"],
    "MPF": ["Mud pump #2 liner wash-out", "Mud pump #1 valve & seat change", "Mud pump #3 pulsation dampener failed",
            "Mud pump #2 lost prime, strip and inspect"],
    "DWF": ["Drawworks brake fault, slip & cut delayed", "Drawworks motor trip, troubleshoot",
            "Crown-o-matic fault, hoisting suspended"],
    "HSE": ["Contractor safety stand-down after dropped object", "Stop work: contractor crane crew incident review",
            "Contractor HSE stand-down, all crews"],
    "WOE": ["Waiting on replacement BOP control pod", "Waiting on drill line spool from base",
            "Waiting on iron roughneck spares", "Waiting on replacement mud pump fluid end",
            "Waiting on casing running tool"],
    "WOW": ["Waiting on weather: wind gusting 48 kn, crane ops suspended", "WOW: heave limits exceeded, pipe handling stopped",
            "Waiting on weather, supply boat unable to offload", "WOW: lightning, stop work on drill floor"],
    "WOO": ["Waiting on Company decision on sidetrack", "Waiting on Company orders: revised casing point",
            "Waiting on Company geologist sign-off"],
    "DHT": ["MWD tool failure, POOH", "Motor failure downhole, trip for BHA change", "RSS lost communication, trip"],
    "HOLE": ["Stuck pipe at 2,310 m, jar free", "Losses: pump LCM pill, monitor", "Tight hole, ream and backream",
             "Pack-off, circulate and condition"],
    "SVC": ["Waiting on cementing unit repair (3rd party)", "Wireline unit delayed", "Waiting on logging crew",
            "Casing crew late to rig"],
    "FM": ["Port blockade: supply vessel held at quay", "National grid outage at shore base, no crew change",
           "Regulatory hold on all offshore flights"],
}


def _season_factor(d: date) -> float:
    return 2.0 if d.month in (10, 11, 12, 1, 2, 3) else 0.6


def _pick_code(rng: random.Random, d: date) -> str:
    codes = list(CODES)
    weights = [CODES[c][0] * (_season_factor(d) if c == "WOW" else 1.0) for c in codes]
    return rng.choices(codes, weights=weights, k=1)[0]


def _hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def generate(period, params: dict) -> list[dict]:
    """NPT lines for all rigs in a period. Each line also carries private truth fields
    (keys starting with '_')."""
    start_d, end_d, seed, first_ref = period
    rng = random.Random(seed)
    cumulative = bool(params.get("ddr_cumulative"))
    period_start = datetime(start_d.year, start_d.month, start_d.day)
    period_end = datetime(end_d.year, end_d.month, end_d.day) + timedelta(days=1)
    total_min = int((period_end - period_start).total_seconds() // 60)
    lines: list[dict] = []
    ref = first_ref
    for rig in RIGS:
        t = int(rng.uniform(2, 30) * 60) // 15 * 15
        while True:
            gap = int(rng.expovariate(1.0 / (30 * 60)))
            t = (t + gap) // 15 * 15
            if t >= total_min - 60:
                break
            d0 = (period_start + timedelta(minutes=t)).date()
            code = _pick_code(rng, d0)
            _, med, sig = CODES[code]
            hrs = min(36.0, max(0.5, rng.lognormvariate(math.log(med), sig)))
            dur = max(30, int(round(hrs * 4)) * 15)
            dur = min(dur, total_min - t)
            desc = rng.choice(DESCRIPTIONS[code])
            event_ref = f"tmp-{rig}-{ref}"
            ref += 1
            # split at midnight
            s = t
            cum = 0
            first = True
            while s < t + dur:
                day_start = (s // 1440) * 1440
                e = min(t + dur, day_start + 1440)
                day = (period_start + timedelta(minutes=day_start)).date()
                portion = e - s
                cum += portion
                rep = cum if (cumulative and not first and day >= DDR_UPGRADE) else portion
                lines.append({
                    "report_date": day.isoformat(),
                    "rig_id": rig,
                    "event_ref": event_ref,
                    "code": code,
                    "start": _hhmm(s - day_start),
                    "end": _hhmm(e - day_start),
                    "hours": f"{rep / 60:.2f}",
                    "cont": "N" if first else "Y",
                    "description": desc if first else desc + " (cont.)",
                    "_true_hours": portion / 60.0,
                })
                first = False
                s = e
            t = t + dur
    # event refs in chronological order of the event's first line (fleet-wide numbering)
    first: dict[str, tuple] = {}
    for r in lines:
        key = (r["report_date"], r["start"], r["rig_id"])
        if r["event_ref"] not in first or key < first[r["event_ref"]]:
            first[r["event_ref"]] = key
    renum = {old: f"NPT-24-{first_ref + i:05d}" for i, old in enumerate(sorted(first, key=lambda e: first[e]))}
    for r in lines:
        r["event_ref"] = renum[r["event_ref"]]
    # line ids: per rig-day in time order
    lines.sort(key=lambda r: (r["rig_id"], r["report_date"], r["start"]))
    k = defaultdict(int)
    for r in lines:
        key = (r["rig_id"], r["report_date"])
        k[key] += 1
        r["line_id"] = f"DDR-{r['rig_id']}-{r['report_date'].replace('-', '')}-{k[key]:02d}"
    lines.sort(key=lambda r: (r["report_date"], r["rig_id"], r["start"]))
    return lines


PUBLIC = ["line_id", "report_date", "rig_id", "event_ref", "code", "start", "end", "hours", "cont", "description"]


def public(line: dict) -> dict:
    return {k: line[k] for k in PUBLIC}


def true_status(code: str, rig: str, day: date, params: dict) -> str:
    """Contract truth for one line: contractor | operator | excluded."""
    if code == "FM":
        return "excluded"
    if code == "WOW":
        return "contractor" if params.get("wow_contractor") else "excluded"
    codes = set(BASE_CONTRACTOR_CODES)
    ad = params.get("amend_date")
    if ad and day >= date.fromisoformat(ad):
        codes |= set(params.get("amend_add", []))
    if params.get("special_rig") == rig:
        codes -= set(params.get("special_rig_company_codes", []))
    return "contractor" if code in codes else "operator"


def true_value(line: dict, params: dict) -> float:
    st = true_status(line["code"], line["rig_id"], date.fromisoformat(line["report_date"]), params)
    if st != "contractor":
        return 0.0
    return round(line["_true_hours"] * RIGS[line["rig_id"]] / 24.0, 2)


def baseline_claims(lines: list[dict]) -> dict[str, float]:
    """What the unchanged system claims per line (used only to write the claims history)."""
    used = defaultdict(float)
    out = {}
    for r in sorted(lines, key=lambda r: (r["rig_id"], r["report_date"], r["start"], r["line_id"])):
        c = 0.0
        if r["code"] in BASE_CONTRACTOR_CODES and r["code"] not in BASE_EXCLUDED_CODES:
            c = round(float(r["hours"]) * RIGS[r["rig_id"]] / 24.0, 2)
            key = (r["rig_id"], r["report_date"][:7])
            room = max(0.0, MONTHLY_CAP_USD - used[key])
            c = min(c, round(room, 2))
            used[key] += c
        out[r["line_id"]] = c
    return out


def claims_history(lines: list[dict], params: dict) -> list[dict]:
    """Monthly back-charge claims filed from the history lines, with Ferrovia's response."""
    rng = random.Random(4242)
    claimed = baseline_claims(lines)
    events: dict[str, dict] = {}
    for r in lines:
        c = claimed[r["line_id"]]
        ev = events.setdefault(r["event_ref"], {"rig": r["rig_id"], "code": r["code"], "month": r["report_date"][:7],
                                                "hours": 0.0, "claim": 0.0, "true": 0.0, "true_hours": 0.0})
        if c > 0:
            ev["hours"] += float(r["hours"])
            ev["claim"] += c
        tv = true_value(r, params)
        ev["true"] += tv
        if tv > 0:
            ev["true_hours"] += r["_true_hours"]
    rows = []
    seq = defaultdict(int)
    for ref, ev in sorted(events.items(), key=lambda kv: (kv[1]["month"], kv[0])):
        if ev["claim"] <= 0:
            continue
        m = ev["month"]
        seq[m] += 1
        cid = f"CLM-{m[2:4]}{m[5:7]}-{seq[m]:04d}"
        if ev["true"] <= 0.005:
            status, acc = "REJECTED", 0.0
            remark = f"Not Contractor NPT on {ev['rig']} - see FD letter FD/CM/118"
        elif ev["claim"] > ev["true"] + 0.05:
            status, acc = "PARTIAL", ev["true"]
            remark = f"Accepted {ev['true_hours']:.2f} h per Contractor IADC tour sheet"
        else:
            status, acc = "ACCEPTED", ev["claim"]
            remark = rng.choice(["", "", "", "", "Supporting DDR pages received late", "OK"])
        rows.append({"claim_id": cid, "month": m, "rig_id": ev["rig"], "event_ref": ref, "code": ev["code"],
                     "hours_claimed": f"{ev['hours']:.2f}", "amount_usd": f"{ev['claim']:.2f}",
                     "status": status, "accepted_usd": f"{acc:.2f}", "contractor_remark": remark})
    return rows
