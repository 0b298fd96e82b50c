"""Refund desk decision rules.

Production (batch.py, run nightly by the refunds-batch job) imports this module and calls
decide() once per enriched refund request. The request dict is built upstream by the
enrichment job (order, customer and carrier data); see README.md for the fields.

History:
  2022-03  v2.0  first automated rules (G. Paulsen)
  2023-05  v2.2  documented claims (damaged/defective/wrong item + photo) auto-approved
  2024-02  v2.3  finance controls FC-7 / FC-9 wired in (hard cap, carrier confirmation)
"""
import json
import os

_HERE = os.path.dirname(os.path.abspath(__file__))

with open(os.path.join(_HERE, "refund_rules.json"), encoding="utf-8") as _f:
    RULES = json.load(_f)

# Finance control FC-7: a refund above this amount is never approved without a human.
HARD_CAP = 500.00

DECISIONS = ("approve", "deny", "review")


def decide(request: dict) -> str:
    """Return "approve", "deny" or "review" for one refund request."""
    amount = float(request["amount"])

    # FC-7 hard cap
    if amount > HARD_CAP:
        return "review"

    # FC-9: no money goes back until the carrier has confirmed delivery.
    # Anything else is handled by the Carrier Claims team through the review queue.
    if request.get("carrier_status") != "delivered":
        return "review"

    if int(request.get("prior_chargebacks") or 0) >= RULES["deny_chargebacks_at"]:
        return "deny"

    if amount <= RULES["auto_approve_limit"]:
        return "approve"

    # v2.2: documented claims are approved without waiting for the parcel
    if request.get("reason") in RULES["documented_reasons"] and request.get("photo_attached"):
        return "approve"

    if request.get("loyalty_tier") in RULES["trusted_tiers"]:
        return "approve"

    return "review"
