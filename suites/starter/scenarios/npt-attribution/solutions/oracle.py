"""Reference fix: implement the contract terms actually in force (learned from Contracts / the
data admin), per variant: dated Schedule B amendments, the novated rig's own agreement, the DDR
continuation-line hours quirk, and the weather clause. Keeps the cap and the FM exclusion."""
import json
import os
import sys
from pathlib import Path

CASE = Path(__file__).resolve().parent.parent
sys.dont_write_bytecode = True
sys.path.insert(0, str(CASE))
import patchkit  # noqa: E402

ws = Path(sys.argv[1])

p = json.loads(os.environ.get("FDEGYM_VARIANT_PARAMS", "{}"))
amendments = None
if p.get("amend_date"):
    amendments = [{"ref": "DC-2291 Amendment No. 2", "effective": p["amend_date"], "add_codes": p.get("amend_add", [])}]
overrides = None
if p.get("special_rig"):
    overrides = {p["special_rig"]: {"agreement": "HE-0907 (novation)", "company_codes": p["special_rig_company_codes"]}}
patchkit.install(ws, amendments=amendments, rig_overrides=overrides, wow_contractor=bool(p.get("wow_contractor")),
                 hours_from_clock=bool(p.get("ddr_cumulative")))
