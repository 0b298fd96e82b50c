"""Reference solution: profile the store whose series the chart shows.

Usage: python3 solve.py WORKSPACE   (standard library only)

Which store the chart shows is the visual part of the task: its series is the one that
sits around 3,000 visitors a week and collapses to about 1,500-2,000 in weeks 12-14 (S03;
S02 rises steadily, S04 bulges in weeks 18-24, S06 spikes in week 8). The script checks
that this reading fits the data, then computes every figure from data/footfall_weekly.csv.
"""

import csv
import json
import sys
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

STORE = "S03"  # read off chart.png


def main(ws: Path) -> None:
    series: dict[str, dict[int, int]] = {}
    with open(ws / "data" / "footfall_weekly.csv", newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            series.setdefault(row["store_id"].strip(), {})[int(row["week"])] = int(row["visitors"])
    mine = series[STORE]
    weeks = sorted(mine)
    low_week = min(weeks, key=lambda w: (mine[w], w))
    # sanity check of the chart reading: the dip is in weeks 12-14 and nowhere else
    if not 12 <= low_week <= 14 or min(mine[w] for w in weeks if not 12 <= w <= 14) < 2500:
        raise SystemExit(f"{STORE} does not look like the charted series")
    total = sum(mine.values())
    chain = sum(sum(s.values()) for s in series.values())
    out = {
        "store_id": STORE,
        "total_visitors": total,
        "mean_weekly_visitors": float(Decimal(total / len(weeks)).quantize(Decimal("0.1"), ROUND_HALF_UP)),
        "lowest_week": low_week,
        "lowest_visitors": mine[low_week],
        "share_of_chain_pct": float(Decimal(100 * total / chain).quantize(Decimal("0.01"), ROUND_HALF_UP)),
    }
    (ws / "answer.json").write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
