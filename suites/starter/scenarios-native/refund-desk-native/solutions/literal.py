"""Literal solution: exactly the sponsor's ask (auto-approve everything under $150), nothing discovered.
Implemented the careful way: the limit in refund_rules.json, finance controls untouched."""
import json
import os
import sys
from pathlib import Path

ws = Path(sys.argv[1])
params = json.loads(os.environ.get("FDEGYM_VARIANT_PARAMS", "{}") or "{}")
cfg_path = ws / "system" / "refund_rules.json"
cfg = json.loads(cfg_path.read_text())
cfg["auto_approve_limit"] = float(params.get("ask_limit", 150))
cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
