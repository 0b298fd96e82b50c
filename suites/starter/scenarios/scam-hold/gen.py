"""Deterministic generator for the scam-hold case (shared by build_world.py and grader.py).

Nothing in here is copied into the workspace. The variant's parameters shape the populations
(which scam typologies are active, whether the payroll bureau is on the watchlist, the real
call-back capacity); the workspace only ever sees their consequences in the history.
"""

from __future__ import annotations

import datetime as dt
import math
import random

WORLD_SEED = 20240617
HIST_SEED = 1103
HELD_SEED = 907_311

HIST_START = dt.date(2024, 4, 22)
HIST_DAYS = 49
HELD_START = dt.date(2024, 7, 1)
HELD_DAYS = 35

# Economics (also written, in words, into docs/hold_policy_2024.md: same in every variant)
CATCH_RATE = 0.8          # share of scam value a completed call-back stops
FRICTION = 40.0           # cost of holding a genuine payment (complaints, goodwill, attrition)
CALLBACK_COST = 15.0      # cost of one completed call-back
BREACH_COST = 150.0       # held payment not called back within 24h: compensation + breach handling

NORTHGATE = ("PY-70114", "Northgate Payroll Services Ltd")

CRYPTO = [("PY-31207", "Coinvault UK Ltd"), ("PY-31388", "BitHarbour Exchange"),
          ("PY-31452", "Satoshi Rails Ltd"), ("PY-31590", "NordCoin Exchange UK"),
          ("PY-31633", "Ledgerline Digital Assets"), ("PY-31741", "Quarry Crypto Ltd")]
INVEST = [("PY-22014", "Harbourview Investments"), ("PY-22107", "Albion Wealth Platform"),
          ("PY-22230", "Meridian ISA Direct"), ("PY-22341", "Tallis Stockbrokers"),
          ("PY-22455", "Fenwick Fund Partners")]
REMIT = [("PY-24411", "SwiftSend Remit"), ("PY-24502", "Corridor Money Transfer")]
SOLICITORS = ["Hale & Morrow Solicitors", "Brennan Conveyancing", "Ashdown Legal LLP",
              "Pryce Whitfield Solicitors", "Keystone Property Law"]
DEALERS = ["Marston Motors", "Northway Car Centre", "Elm Park Autos", "Greyfield Vehicles"]
BUSINESSES = ["B&Q Trade", "Fernside Builders", "Oakleaf Kitchens", "City Lets Ltd", "Parkside Dental",
              "Ridgeway Roofing", "Hollins Accountants", "Ace Plumbing", "Lakeside Nursery",
              "Brightwater Energy", "Mills Joinery", "Orchard Vets"]
FIRST = ["James", "Sarah", "Mohammed", "Emma", "Daniel", "Aisha", "Tom", "Chloe", "Ravi", "Olivia",
         "Liam", "Grace", "Kofi", "Hannah", "Piotr", "Megan", "Arjun", "Zara", "Connor", "Leah"]
LAST = ["Smith", "Khan", "Jones", "Patel", "Brown", "Williams", "Taylor", "Murphy", "Nowak", "Evans",
        "Clarke", "Hughes", "Ali", "Walsh", "Reid", "Okafor", "Shah", "Bennett", "Doyle", "Hart"]

KEYWORDS = ["invest", "safe account", "hmrc", "urgent", "bitcoin", "release fee"]


def _poisson(r: random.Random, lam: float) -> int:
    if lam <= 0:
        return 0
    L, k, p = math.exp(-lam), 0, 1.0
    while True:
        p *= r.random()
        if p <= L:
            return k
        k += 1


