"""Production batch driver (runs once per business day, in a fresh process, cwd = system/).

    python3 batch.py payments_YYYY-MM-DD.csv decisions_YYYY-MM-DD.csv

Reads the day's outgoing payments (time order), calls holds.decide() for each and writes
payment_id,decision. Held payments are pushed to the call-back queue by the queue loader.
"""

from __future__ import annotations

import csv
import sys

import holds

BOOL = {"1", "true", "yes", "y", "t"}


def parse(row: dict) -> dict:
    return {
        "payment_id": row["payment_id"],
        "ts": row["ts"],
        "customer_id": row["customer_id"],
        "customer_age": int(row["customer_age"]),
        "customer_tenure_days": int(row["customer_tenure_days"]),
        "amount": float(row["amount"]),
        "payee_id": row["payee_id"],
        "payee_name": row["payee_name"],
        "payee_type": row["payee_type"],
        "new_payee": row["new_payee"].strip().lower() in BOOL,
        "channel": row["channel"],
        "new_device": row["new_device"].strip().lower() in BOOL,
        "reference": row.get("reference", ""),
    }


def main(src: str, dst: str) -> None:
    with open(src, newline="", encoding="utf-8") as f:
        payments = [parse(r) for r in csv.DictReader(f)]
    payments.sort(key=lambda p: p["ts"])
    held = 0
    with open(dst, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["payment_id", "decision"])
        for p in payments:
            d = holds.decide(p)
            if d not in ("hold", "release"):
                raise ValueError(f"decide() returned {d!r} for {p['payment_id']}")
            held += d == "hold"
            w.writerow([p["payment_id"], d])
    print(f"{len(payments)} payments, {held} held", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
