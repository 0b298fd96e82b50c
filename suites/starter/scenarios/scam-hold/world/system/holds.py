"""Scam hold decision for outgoing Faster Payments.

Production entry point (imported by the payments batch, see README.md):

    decide(payment: dict) -> "release" | "hold"

A "hold" parks the payment in the call-back queue; a call-back agent phones the customer
before it is released or stopped. Payments to payees on the sanctions blocklist are always
held (they are routed to Sanctions Ops, not to the call-back queue).
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


def risk_score(payment: dict) -> int:
    return score(payment, _RULES, _WATCHLIST)[0]


def decide(payment: dict) -> str:
    if payment.get("payee_id") in _BLOCKED:
        return "hold"
    return "hold" if risk_score(payment) >= _RULES["threshold"] else "release"