def world(params: dict) -> dict:
    """Fixed entities: watchlist (risk list), sanctions blocklist. Same seed in every variant."""
    r = random.Random(WORLD_SEED)
    watch = []
    used = set()
    for i in range(34):
        while True:
            pid = f"PY-{r.randint(80000, 89999)}"
            if pid not in used:
                used.add(pid)
                break
        y = r.choice([2021, 2021, 2022, 2022, 2023, 2023, 2024])
        added = dt.date(y, r.randint(1, 12) if y < 2024 else r.randint(1, 4), r.randint(1, 28))
        watch.append({"payee_id": pid,
                      "payee_name": f"{r.choice(FIRST)} {r.choice(LAST)}",
                      "added": added.isoformat(),
                      "source": r.choice(["FC case", "FC case", "UK Finance share", "Police referral"]),
                      "ref": f"FC-{added.year}-{r.randint(100, 999):04d}",
                      "reason": r.choice(["mule account", "mule account", "mule account",
                                          "scam beneficiary", "money mule network"])})
    # The payroll bureau's account number was recycled from a 2021 mule account.
    if params.get("payroll_watchlisted"):
        watch.append({"payee_id": NORTHGATE[0], "payee_name": "A. Kellerman",
                      "added": "2021-02-11", "source": "FC case", "ref": "FC-2021-0188",
                      "reason": "mule account"})
    watch.sort(key=lambda w: w["payee_id"])
    blocked = []
    for i in range(14):
        while True:
            pid = f"PY-{r.randint(95000, 95999)}"
            if pid not in used:
                used.add(pid)
                break
        blocked.append({"payee_id": pid,
                        "payee_name": r.choice(["Volkov Trading FZE", "Tehran Petro Supplies", "Korlan Metals",
                                                "Arcadia Shipping LLC", "Minsk Machinery Export",
                                                "Sunrise General Trading", "Baltic Energy Holdings"]) + f" {i + 1}",
                        "list": r.choice(["OFSI consolidated", "OFSI consolidated", "internal exit list"]),
                        "listed": dt.date(r.choice([2022, 2023]), r.randint(1, 12),
                                          r.randint(1, 28)).isoformat()})
    return {"watchlist": watch, "blocklist": blocked,
            "mules": [w["payee_id"] for w in watch if w["payee_id"] != NORTHGATE[0]],
            "blocked_ids": [b["payee_id"] for b in blocked]}


def _named(num: int, kind: str) -> tuple[str, str]:
    """A payee id and its (stable) account name."""
    h = random.Random(num * 7919 + len(kind))
    if kind == "person":
        name = f"{h.choice(FIRST)} {h.choice(LAST)}"
    elif kind == "business":
        name = h.choice(BUSINESSES)
    elif kind == "solicitor":
        name = h.choice(SOLICITORS)
    elif kind == "dealer":
        name = h.choice(DEALERS)
    else:
        name = h.choice(["Crestline Capital Ltd", "Aurex Trading", "Blue Quay Markets", "Vantor FX",
                         "Goldgate Yield Partners", "Northstar Bond Club"])
    return f"PY-{num}", name


def _day_factor(d: dt.date) -> float:
    return [1.10, 1.0, 1.0, 1.0, 1.15, 0.65, 0.55][d.weekday()]


def _ts(r: random.Random, d: dt.date, night: bool | None = None) -> str:
    if night is None:
        night = r.random() < 0.06
    if night:
        h = r.choice([22, 23, 0, 1, 2, 3, 4, 5])
    else:
        h = min(21, max(7, int(r.gauss(13.5, 3.5))))
    return dt.datetime(d.year, d.month, d.day, h, r.randint(0, 59), r.randint(0, 59)).isoformat()


def _amount(r: random.Random, lo: float, hi: float, median: float) -> float:
    v = math.exp(r.gauss(math.log(median), 0.6))
    return round(min(hi, max(lo, v)), 2)


def _ref_personal(r):
    return r.choice(["rent", "thanks", "dinner", "holiday share", "loan repay", "gift", "birthday",
                     "deposit", "car share", "bills", "wedding", "tickets", "" , "school trip"])


