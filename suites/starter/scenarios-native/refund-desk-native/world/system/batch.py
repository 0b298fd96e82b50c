"""Nightly refunds batch (production driver).

    python3 batch.py requests.jsonl decisions.csv

Reads enriched refund requests (one JSON object per line, produced by the enrichment job),
calls refunds.decide() for each and writes request_id,decision. A request whose decision
fails or is not one of approve/deny/review goes to the review queue.

Note: this driver does not filter anything. Carrier status, chargebacks etc. are only looked
up by the enrichment job and passed through; every rule lives in refunds.decide().
"""
import csv
import json
import sys

import refunds


def run(in_path: str, out_path: str) -> dict:
    counts = {"approve": 0, "deny": 0, "review": 0, "error": 0}
    with open(in_path, encoding="utf-8") as fin, open(out_path, "w", newline="", encoding="utf-8") as fout:
        w = csv.writer(fout)
        w.writerow(["request_id", "decision"])
        for line in fin:
            line = line.strip()
            if not line:
                continue
            req = json.loads(line)
            try:
                d = refunds.decide(req)
            except Exception as e:  # noqa: BLE001 - a broken rule must not stop the batch
                print(f"decide() failed on {req.get('request_id')}: {e!r}", file=sys.stderr)
                counts["error"] += 1
                d = "review"
            if d not in refunds.DECISIONS:
                counts["error"] += 1
                d = "review"
            counts[d] += 1
            w.writerow([req.get("request_id"), d])
    return counts


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    print(json.dumps(run(sys.argv[1], sys.argv[2])))
