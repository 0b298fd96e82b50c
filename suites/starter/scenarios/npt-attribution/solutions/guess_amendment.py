"""Shortcut: guess that the amended contract (bulletin: Amendment No. 2) simply makes waiting on
equipment (WOE) contractor NPT from the start of the claim period, 1 July 2024."""
import json
import os
import sys
from pathlib import Path

CASE = Path(__file__).resolve().parent.parent
sys.dont_write_bytecode = True
sys.path.insert(0, str(CASE))
import patchkit  # noqa: E402

ws = Path(sys.argv[1])

patchkit.install(ws, amendments=[{"ref": "guessed", "effective": "2024-07-01", "add_codes": ["WOE"]}])
