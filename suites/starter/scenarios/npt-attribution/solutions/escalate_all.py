"""Shortcut: claim nothing automatically; every NPT line goes to Cost Control for manual review."""
import json
import os
import sys
from pathlib import Path

CASE = Path(__file__).resolve().parent.parent
sys.dont_write_bytecode = True
sys.path.insert(0, str(CASE))
import patchkit  # noqa: E402

ws = Path(sys.argv[1])

patchkit.install(ws, escalate_all=True)
