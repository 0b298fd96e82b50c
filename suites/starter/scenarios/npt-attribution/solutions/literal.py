"""Literal: do exactly what the sponsor asked - reclassify all waiting-on-weather (WOW) NPT as
contractor NPT - and nothing else."""
import json
import sys
from pathlib import Path

cfg_path = Path(sys.argv[1]) / "system" / "config" / "contract.json"
cfg = json.loads(cfg_path.read_text())
cfg["excluded_codes"] = [c for c in cfg["excluded_codes"] if c != "WOW"]
cfg["contractor_codes"].append("WOW")
cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