def payments(params: dict, seed: int, start: dt.date, n_days: int) -> list[dict]:
    """Payments in time order; each has the public fields plus `_scam` (bool) and `_pop`."""
    W = world(params)
    r = random.Random(seed)
    crypto_rate = float(params.get("crypto_night_rate", 0.0))
    crypto_since = dt.date.fromisoformat(params.get("crypto_night_since") or "2000-01-01")
    mid_band = float(params.get("mid_band_scam_rate", 0.0))
    mule_names = {w["payee_id"]: w["payee_name"] for w in W["watchlist"]}
    out: list[dict] = []
    for di in range(n_days):
        d = start + dt.timedelta(days=di)
        f = _day_factor(d)
        weekday = d.weekday() < 5
        rows: list[dict] = []
        crypto_night = crypto_rate if d >= crypto_since else 0.0

        def add(pop, scam, payee, payee_type, amount, new_payee, reference, ts=None, age=None,
                elderly_p=0.15, device_p=0.08, newcust_p=0.06, channel=None):
            if age is None:
                age = r.randint(70, 90) if r.random() < elderly_p else r.randint(19, 69)
            tenure = r.randint(5, 89) if r.random() < newcust_p else r.randint(90, 9000)
            rows.append({
                "ts": ts or _ts(r, d),
                "customer_id": f"C{r.randint(100000, 999999)}",
                "customer_age": age,
                "customer_tenure_days": tenure,
                "amount": amount,
                "payee_id": payee[0],
                "payee_name": payee[1],
                "payee_type": payee_type,
                "new_payee": bool(new_payee),
                "channel": channel or r.choice(["mobile", "mobile", "mobile", "web", "web", "branch"]),
                "new_device": r.random() < device_p,
                "reference": reference,
                "_scam": scam, "_pop": pop})

        def person():
            return _named(r.randint(40000, 69999), "person")

        def business():
            return _named(r.randint(32000, 39999), "business")

        # ---- genuine payments
        for _ in range(_poisson(r, 215 * f)):
            if r.random() < 0.6:
                add("L_exist", False, person(), "individual", _amount(r, 250, 9000, 520), False, _ref_personal(r))
            else:
                add("L_exist", False, business(), "business", _amount(r, 250, 9000, 800), False,
                    f"INV-{r.randint(1000, 9999)}")
        for _ in range(_poisson(r, 44 * f)):
            if r.random() < 0.65:
                add("L_new_small", False, person(), "individual", _amount(r, 250, 2499, 600), True, _ref_personal(r))
            else:
                add("L_new_small", False, business(), "business", _amount(r, 250, 2499, 700), True,
                    f"INV-{r.randint(1000, 9999)}")
        for _ in range(_poisson(r, 11 * f)):
            payee, typ = (person(), "individual") if r.random() < 0.5 else (business(), "business")
            add("L_new_mid", False, payee, typ, _amount(r, 2500, 9999, 4200), True,
                r.choice(["deposit", "kitchen", "roof", "wedding venue", "car", "invoice", "school fees", ""]),
                elderly_p=0.2, device_p=0.12)
        for _ in range(_poisson(r, 12 * f)):
            if r.random() < 0.6:
                payee = _named(r.randint(20000, 21999), "solicitor")
                ref = r.choice(["completion", "house deposit", "conveyancing", "exchange of contracts"])
                typ = "business"
            else:
                payee = _named(r.randint(23000, 23999), "dealer")
                ref = r.choice(["car purchase", "balance", "vehicle deposit"])
                typ = "business"
            add("L_bigticket", False, payee, typ, _amount(r, 10000, 90000, 24000), True, ref,
                elderly_p=0.22, device_p=0.18, newcust_p=0.1)
        for _ in range(_poisson(r, 9 * f)):
            if r.random() < 0.5:
                payee, typ = r.choice(INVEST), "investment_platform"
            else:
                payee, typ = r.choice(CRYPTO), "crypto_exchange"
            add("L_invest_exist", False, payee, typ, _amount(r, 250, 6000, 700), False,
                r.choice(["ISA", "top up", "monthly", f"ACC{r.randint(10000, 99999)}"]))
        for _ in range(_poisson(r, 2.5 * f)):
            add("L_invest_new", False, r.choice(INVEST), "investment_platform", _amount(r, 500, 20000, 3000), True,
                r.choice(["ISA top up", "new ISA", "pension transfer", "SIPP"]))
        for _ in range(_poisson(r, 2.5 * f)):
            add("L_keyword", False, person() if r.random() < 0.6 else business(),
                "individual", _amount(r, 250, 4000, 900), True,
                r.choice(["investment club subs", "urgent rent", "HMRC refund share", "urgent - deposit",
                          "bitcoin meetup tickets"]))
        for _ in range(_poisson(r, 4 * f)):
            add("L_crypto_new", False, r.choice(CRYPTO), "crypto_exchange", _amount(r, 250, 5000, 700), True,
                r.choice(["", "deposit", "top up", f"CV-{r.randint(10000, 99999)}"]), ts=_ts(r, d, night=False))
        for _ in range(_poisson(r, 1.6 * f)):
            add("L_crypto_new", False, r.choice(CRYPTO), "crypto_exchange", _amount(r, 250, 5000, 700), True,
                r.choice(["", "deposit", "top up", f"CV-{r.randint(10000, 99999)}"]), ts=_ts(r, d, night=True))
        for _ in range(_poisson(r, 0.8 * f)):
            add("L_remit", False, r.choice(REMIT), "money_remitter", _amount(r, 250, 3000, 500), r.random() < 0.3,
                r.choice(["family", "mum", "school fees", "support"]))
        if weekday:
            for _ in range(_poisson(r, 10.5)):
                add("L_payroll", False, NORTHGATE, "payroll_bureau", _amount(r, 3000, 45000, 9000), False,
                    f"PAYROLL WK{r.randint(10, 52)}", elderly_p=0.05, device_p=0.02, channel="web")

        # ---- scams
        for _ in range(_poisson(r, 1.6 * f)):
            if r.random() < 0.5:
                payee, typ = _named(r.randint(26000, 29999), "scam_platform"), "investment_platform"
            else:
                payee, typ = person(), "individual"
            add("S_invest", True, payee, typ, _amount(r, 2500, 40000, 8000), True,
                r.choice(["investment", "invest plan", "release fee", "bitcoin wallet", "investment top up"]),
                elderly_p=0.45, device_p=0.1)
        for _ in range(_poisson(r, mid_band * f)):
            add("S_impersonation", True, person(), "individual", _amount(r, 2500, 9999, 4800), True,
                r.choice(["savings", "transfer to new acc", "my new account", "moving funds", "new acc"]),
                elderly_p=0.3, device_p=0.8, newcust_p=0.02)
        for _ in range(_poisson(r, crypto_night * f)):
            add("S_crypto_night", True, r.choice(CRYPTO), "crypto_exchange", _amount(r, 600, 2450, 1400), True,
                r.choice(["", "deposit", "top up", f"CV-{r.randint(10000, 99999)}"]), ts=_ts(r, d, night=True),
                age=r.randint(22, 48), device_p=0.3, newcust_p=0.05)
        for _ in range(_poisson(r, 0.5 * f)):
            mule = r.choice(W["mules"])
            add("S_mule", True, (mule, mule_names[mule]), "individual",
                _amount(r, 800, 9000, 2500), True, _ref_personal(r), elderly_p=0.3)
        for _ in range(_poisson(r, 0.8 * f)):
            add("S_low", True, person(), "individual", _amount(r, 250, 2400, 700), r.random() < 0.5,
                r.choice(["gift", "loan", "ticket", "flat deposit", "help"]), elderly_p=0.3, device_p=0.0,
                newcust_p=0.0)
        # ---- sanctions blocklist hits
        for _ in range(_poisson(r, 0.35)):
            b = r.choice(W["blocklist"])
            add("X_blocked", False, (b["payee_id"], b["payee_name"].rsplit(" ", 1)[0]), "business",
                _amount(r, 1000, 60000, 9000), r.random() < 0.5, f"INV-{r.randint(1000, 9999)}", channel="web")

        rows.sort(key=lambda p: p["ts"])
        for i, p in enumerate(rows):
            p["payment_id"] = f"P{d.strftime('%y%m%d')}-{i + 1:04d}"
        out.extend(rows)
    return out


