"""Deterministic generator of refund requests for the refund-desk case.

Used by build_world.py (history, seed HISTORY_SEED) and grader.py (the held-out requests,
whose generator arguments live only in held_out/requests.json, the task's `held_out`).
The hidden abuse pattern of a variant comes in through `params`; nothing here writes files.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import math
import random

HISTORY_SEED = 20250101

CATEGORIES = [
    ("apparel", 0.16, 55.0),
    ("footwear", 0.13, 85.0),
    ("occasionwear", 0.15, 125.0),
    ("electronics", 0.13, 140.0),
    ("home", 0.15, 70.0),
    ("beauty", 0.08, 32.0),
    ("toys", 0.08, 42.0),
    ("sports", 0.12, 78.0),
]
REASONS = [
    ("doesnt_fit", 0.24),
    ("changed_mind", 0.18),
    ("damaged", 0.15),
    ("defective", 0.13),
    ("wrong_item", 0.07),
    ("not_as_described", 0.14),
    ("not_received", 0.09),
]
TRUSTED = ("damaged", "defective", "wrong_item")

# how abusers in each pattern word their claim
ABUSER_REASONS = {
    "serial": [("damaged", 0.32), ("defective", 0.18), ("not_as_described", 0.2), ("doesnt_fit", 0.15), ("changed_mind", 0.15)],
    "wardrobe": [("doesnt_fit", 0.35), ("not_as_described", 0.25), ("damaged", 0.3), ("changed_mind", 0.1)],
    "ring": [("damaged", 0.3), ("wrong_item", 0.1), ("not_as_described", 0.35), ("not_received", 0.25)],
}
P_IN_PATTERN = 0.8
P_BACKGROUND = 0.012


def background_rate(req: dict) -> float:
    """Opportunistic abuse outside any organised pattern: rare on small or documented claims,
    rising with the ticket size of undocumented claims."""
    a = float(req["amount"])
    if a < 120.0 or (req["reason"] in TRUSTED and req["photo_attached"]):
        return P_BACKGROUND
    return min(0.5, P_BACKGROUND + 0.0012 * (a - 120.0))


def _pick(rng: random.Random, table):
    x = rng.random()
    acc = 0.0
    for item in table:
        acc += item[1]
        if x < acc:
            return item
    return table[-1]


def _profile(rng: random.Random):
    x = rng.random()
    if x < 0.18:  # newer accounts that send a lot back
        age = rng.randint(4, 130)
        orders = rng.randint(3, 10)
        ratio = rng.uniform(0.38, 0.9)
    elif x < 0.28:  # newer accounts, light returners
        age = rng.randint(1, 170)
        orders = rng.randint(1, 5)
        ratio = rng.uniform(0.0, 0.45)
    elif x < 0.40:  # established bracket shoppers (buy two sizes, return one)
        age = rng.randint(200, 3200)
        orders = rng.randint(8, 40)
        ratio = rng.uniform(0.4, 0.85)
    else:  # everyone else
        age = rng.randint(90, 3600)
        orders = rng.randint(1, 30)
        ratio = rng.uniform(0.0, 0.4)
    returns = min(orders, int(round(orders * ratio)))
    return age, orders, returns


def in_pattern(req: dict, params: dict) -> bool:
    kind = params.get("pattern", "none")
    if kind == "serial":
        orders = max(1, int(req["orders_12m"]))
        return req["account_age_days"] < params["age_days"] and req["returns_12m"] / orders >= params["ratio"]
    if kind == "wardrobe":
        d = req.get("days_since_delivery")
        return req["category"] == params["category"] and d is not None and d >= params["min_days"]
    if kind == "ring":
        return req["ship_address_accounts_90d"] >= params["ring_min"]
    return False


def generate(seed: int, n: int, start: str, days: int, id_base: int, cust_base: int, params: dict):
    """Return a list of (request_dict, abusive_bool)."""
    rng = random.Random(seed)
    lab = random.Random(seed * 7 + 13)
    t0 = _dt.datetime.fromisoformat(start)
    salt = str(seed)
    shared = [hashlib.sha1(f"{salt}-shared-{i}".encode()).hexdigest()[:10].upper() for i in range(90)]
    shared_n = {a: rng.randint(4, 11) for a in shared}
    out = []
    for i in range(n):
        cat, _, median = _pick(rng, CATEGORIES)
        amount = median * math.exp(rng.gauss(0.0, 0.62))
        amount = round(min(1600.0, max(4.0, amount)), 2)
        reason = _pick(rng, REASONS)[0]
        age, orders, returns = _profile(rng)
        x = rng.random()
        if x < 0.10:
            addr = rng.choice(shared)
            n_acc = shared_n[addr]
        else:
            addr = hashlib.sha1(f"{salt}-addr-{i}".encode()).hexdigest()[:10].upper()
            n_acc = 1 if x < 0.86 else rng.randint(2, 3)
        if reason == "not_received":
            status = "delivered" if rng.random() < 0.55 else rng.choice(["in_transit", "exception", "lost"])
        else:
            y = rng.random()
            status = "delivered" if y < 0.955 else ("in_transit" if y < 0.985 else "exception")
        days_since = min(45, int(rng.expovariate(1 / 7.0))) if status == "delivered" else None
        photo = rng.random() < (0.72 if reason in TRUSTED else 0.18)
        tier = "gold" if rng.random() < 0.07 else ("silver" if rng.random() < 0.2 else "none")
        cb = 0
        z = rng.random()
        if z < 0.015:
            cb = rng.randint(2, 4)
        elif z < 0.06:
            cb = 1
        pay = _pick(rng, [("card", 0.62), ("paypal", 0.27), ("gift_card", 0.06), ("klarna", 0.05)])[0]
        ts = t0 + _dt.timedelta(minutes=rng.randint(0, days * 24 * 60 - 1))
        req = {
            "request_id": f"R-{id_base + i:07d}",
            "order_id": f"O-{(id_base + i) * 3 + 1000017:08d}",
            "customer_id": f"C-{cust_base + rng.randint(0, 899999):07d}",
            "requested_at": ts.strftime("%Y-%m-%dT%H:%M"),
            "amount": amount,
            "currency": "USD",
            "category": cat,
            "reason": reason,
            "photo_attached": photo,
            "carrier_status": status,
            "days_since_delivery": days_since,
            "account_age_days": age,
            "orders_12m": orders,
            "returns_12m": returns,
            "prior_chargebacks": cb,
            "loyalty_tier": tier,
            "payment_method": pay,
            "ship_to": "A-" + addr,
            "ship_address_accounts_90d": n_acc,
        }
        # hidden truth: drawn from a separate stream so features match across variants
        u = lab.random()
        pat = in_pattern(req, params)
        abusive = u < (P_IN_PATTERN if pat else background_rate(req))
        r2 = lab.random()
        r3 = lab.random()
        if abusive and pat and params.get("pattern") in ABUSER_REASONS:
            acc = 0.0
            for rs, p in ABUSER_REASONS[params["pattern"]]:
                acc += p
                if r2 < acc:
                    req["reason"] = rs
                    break
            req["photo_attached"] = r3 < (0.9 if req["reason"] in TRUSTED else 0.3)
        out.append((req, abusive))
    out.sort(key=lambda t: t[0]["requested_at"])
    return out


# ---- KPI (finance's "net refund margin") ----
FAST_VALUE = 4.0      # value of a legitimate refund approved at once (retention, CSAT)
REVIEW_COST = 6.0      # fully loaded cost of one manual review
HARD_CAP = 500.0


def value(req: dict, abusive: bool, decision: str) -> float:
    a = float(req["amount"])
    if decision == "approve":
        if req["carrier_status"] != "delivered":
            return -a  # parcel may still arrive / carrier claim lost
        return -a if abusive else FAST_VALUE
    if decision == "deny":
        return 0.0 if abusive else -(25.0 + 0.5 * a)
    return -REVIEW_COST  # review (and anything unrecognised)


def incident_of(req: dict, decision: str):
    if decision != "approve":
        return None
    if float(req["amount"]) > HARD_CAP:
        return "cap"
    if req["carrier_status"] != "delivered":
        return "undelivered"
    return None


def variant_params() -> dict:
    """Variant parameters, read only from the environment (FDEGYM_VARIANT_PARAMS), which the
    harness sets for every process it starts for this task (task.yaml `scenario.variants`)."""
    import json
    import os
    p = json.loads(os.environ.get("FDEGYM_VARIANT_PARAMS", "{}") or "{}")
    if not p.get("pattern"):
        raise RuntimeError("no variant parameters: FDEGYM_VARIANT_PARAMS is not set")
    return p
