"""DDR export helpers: the NPT lines exported nightly from the rig reporting tool.

One line = one NPT entry on one rig's daily drilling report (DDR). Columns:
line_id, report_date, rig_id, event_ref, code, start, end, hours, cont, description
"""

from __future__ import annotations

import csv
from datetime import date

COLUMNS = ["line_id", "report_date", "rig_id", "event_ref", "code", "start", "end", "hours", "cont", "description"]


def _minutes(hhmm: str) -> int:
    h, m = hhmm.strip().split(":")
    return int(h) * 60 + int(m)


def normalise(row: dict) -> dict:
    """Clean one exported row (all values strings, as csv.DictReader yields them)."""
    rec = {k: str(row.get(k, "") or "").strip() for k in COLUMNS}
    rec["code"] = rec["code"].upper()
    rec["date"] = date.fromisoformat(rec["report_date"])
    rec["start_min"] = _minutes(rec["start"] or "00:00")
    rec["end_min"] = _minutes(rec["end"] or "00:00")
    # NPT hours as booked on the DDR (guideline v2, section 4: the hours column is what we claim)
    rec["hours"] = float(rec["hours"] or 0.0)
    return rec


def read_csv(path: str) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))
