"""A differently written correct fix: changes live in the scoring rules and a small
capacity-aware queue module rather than in holds.decide's control flow.

- crypto-night typology: a new weighted rule `crypto_night` (+25) in rules.py, night = 21:30-05:59;
- stale payroll watchlist hit: the watchlist rule ignores existing-payee payments to a
  payroll bureau (instead of deleting the row);
- capacity cut: threshold 70 with a per-day cap at the team's capacity, 2 slots kept for 80+;
- sponsor right: threshold 70.
"""
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
if float(params.get("crypto_night_rate", 0)) > 0:
    rules["weights"]["crypto_night"] = 25
if params.get("payroll_watchlisted"):
    rules["watchlist_exempt_existing_payee_types"] = ["payroll_bureau"]
if float(params.get("mid_band_scam_rate", 0)) == 0:
    rules["threshold"] = 70
if cap < 20:
    rules["threshold"] = 70
    rules["queue_cap_per_day"] = cap
    rules["queue_priority"] = {"score": 80, "keep_free": 2}
cfg.write_text(json.dumps(rules, indent=2) + "\n", encoding="utf-8")

rp = system / "rules.py"
src = rp.read_text(encoding="utf-8")
src = src.replace('''    if payment.get("payee_id") in watchlist:
        s += w["watchlist"]; why.append("watchlist")''', '''    exempt = (not payment.get("new_payee")
              and payment.get("payee_type") in rules.get("watchlist_exempt_existing_payee_types", []))
    if payment.get("payee_id") in watchlist and not exempt:
        s += w["watchlist"]; why.append("watchlist")''')
src = src.replace('''    return s, why
''', '''    if "crypto_night" in w and payment.get("new_payee") and payment.get("payee_type") == "crypto_exchange":
        hhmm = str(payment.get("ts", ""))[11:16]
        if hhmm >= "21:30" or hhmm < "06:00":
            s += w["crypto_night"]; why.append("crypto_night")
    return s, why
''')
rp.write_text(src, encoding="utf-8")

(system / "queue_cap.py").write_text('''"""Daily call-back capacity guard (held payments per calendar day)."""
_count = {}


def admit(payment, cap, score=0, priority=None):
    if cap is None:
        return True
    day = str(payment.get("ts", ""))[:10]
    if priority and score < priority["score"]:
        cap = cap - priority["keep_free"]
    if _count.get(day, 0) >= cap:
        return False
    _count[day] = _count.get(day, 0) + 1
    return True
''', encoding="utf-8")
hp = system / "holds.py"
h = hp.read_text(encoding="utf-8")
h = h.replace('''    return "hold" if risk_score(payment) >= _RULES["threshold"] else "release"''',
              '''    s = risk_score(payment)
    if s < _RULES["threshold"]:
        return "release"
    import queue_cap
    ok = queue_cap.admit(payment, _RULES.get("queue_cap_per_day"), s, _RULES.get("queue_priority"))
    return "hold" if ok else "release"''')
hp.write_text(h, encoding="utf-8")
