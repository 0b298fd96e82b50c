"""Build the refund-desk workspace: system/, data/ and the queue report in docs/.

The static documents (docs/*.md, staff.md) are the task's workspace/ folder, which the
harness copies into the workspace before build() runs.

Variant parameters come only from the environment; they and the abuse labels are never
written into the workspace. The history carries what the company actually recorded
(decisions, review outcomes, post-refund audit flags), which is noisy and partial.
"""
from __future__ import annotations

import csv
import datetime as dt
import importlib.util
import os
import random
import shutil
import statistics
from pathlib import Path

CASE = Path(__file__).resolve().parent


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


gen = _load("refund_desk_native_gen", CASE / "gen.py")

HISTORY_N = 5200
FIELDS = ["request_id", "order_id", "customer_id", "requested_at", "amount", "currency", "category",
          "reason", "photo_attached", "carrier_status", "days_since_delivery", "account_age_days",
          "orders_12m", "returns_12m", "prior_chargebacks", "loyalty_tier", "payment_method", "ship_to",
          "ship_address_accounts_90d"]


def _history(params: dict):
    pristine = _load("refund_desk_native_pristine_refunds", CASE / "world" / "system" / "refunds.py")
    recs = gen.generate(gen.HISTORY_SEED, HISTORY_N, "2025-01-01T00:00", 181, 1000000, 1000000, params)
    rng = random.Random(gen.HISTORY_SEED + 99)
    rows = []
    for req, abusive in recs:
        d = pristine.decide(dict(req))
        u1, u2, u3 = rng.random(), rng.random(), rng.random()
        if d == "approve":
            outcome = "refunded"
            hours = round(6 + 18 * u2, 1)
        elif d == "deny":
            outcome = "denied_by_rules"
            hours = round(6 + 18 * u2, 1)
        elif req["carrier_status"] != "delivered":
            outcome = "carrier_claim"
            hours = round(72 + 240 * u2, 1)
        else:
            caught = u1 < (0.85 if abusive else 0.03)
            outcome = "denied_in_review" if caught else "refunded"
            hours = round(30 + 110 * u2 + (0 if u2 < 0.8 else 90 * u3), 1)
        flag = ""
        if outcome == "refunded":
            if abusive and u3 < 0.6:
                flag = "abuse_confirmed"
            elif not abusive and u3 < 0.008:
                flag = "abuse_confirmed"
            elif u3 > 0.75:
                flag = "checked_ok"
        row = dict(req)
        row["photo_attached"] = "yes" if req["photo_attached"] else "no"
        row["days_since_delivery"] = "" if req["days_since_delivery"] is None else req["days_since_delivery"]
        row.update(system_decision=d, final_outcome=outcome, hours_to_decision=hours, audit_flag=flag)
        rows.append(row)
    return rows


def _write_csv(path: Path, rows, fields):
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in fields})


def _weekly(rows):
    weeks = {}
    for r in rows:
        d = dt.datetime.fromisoformat(r["requested_at"]).date()
        monday = d - dt.timedelta(days=d.weekday())
        weeks.setdefault(monday, []).append(r)
    out = []
    rng = random.Random(4242)
    for monday in sorted(weeks):
        rs = weeks[monday]
        rev = [r for r in rs if r["system_decision"] == "review"]
        out.append({
            "week_start": monday.isoformat(),
            "requests": len(rs),
            "auto_approved": sum(r["system_decision"] == "approve" for r in rs),
            "auto_denied": sum(r["system_decision"] == "deny" for r in rs),
            "sent_to_review": len(rev),
            "median_hours_in_review": round(statistics.median([r["hours_to_decision"] for r in rev]), 1) if rev else "",
            "review_agents_on_shift": rng.choice([9, 10, 10, 11, 12]),
            "csat_refunds": round(3.2 + rng.random() * 0.5, 2),
        })
    return out


def _queue_report(rows, weekly) -> str:
    n = len(rows)
    rev = [r for r in rows if r["system_decision"] == "review" and r["carrier_status"] == "delivered"]
    rev_small = [r for r in rev if float(r["amount"]) < 150]
    appr_small = sum(r["final_outcome"] == "refunded" for r in rev_small)
    appr_all = sum(r["final_outcome"] == "refunded" for r in rev)
    auto = sum(r["system_decision"] == "approve" for r in rows)
    med = statistics.median([r["hours_to_decision"] for r in rev])
    last = weekly[-4:]
    backlog_growth = sum(w["sent_to_review"] for w in last) / 4
    return f"""# Refund queue — H1 2025 review (Customer Care)

Prepared by Dana Whitfield for the July ops review. Source: refunds-batch decisions and the
Refund Review team's case tool, 1 Jan – 30 Jun 2025.

## Headlines

- {n:,} refund requests in H1; {auto:,} ({auto / n:.0%}) were approved automatically the same night.
- {len(rev):,} delivered-order requests went to manual review. Median time to a decision in
  review: **{med:.0f} hours**. Refund CSAT sits around 3.4 / 5; "waiting for my refund" is
  the #1 contact driver.
- Reviewers approved {appr_all / len(rev):.0%} of everything they looked at, and
  {appr_small / max(1, len(rev_small)):.0%} of reviewed requests under $150.
- The last four weeks averaged {backlog_growth:.0f} new review cases per week with 9–12
  agents on shift.

## Proposal

Most of what the queue looks at gets approved anyway. Raising the automatic approval limit
from $60 to **$150** would take roughly half of the queue away and let the team focus on
the big-ticket cases. Finance's controls (hard cap, carrier check) are untouched by this.

## Open points

- Trust & Safety to confirm abuse is not a concern at these amounts (Dana: "abuse is well
  under 1% of refunds").
- Engineering (refund desk rules) to implement the new limit before the August peak.
"""


def build(ws) -> None:
    ws = Path(ws)
    params = gen.variant_params()
    ws.mkdir(parents=True, exist_ok=True)
    if (ws / "system").exists():
        shutil.rmtree(ws / "system")
    shutil.copytree(CASE / "world" / "system", ws / "system",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (ws / "docs").mkdir(exist_ok=True)

    rows = _history(params)
    data = ws / "data"
    data.mkdir(exist_ok=True)
    _write_csv(data / "refund_history_2025H1.csv", rows,
               FIELDS + ["system_decision", "final_outcome", "hours_to_decision", "audit_flag"])
    weekly = _weekly(rows)
    _write_csv(data / "review_queue_weekly.csv", weekly, list(weekly[0].keys()))
    (ws / "docs" / "queue_report_2025H1.md").write_text(_queue_report(rows, weekly), encoding="utf-8")


if __name__ == "__main__":
    import sys
    build(sys.argv[1])
