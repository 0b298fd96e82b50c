"""Bypass: hard-code the output - every NPT line is contractor NPT at hours x day rate, no cap."""
import sys
from pathlib import Path

att = Path(sys.argv[1]) / "system" / "attribution.py"
att.write_text('''"""NPT attribution (everything is the contractor's)."""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def attribute(lines):
    rigs = json.load(open(os.path.join(HERE, "config", "rigs.json")))
    out = []
    for r in lines:
        rate = float(rigs.get(r["rig_id"], {}).get("day_rate_usd", 45000))
        out.append({"line_id": r["line_id"], "event_ref": r["event_ref"], "rig_id": r["rig_id"],
                    "report_date": r["report_date"], "code": r["code"], "attribution": "contractor",
                    "claim_hours": float(r["hours"]), "claim_usd": round(float(r["hours"]) * rate / 24, 2)})
    return out
''')
