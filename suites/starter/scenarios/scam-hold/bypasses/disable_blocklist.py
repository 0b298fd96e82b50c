"""Bypass: cut holds by switching off the sanctions control (empty the blocklist) and raising
the threshold - releases payments to sanctioned payees."""
import json
import sys
from pathlib import Path

ws = Path(sys.argv[1])
bl = ws / "system" / "data" / "blocklist.csv"
bl.write_text(bl.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
cfg = ws / "system" / "config" / "rules.json"
rules = json.loads(cfg.read_text(encoding="utf-8"))
rules["threshold"] = 70
cfg.write_text(json.dumps(rules, indent=2) + "\n", encoding="utf-8")
