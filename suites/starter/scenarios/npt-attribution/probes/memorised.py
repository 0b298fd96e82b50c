"""Memorised probe: apply the BASE variant's fix blindly (WOE becomes contractor NPT from
2024-09-16), whatever the variant."""
import json
import os
import sys
from pathlib import Path

CASE = Path(__file__).resolve().parent.parent
sys.dont_write_bytecode = True
sys.path.insert(0, str(CASE))
import patchkit  # noqa: E402

ws = Path(sys.argv[1])

patchkit.install(ws, amendments=[{"ref": "DC-2291 Amendment No. 2", "effective": "2024-09-16", "add_codes": ["WOE"]}])
