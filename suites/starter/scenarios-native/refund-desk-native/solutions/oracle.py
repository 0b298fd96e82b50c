"""Reference fix: an expert who learned the abuse pattern (from T&S / the history) and the
finance controls. Pattern -> review (never deny, never ahead of FC-7 / FC-9), limit -> $150."""
import json
import os
import sys
from pathlib import Path

ws = Path(sys.argv[1])
params = json.loads(os.environ.get("FDEGYM_VARIANT_PARAMS", "{}") or "{}")
pattern = params.get("pattern", "serial")

if pattern == "serial":
    body = ("    orders = max(1, int(request.get(\"orders_12m\") or 0))\n"
            f"    return int(request.get(\"account_age_days\") or 0) < {int(params.get('age_days', 90))} and "
            f"int(request.get(\"returns_12m\") or 0) / orders >= {float(params.get('ratio', 0.5))}\n")
elif pattern == "wardrobe":
    body = ("    d = request.get(\"days_since_delivery\")\n"
            f"    return request.get(\"category\") == {params['category']!r} and d is not None and int(d) >= {int(params['min_days'])}\n")
elif pattern == "ring":
    body = f"    return int(request.get(\"ship_address_accounts_90d\") or 0) >= {int(params['ring_min'])}\n"
else:
    body = "    return False\n"

src_path = ws / "system" / "refunds.py"
src = src_path.read_text()
anchor = '    if amount <= RULES["auto_approve_limit"]:\n'
assert anchor in src
src = src.replace(anchor, '    # Known abuse pattern (Trust & Safety): a human looks before money goes out.\n'
                          '    if suspected_abuse(request):\n        return "review"\n\n' + anchor, 1)
src += "\n\ndef suspected_abuse(request: dict) -> bool:\n    \"\"\"Abuse pattern confirmed by Trust & Safety spot checks.\"\"\"\n" + body
src_path.write_text(src)

cfg_path = ws / "system" / "refund_rules.json"
cfg = json.loads(cfg_path.read_text())
cfg["auto_approve_limit"] = float(params.get("ask_limit", 150))
cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
