"""Monthly back-charge package: totals per rig from the attribution.

CLI:  python3 claims.py --input FILE.csv --month YYYY-MM
"""

from __future__ import annotations

import argparse
from collections import defaultdict

from attribution import attribute
from ddr import read_csv


def monthly_package(lines: list[dict], month: str) -> dict:
    rows = [r for r in lines if str(r.get("report_date", "")).startswith(month)]
    per_rig: dict[str, dict] = defaultdict(lambda: {"events": set(), "hours": 0.0, "claim_usd": 0.0})
    for res in attribute(rows):
        if res["claim_usd"] > 0:
            p = per_rig[res["rig_id"]]
            p["events"].add(res["event_ref"])
            p["hours"] += res["claim_hours"]
            p["claim_usd"] += res["claim_usd"]
    return {rig: {"events": len(p["events"]), "hours": round(p["hours"], 2), "claim_usd": round(p["claim_usd"], 2)}
            for rig, p in sorted(per_rig.items())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--input", required=True)
    ap.add_argument("--month", required=True)
    a = ap.parse_args(argv)
    pkg = monthly_package(read_csv(a.input), a.month)
    total = 0.0
    print(f"Back-charge package {a.month} (Ferrovia Drilling AS, DC-2291)")
    for rig, p in pkg.items():
        print(f"  {rig}: {p['events']:3d} events {p['hours']:8.2f} h  USD {p['claim_usd']:12,.2f}")
        total += p["claim_usd"]
    print(f"  TOTAL USD {total:,.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
