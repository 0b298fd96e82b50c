"""Build the scam-hold workspace: system/, docs/, data/, staff.md.

Variant parameters are read from the environment only and are never written into the
workspace; the history in data/ is simply what the current rules did in that world.
"""

from __future__ import annotations

import csv
import datetime as dt
import importlib.util
import json
import os
import random
import shutil
import sys
from pathlib import Path

CASE = Path(__file__).resolve().parent
if str(CASE) not in sys.path:
    sys.path.insert(0, str(CASE))

import gen  # noqa: E402


def _params() -> dict:
    return json.loads(os.environ.get("FDEGYM_VARIANT_PARAMS", "{}") or "{}")


def _load_rules_module(system_dir: Path):
    spec = importlib.util.spec_from_file_location("_scamhold_rules_build", system_dir / "rules.py")
    mod = importlib.util.module_from_spec(spec)
    prev, sys.dont_write_bytecode = sys.dont_write_bytecode, True   # keep the case folder clean
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.dont_write_bytecode = prev
    return mod


def _write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def build(ws) -> None:
    ws = Path(ws)
    params = _params()
    ws.mkdir(parents=True, exist_ok=True)
    for sub in ("system", "docs"):
        dst = ws / sub
        if dst.exists():
            shutil.rmtree(dst)
        shutil.copytree(CASE / "world" / sub, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(CASE / "world" / "staff.md", ws / "staff.md")

    # ---- system data: risk watchlist (Financial Crime) and sanctions blocklist
    W = gen.world(params)
    sysdata = ws / "system" / "data"
    _write_csv(sysdata / "watchlist.csv", ["payee_id", "payee_name", "added", "source", "ref", "reason"],
               [[w["payee_id"], w["payee_name"], w["added"], w["source"], w["ref"], w["reason"]]
                for w in W["watchlist"]])
    _write_csv(sysdata / "blocklist.csv", ["payee_id", "payee_name", "list", "listed"],
               [[b["payee_id"], b["payee_name"], b["list"], b["listed"]] for b in W["blocklist"]])

    # ---- history: what the current rules did, and what happened afterwards
    rules = _load_rules_module(ws / "system")
    R = rules.load_rules(str(ws / "system" / "config" / "rules.json"))
    watch = {w["payee_id"] for w in W["watchlist"]}
    blocked = set(W["blocked_ids"])
    cap_now = int(params.get("callback_capacity", 60))
    cut = params.get("capacity_cut_date") or ""
    cut_date = dt.date.fromisoformat(cut) if cut else None

    pays = gen.payments(params, gen.HIST_SEED, gen.HIST_START, gen.HIST_DAYS)
    r = random.Random(gen.HIST_SEED * 7 + 3)
    hist_rows, compl_rows = [], []
    daily: dict[str, dict] = {}
    per_day_called: dict[str, int] = {}
    for p in pays:
        day = p["ts"][:10]
        d = dt.date.fromisoformat(day)
        cap = cap_now if (cut_date is not None and d >= cut_date) else 60
        s, why = rules.score(p, R, watch)
        st = daily.setdefault(day, {"payments": 0, "held": 0, "called_back": 0, "auto_released_24h": 0,
                                    "sanctions_referrals": 0, "scam_stopped": 0})
        st["payments"] += 1
        if p["payee_id"] in blocked:
            decision, outcome = "hold", "sanctions_referral"
            st["sanctions_referrals"] += 1
            claim = ""
        else:
            decision = "hold" if s >= R["threshold"] else "release"
            claim = ""
            if decision == "release":
                outcome = ""
                if p["_scam"]:
                    claim = (d + dt.timedelta(days=r.randint(1, 20))).isoformat()
            else:
                st["held"] += 1
                k = per_day_called.get(day, 0)
                if k < cap:
                    per_day_called[day] = k + 1
                    st["called_back"] += 1
                    if p["_scam"]:
                        if r.random() < gen.CATCH_RATE:
                            outcome = "scam_stopped"
                            st["scam_stopped"] += 1
                        else:
                            outcome = "customer_insisted_released"
                            claim = (d + dt.timedelta(days=r.randint(1, 20))).isoformat()
                    else:
                        outcome = "genuine_released"
                else:
                    outcome = "auto_released_24h"
                    st["auto_released_24h"] += 1
                    if p["_scam"]:
                        claim = (d + dt.timedelta(days=r.randint(1, 20))).isoformat()
                # complaints caused by the hold
                if not p["_scam"]:
                    if outcome == "auto_released_24h" and r.random() < 0.55:
                        compl_rows.append([day, p["payment_id"], "held payment not released within 24 hours"])
                    elif p["payee_type"] == "payroll_bureau" and r.random() < 0.35:
                        compl_rows.append([day, p["payment_id"], "payroll payment delayed - staff paid late"])
                    elif p["amount"] >= 10000 and r.random() < 0.3:
                        compl_rows.append([day, p["payment_id"], "large genuine payment held - missed deadline"])
                    elif r.random() < 0.12:
                        compl_rows.append([day, p["payment_id"], "genuine payment held - inconvenience"])
        if claim:
            compl_rows.append([claim, p["payment_id"], "APP scam reimbursement claim"])
        hist_rows.append([p["payment_id"], p["ts"], p["customer_id"], p["customer_age"], p["customer_tenure_days"],
                          f"{p['amount']:.2f}", p["payee_id"], p["payee_name"], p["payee_type"],
                          int(p["new_payee"]), p["channel"], int(p["new_device"]), p["reference"],
                          s, "|".join(why), decision, outcome, claim])
    data = ws / "data"
    _write_csv(data / "payments_history.csv",
               gen.PUBLIC_FIELDS + ["risk_score", "rules_fired", "decision", "callback_outcome",
                                    "scam_claim_date"], hist_rows)
    _write_csv(data / "daily_queue.csv",
               ["date", "payments_scored", "held_for_callback", "called_back", "auto_released_24h",
                "sanctions_referrals", "scam_stopped"],
               [[day, v["payments"], v["held"], v["called_back"], v["auto_released_24h"], v["sanctions_referrals"],
                 v["scam_stopped"]] for day, v in sorted(daily.items())])
    compl_rows.sort()
    _write_csv(data / "complaints.csv", ["complaint_id", "date", "payment_id", "category"],
               [[f"CMP-{i + 1:05d}", c[0], c[1], c[2]] for i, c in enumerate(compl_rows)])
    (data / "README.md").write_text(DATA_README, encoding="utf-8")


DATA_README = """# data/ (exports for the engagement, 22 Apr - 9 Jun 2024)

- `payments_history.csv`: every outgoing payment the hold scorer saw, with the score and rules
  that fired at the time, the decision, and what happened next:
  - `callback_outcome`: `scam_stopped` (call-back stopped it), `customer_insisted_released`
    (customer overrode the warning), `genuine_released`, `auto_released_24h` (not called back
    within 24 hours, released unverified), `sanctions_referral` (blocklist hit, handled by
    Sanctions Ops); empty when the payment was not held.
  - `scam_claim_date`: date the customer later reported the payment as an APP scam
    (reimbursement claim), empty otherwise. Claims keep arriving for weeks, so the last weeks
    are incomplete.
- `daily_queue.csv`: call-back queue statistics per day (from the queue tool).
- `complaints.csv`: complaints logged by Customer Relations against a payment, and scam
  reimbursement claims.

Exported by Payments Operations MI. Customer ids are pseudonymised.
"""


if __name__ == "__main__":
    build(sys.argv[1])
