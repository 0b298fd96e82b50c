"""Shortcut: the sponsor's $150 plus a generic guess that anyone returning 30%+ of orders is risky."""
import json
import sys
from pathlib import Path

ws = Path(sys.argv[1])
cfg_p = ws / "system" / "refund_rules.json"
cfg = json.loads(cfg_p.read_text())
cfg["auto_approve_limit"] = 150.0
cfg_p.write_text(json.dumps(cfg, indent=2) + "\n")
p = ws / "system" / "refunds.py"
src = p.read_text()
anchor = '    if amount <= RULES["auto_approve_limit"]:\n'
src = src.replace(anchor, '    if int(request.get("returns_12m") or 0) / max(1, int(request.get("orders_12m") or 0)) >= 0.3:\n'
                          '        return "review"\n\n' + anchor, 1)
p.write_text(src)
