"""Shortcut: fit the H1 claims register. Scale every code's claims by the share Ferrovia accepted
in H1 (accepted_usd / amount_usd), ignoring why lines were rejected or trimmed."""
import csv
import json
import os
import sys
from pathlib import Path

CASE = Path(__file__).resolve().parent.parent
sys.dont_write_bytecode = True
sys.path.insert(0, str(CASE))
import patchkit  # noqa: E402

ws = Path(sys.argv[1])

claimed, accepted = {}, {}
with open(ws / "data" / "claims_2024H1.csv", newline="") as fh:
    for r in csv.DictReader(fh):
        claimed[r["code"]] = claimed.get(r["code"], 0.0) + float(r["amount_usd"])
        accepted[r["code"]] = accepted.get(r["code"], 0.0) + float(r["accepted_usd"])
factor = {c: round(accepted[c] / claimed[c], 4) for c in claimed if claimed[c] > 0}
patchkit.install(ws, claim_factor=factor)
