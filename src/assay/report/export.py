"""Flat exports of a report: one CSV row per run."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

COLUMNS = ["run_id", "task_id", "task_hash", "kinds", "agent", "level", "epoch", "status", "end_reason", "sandbox",
           "score", "passed", "value_amount", "value_currency", "input_tokens", "output_tokens",
           "cache_read_tokens", "cache_write_tokens", "cost_usd", "judge_cost_usd"]


def write_csv(report: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for r in report["runs"]:
            v = r.get("value") or {}
            u = r["usage"]
            w.writerow([r["run_id"], r["task_id"], r["task_hash"], ";".join(r["kinds"]), r["agent"], r["level"] or "",
                        r["epoch"], r["status"], r["end_reason"], r["sandbox"],
                        "" if r["score"] is None else repr(r["score"]), "" if r["passed"] is None else r["passed"],
                        v.get("amount", ""), v.get("currency", ""), u["input_tokens"], u["output_tokens"],
                        u["cache_read_tokens"], u["cache_write_tokens"],
                        "" if u["cost_usd"] is None else u["cost_usd"], r["judge_usage"].get("cost_usd") or 0])
    tmp.replace(path)
