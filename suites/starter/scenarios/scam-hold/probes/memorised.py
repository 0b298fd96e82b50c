"""Probe: apply the BASE variant's fix blindly (as if memorised from a previous run):
hold first-time payments to crypto exchanges between 22:00 and 05:59; nothing else."""
import sys
from pathlib import Path

p = Path(sys.argv[1]) / "system" / "holds.py"
src = p.read_text(encoding="utf-8")
src = src.replace('''    return "hold" if risk_score(payment) >= _RULES["threshold"] else "release"''',
                  '''    if payment.get("new_payee") and payment.get("payee_type") == "crypto_exchange":
        hour = int(str(payment.get("ts", ""))[11:13])
        if hour >= 22 or hour < 6:
            return "hold"
    return "hold" if risk_score(payment) >= _RULES["threshold"] else "release"''')
p.write_text(src, encoding="utf-8")
