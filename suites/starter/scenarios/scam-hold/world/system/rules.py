"""Rule-based APP (authorised push payment) scam risk score.

Weights, keyword list, high-risk payee types and the hold threshold live in config/rules.json.
The risk watchlist (data/watchlist.csv) is maintained by Financial Crime Compliance.
"""

from __future__ import annotations

import csv
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def load_rules(path: str | None = None) -> dict:
    with open(path or os.path.join(HERE, "config", "rules.json"), encoding="utf-8") as f:
        return json.load(f)


def load_watchlist(path: str | None = None) -> set[str]:
    with open(path or os.path.join(HERE, "data", "watchlist.csv"), newline="", encoding="utf-8") as f:
        return {row["payee_id"].strip() for row in csv.DictReader(f) if row.get("payee_id")}


def score(payment: dict, rules: dict, watchlist: set[str]) -> tuple[int, list[str]]:
    """Return (score, reasons). Higher means more likely to be an APP scam."""
    w = rules["weights"]
    s = 0
    why: list[str] = []
    if payment.get("new_payee"):
        s += w["new_payee"]; why.append("new_payee")
    amount = float(payment.get("amount") or 0)
    if amount >= 10000:
        s += w["amount_10000"]; why.append("amount_10000")
    elif amount >= 2500:
        s += w["amount_2500"]; why.append("amount_2500")
    if payment.get("payee_id") in watchlist:
        s += w["watchlist"]; why.append("watchlist")
    ref = (payment.get("reference") or "").lower()
    if any(k in ref for k in rules["keywords"]):
        s += w["keyword"]; why.append("keyword")
    if int(payment.get("customer_age") or 0) >= 70:
        s += w["elderly"]; why.append("elderly")
    if int(payment.get("customer_tenure_days") or 99999) < 90:
        s += w["new_customer"]; why.append("new_customer")
    if payment.get("payee_type") in rules["high_risk_payee_types"]:
        s += w["high_risk_payee_type"]; why.append("high_risk_payee_type")
    if payment.get("new_device"):
        s += w["new_device"]; why.append("new_device")
    return s, why
