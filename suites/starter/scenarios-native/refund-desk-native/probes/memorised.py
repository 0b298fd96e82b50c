"""Probe: the base variant's fix applied blindly (serial returners: account < 90 days and
return ratio >= 0.5 -> review; limit $150), whatever the variant."""
import json
import sys
from pathlib import Path

ws = Path(sys.argv[1])
p = ws / "system" / "refunds.py"
src = p.read_text()
anchor = '    if amount <= RULES["auto_approve_limit"]:\n'
src = src.replace(anchor, '    orders = max(1, int(request.get("orders_12m") or 0))\n'
                          '    if int(request.get("account_age_days") or 0) < 90 and int(request.get("returns_12m") or 0) / orders >= 0.5:\n'
                          '        return "review"\n\n' + anchor, 1)
p.write_text(src)
cfg_p = ws / "system" / "refund_rules.json"
cfg = json.loads(cfg_p.read_text())
cfg["auto_approve_limit"] = 150.0
cfg_p.write_text(json.dumps(cfg, indent=2) + "\n")
