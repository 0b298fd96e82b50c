"""Reference solution: roll data/sales.csv up by region (shipped orders only).

Usage: python3 solve.py WORKSPACE   (standard library only)
"""

import csv
import sys
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path


def main(ws: Path) -> None:
    units: dict[str, int] = {}
    revenue: dict[str, Decimal] = {}
    with open(ws / "data" / "sales.csv", newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row["status"].strip().lower() != "shipped":
                continue
            region = row["region"].strip()
            n = int(row["units"])
            units[region] = units.get(region, 0) + n
            revenue[region] = revenue.get(region, Decimal(0)) + n * Decimal(row["unit_price_usd"])
    cent = Decimal("0.01")
    out = ws / "out"
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "rollup.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["region", "units", "revenue"])
        for region in sorted(units):
            w.writerow([region, units[region], revenue[region].quantize(cent, ROUND_HALF_UP)])
    total = sum(revenue.values(), Decimal(0)).quantize(cent, ROUND_HALF_UP)
    (out / "total.txt").write_text(f"{total}\n", encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