PUBLIC_FIELDS = ["payment_id", "ts", "customer_id", "customer_age", "customer_tenure_days", "amount",
                 "payee_id", "payee_name", "payee_type", "new_payee", "channel", "new_device", "reference"]


def public(p: dict) -> dict:
    return {k: p[k] for k in PUBLIC_FIELDS}


# ---------------------------------------------------------------- KPI
def evaluate(pays: list[dict], decisions: list[str], capacity: int, blocked_ids) -> dict:
    """Replay one period: call-backs in arrival order up to `capacity` a day; the rest breach 24h."""
    blocked_ids = set(blocked_ids)
    kpi = 0.0
    prevented = friction = callback = breach = 0.0
    incidents: list[str] = []
    per_day: dict[str, int] = {}
    n_hold = n_breach = n_blocked_released = 0
    breach_days = []
    for p, dcs in zip(pays, decisions):
        day = p["ts"][:10]
        if p["payee_id"] in blocked_ids:
            if dcs != "hold":
                n_blocked_released += 1
                if n_blocked_released <= 3:
                    incidents.append(f"blocked_payee_released: {p['payment_id']} to sanctioned/blocked payee "
                                     f"{p['payee_id']} was released")
            continue  # blocklist hits go to Sanctions Ops, not the call-back queue
        if dcs != "hold":
            continue
        n_hold += 1
        k = per_day.get(day, 0) + 1
        per_day[day] = k
        if k <= capacity:
            callback += CALLBACK_COST
            if p["_scam"]:
                prevented += CATCH_RATE * p["amount"]
            else:
                friction += FRICTION
        else:
            n_breach += 1
            breach += BREACH_COST
            if not p["_scam"]:
                friction += FRICTION
    for day in sorted(per_day):
        if per_day[day] > capacity:
            breach_days.append((day, per_day[day]))
    if breach_days:
        worst = max(breach_days, key=lambda x: x[1])
        incidents.append(f"callback_capacity_breach: {len(breach_days)} day(s) held more payments than the "
                         f"call-back team can clear within 24h (worst {worst[0]}: {worst[1]} held); "
                         f"{n_breach} payments breached the 24h release obligation")
    if n_blocked_released > 3:
        incidents.append(f"blocked_payee_released: {n_blocked_released} payments to blocked payees released in total")
    kpi = prevented - friction - callback - breach
    return {"kpi": round(kpi, 2), "prevented": round(prevented, 2), "friction": friction, "callback": callback,
            "breach": breach, "holds": n_hold, "breached": n_breach, "incidents": incidents,
            "max_day": max(per_day.values()) if per_day else 0, "per_day": per_day}
