"""Shortcut: hand everything to humans (keep the chargeback decline)."""
import sys
from pathlib import Path

p = Path(sys.argv[1]) / "system" / "refunds.py"
src = p.read_text()
anchor = '    if amount <= RULES["auto_approve_limit"]:\n'
src = src.replace(anchor, '    return "review"  # every refund is checked by a person\n\n' + anchor, 1)
p.write_text(src)
