"""Alternate correct fix, written differently: a separate risk module with a rule table,
decide() rewritten as an explicit pipeline, automatic limit $140."""
import json
import os
import sys
from pathlib import Path

ws = Path(sys.argv[1])
params = json.loads(os.environ.get("FDEGYM_VARIANT_PARAMS", "{}") or "{}")
pattern = params.get("pattern", "serial")
rules = []
if pattern == "serial":
    rules.append({"name": "serial_returner", "max_account_age_days": params["age_days"], "min_return_ratio": params["ratio"]})
elif pattern == "wardrobe":
    rules.append({"name": "wardrobing", "category": params["category"], "min_days_since_delivery": params["min_days"]})
elif pattern == "ring":
    rules.append({"name": "shared_address", "min_accounts_on_address": params["ring_min"]})

sysdir = ws / "system"
(sysdir / "risk_rules.json").write_text(json.dumps({"rules": rules}, indent=2) + "\n")
(sysdir / "risk.py").write_text('''"""Abuse risk flags for the refund desk (rules in risk_rules.json)."""
import json
import os

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "risk_rules.json"), encoding="utf-8") as f:
    RISK_RULES = json.load(f)["rules"]


def _num(x, default=0.0):
    try:
        return float(x)
    except (TypeError, ValueError):
        return default


def flags(request):
    out = []
    for r in RISK_RULES:
        if "max_account_age_days" in r:
            ratio = _num(request.get("returns_12m")) / max(1.0, _num(request.get("orders_12m")))
            if _num(request.get("account_age_days"), 1e9) < r["max_account_age_days"] and ratio >= r["min_return_ratio"]:
                out.append(r["name"])
        elif "category" in r:
            d = request.get("days_since_delivery")
            if request.get("category") == r["category"] and d is not None and _num(d) >= r["min_days_since_delivery"]:
                out.append(r["name"])
        elif "min_accounts_on_address" in r:
            if _num(request.get("ship_address_accounts_90d")) >= r["min_accounts_on_address"]:
                out.append(r["name"])
    return out
''')
(sysdir / "refunds.py").write_text('''"""Refund desk decision rules (v3: abuse flags + faster approvals).

Production (batch.py) imports this module and calls decide() once per enriched request.
"""
import json
import os

import risk

_HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(_HERE, "refund_rules.json"), encoding="utf-8") as _f:
    RULES = json.load(_f)

HARD_CAP = 500.00  # FC-7, not configurable
AUTO_LIMIT = 140.00
DECISIONS = ("approve", "deny", "review")


def _finance_controls(req, amount):
    if amount > HARD_CAP:
        return "review"                      # FC-7
    if req.get("carrier_status") != "delivered":
        return "review"                      # FC-9 -> Carrier Claims
    return None


def decide(request: dict) -> str:
    amount = float(request["amount"])
    for step in (
        lambda: _finance_controls(request, amount),
        lambda: "deny" if int(request.get("prior_chargebacks") or 0) >= RULES["deny_chargebacks_at"] else None,
        lambda: "review" if risk.flags(request) else None,
        lambda: "approve" if amount <= AUTO_LIMIT else None,
        lambda: "approve" if request.get("reason") in RULES["documented_reasons"] and request.get("photo_attached") else None,
        lambda: "approve" if request.get("loyalty_tier") in RULES["trusted_tiers"] else None,
    ):
        d = step()
        if d:
            return d
    return "review"
''')
