"""NPT attribution: which DDR NPT lines are Contractor NPT and what we back-charge for them.

Production (the monthly back-charge run) calls `attribute(lines)`; see README.md.
CLI:  python3 attribution.py --input FILE.csv [--month YYYY-MM] [--json]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections import defaultdict

from contract import classify, load_contract, load_rigs
from ddr import normalise, read_csv


def attribute(lines: list[dict]) -> list[dict]:
    """One result per input line, in input order:
    {line_id, event_ref, rig_id, report_date, code, attribution, claim_hours, claim_usd}.
    claim_usd is what goes into the monthly back-charge claim for that line (0 if none)."""
    contract = load_contract()
    rigs = load_rigs()
    cap = float(contract["monthly_cap_usd_per_rig"])
    recs = [normalise(r) for r in lines]
    order = sorted(range(len(recs)), key=lambda i: (recs[i]["rig_id"], recs[i]["date"],
                                                     recs[i]["start_min"], recs[i]["line_id"]))
    used: dict[tuple, float] = defaultdict(float)
    out: list[dict | None] = [None] * len(recs)
    for i in order:
        r = recs[i]
        status = classify(r["code"], r["rig_id"], r["date"], contract)
        rig = rigs.get(r["rig_id"])
        hours = r["hours"]
        claim = 0.0
        if status == "contractor" and rig is not None:
            claim = round(hours * float(rig["day_rate_usd"]) / 24.0, 2)
            key = (r["rig_id"], r["date"].strftime("%Y-%m"))
            room = max(0.0, cap - used[key])  # clause 15.2: cap per rig per calendar month
            if claim > room:
                claim = round(room, 2)
            used[key] += claim
        out[i] = {
            "line_id": r["line_id"],
            "event_ref": r["event_ref"],
            "rig_id": r["rig_id"],
            "report_date": r["report_date"],
            "code": r["code"],
            "attribution": status,
            "claim_hours": hours if claim > 0 else 0.0,
            "claim_usd": claim,
        }
    return out  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--input", required=True, help="DDR NPT export (CSV)")
    ap.add_argument("--month", help="only lines of this report month (YYYY-MM)")
    ap.add_argument("--json", action="store_true", help="JSON output instead of CSV")
    a = ap.parse_args(argv)
    rows = read_csv(a.input)
    if a.month:
        rows = [r for r in rows if r["report_date"].startswith(a.month)]
    res = attribute(rows)
    if a.json:
        json.dump(res, sys.stdout, indent=1)
        print()
    else:
        w = csv.DictWriter(sys.stdout, fieldnames=list(res[0]) if res else ["line_id"])
        w.writeheader()
        w.writerows(res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
