"""Alternate correct fix, written differently from the oracle: the contract terms live in a rules
table (SQLite, built from system/config/npt_rules.json), and line hours are reconciled per event
(a continuation line whose hours column exceeds its clock span is treated as a running total)."""
import json
import os
import sys
from pathlib import Path

ws = Path(sys.argv[1])
p = json.loads(os.environ.get("FDEGYM_VARIANT_PARAMS", "{}"))
system = ws / "system"

rules = []  # (rig or '*', code, valid_from or '', status); later rows win
for code in ["RR", "TDF", "MPF", "DWF", "HSE"]:
    rules.append(["*", code, "", "contractor"])
for code in ["WOE", "WOO", "DHT", "HOLE", "SVC"]:
    rules.append(["*", code, "", "operator"])
rules.append(["*", "FM", "", "excluded"])
rules.append(["*", "WOW", "", "contractor" if p.get("wow_contractor") else "excluded"])
if p.get("amend_date"):
    for code in p.get("amend_add", []):
        rules.append(["*", code, p["amend_date"], "contractor"])
if p.get("special_rig"):
    for code in p.get("special_rig_company_codes", []):
        rules.append([p["special_rig"], code, "", "operator"])
(system / "config" / "npt_rules.json").write_text(json.dumps({"rules": rules}, indent=1) + "\n")

(system / "npt_terms.py").write_text('''"""NPT responsibility rules as a table (rig, code, valid_from, status)."""
import json
import os
import sqlite3

HERE = os.path.dirname(os.path.abspath(__file__))


class Terms:
    def __init__(self):
        rows = json.load(open(os.path.join(HERE, "config", "npt_rules.json")))["rules"]
        self.db = sqlite3.connect(":memory:")
        self.db.execute("create table r (seq int, rig text, code text, valid_from text, status text)")
        self.db.executemany("insert into r values (?,?,?,?,?)", [(i, *row) for i, row in enumerate(rows)])

    def status(self, rig, code, day_iso):
        # rig-specific rows beat fleet rows; among equals the latest valid_from wins
        rows = self.db.execute(
            "select rig, valid_from, seq, status from r where code = ? and (rig = '*' or rig = ?) and valid_from <= ?",
            (code, rig, day_iso)).fetchall()
        if not rows:
            return "operator"
        rows.sort(key=lambda t: (t[0] != "*", t[1], t[2]))
        return rows[-1][3]
''')

(system / "attribution.py").write_text('''"""NPT attribution: which DDR NPT lines are Contractor NPT and what we back-charge for them.

Production calls `attribute(lines)`; see README.md. Terms come from config/npt_rules.json
(npt_terms.Terms); hours are reconciled per event from the DDR clock times.
CLI:  python3 attribution.py --input FILE.csv [--month YYYY-MM] [--json]
"""
import argparse
import csv
import json
import sys
from collections import defaultdict

from contract import load_contract, load_rigs
from ddr import normalise, read_csv
from npt_terms import Terms


def _event_hours(recs):
    """Per line hours: the day's portion. Continuation lines whose hours column is larger than their
    clock span carry the event's running total; convert them back to the day's portion."""
    hours = {}
    by_event = defaultdict(list)
    for i, r in enumerate(recs):
        by_event[r["event_ref"]].append(i)
    for idx in by_event.values():
        idx.sort(key=lambda i: (recs[i]["date"], recs[i]["start_min"]))
        booked = 0.0
        for i in idx:
            r = recs[i]
            span = max(0, r["end_min"] - r["start_min"]) / 60.0
            h = r["hours"]
            if r["cont"] == "Y" and h > span + 0.01:
                h = h - booked
            hours[i] = h
            booked += h
    return hours


def attribute(lines):
    contract = load_contract()
    rigs = load_rigs()
    terms = Terms()
    cap = float(contract["monthly_cap_usd_per_rig"])
    recs = [normalise(r) for r in lines]
    hours = _event_hours(recs)
    used = defaultdict(float)
    out = [None] * len(recs)
    for i in sorted(range(len(recs)), key=lambda i: (recs[i]["rig_id"], recs[i]["date"], recs[i]["start_min"],
                                                     recs[i]["line_id"])):
        r = recs[i]
        status = terms.status(r["rig_id"], r["code"], r["report_date"])
        rig = rigs.get(r["rig_id"])
        claim = 0.0
        if status == "contractor" and rig is not None:
            claim = round(hours[i] * float(rig["day_rate_usd"]) / 24.0, 2)
            key = (r["rig_id"], r["report_date"][:7])
            claim = min(claim, round(max(0.0, cap - used[key]), 2))
            used[key] += claim
        out[i] = {"line_id": r["line_id"], "event_ref": r["event_ref"], "rig_id": r["rig_id"],
                  "report_date": r["report_date"], "code": r["code"], "attribution": status,
                  "claim_hours": round(hours[i], 4) if claim > 0 else 0.0, "claim_usd": claim}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--input", required=True)
    ap.add_argument("--month")
    ap.add_argument("--json", action="store_true")
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
''')
