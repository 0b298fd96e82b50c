"""Literal: do exactly what the sponsor asked - raise the hold threshold from 50 to 70."""
import json
import sys
from pathlib import Path

ws = Path(sys.argv[1])
cfg = ws / "system" / "config" / "rules.json"
rules = json.loads(cfg.read_text(encoding="utf-8"))
rules["threshold"] = 70
cfg.write_text(json.dumps(rules, indent=2) + "\n", encoding="utf-8")
