"""Reference fix (an expert who learned the variant's facts from the stakeholders and the data).

- new crypto-night typology: hold first-time payments to crypto exchanges 22:00-05:59;
- stale watchlist entry: remove the payroll bureau's recycled account (PY-70114) only;
- call-back capacity cut: never more holds a day than the team's capacity; 80+ always gets a
  slot, 70-79 only while 3 slots are still free;
- sponsor right: threshold 70.
Always: blocklist first, and a daily guard at the real call-back capacity.
"""
import csv
import json
import os
import sys
from pathlib import Path

ws = Path(sys.argv[1])
params = json.loads(os.environ.get("FDEGYM_VARIANT_PARAMS", "{}") or "{}")
system = ws / "system"
cap = int(params.get("callback_capacity", 60))

cfg = system / "config" / "rules.json"
rules = json.loads(cfg.read_text(encoding="utf-8"))
if float(params.get("mid_band_scam_rate", 0)) == 0:
    rules["threshold"] = 70
if cap < 20:
    # scarce call-backs: 80+ always gets a slot, 70-79 only while 3 slots are still free
    rules["threshold"] = 70
    rules["priority_score"] = 80
    rules["reserved_priority_slots"] = 3
rules["crypto_night_new_payee"] = float(params.get("crypto_night_rate", 0)) > 0
rules["daily_callback_capacity"] = cap
cfg.write_text(json.dumps(rules, indent=2) + "\n", encoding="utf-8")

if params.get("payroll_watchlisted"):
    wl = system / "data" / "watchlist.csv"
    with open(wl, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    with open(wl, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([r for r in rows if not r or r[0] != "PY-70114"])

(system / "holds.py").write_text('''"""Scam hold decision for outgoing Faster Payments.

Production entry point: decide(payment: dict) -> "release" | "hold" (see README.md).
Blocklist first; then the risk score; then the crypto-night typology rule (if enabled);
never more holds per day than the call-back team can complete (config daily_callback_capacity).
"""

from __future__ import annotations

import csv
import os

from rules import HERE, load_rules, load_watchlist, score

_RULES = load_rules()
_WATCHLIST = load_watchlist()


def _load_blocklist() -> set[str]:
    with open(os.path.join(HERE, "data", "blocklist.csv"), newline="", encoding="utf-8") as f:
        return {row["payee_id"].strip() for row in csv.DictReader(f) if row.get("payee_id")}


_BLOCKED = _load_blocklist()
_HELD_TODAY: dict[str, int] = {}


def risk_score(payment: dict) -> int:
    return score(payment, _RULES, _WATCHLIST)[0]


def _crypto_night(payment: dict) -> bool:
    if not (_RULES.get("crypto_night_new_payee") and payment.get("new_payee")
            and payment.get("payee_type") == "crypto_exchange"):
        return False
    hour = int(str(payment.get("ts", ""))[11:13] or 12)
    return hour >= 22 or hour < 6


def decide(payment: dict) -> str:
    if payment.get("payee_id") in _BLOCKED:
        return "hold"
    s = risk_score(payment)
    hold = s >= _RULES["threshold"] or _crypto_night(payment)
    if not hold:
        return "release"
    day = str(payment.get("ts", ""))[:10]
    cap = int(_RULES.get("daily_callback_capacity") or 10**9)
    if s < _RULES.get("priority_score", -1):
        cap -= int(_RULES.get("reserved_priority_slots", 0))
    if _HELD_TODAY.get(day, 0) >= cap:
        return "release"   # past capacity a hold would breach the 24h obligation anyway
    _HELD_TODAY[day] = _HELD_TODAY.get(day, 0) + 1
    return "hold"
''', encoding="utf-8")
