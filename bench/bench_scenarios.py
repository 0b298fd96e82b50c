"""Scenario timings: one full grade of each starter scenario on its held-out data, and the
admission anchors of the whole starter suite.

    python bench/bench_scenarios.py [--skip-anchors]

Runs the real CLI in a temporary folder (the sandbox uids need o+x on its parents). The grade
time is the grader's own wall time (`grade.grade_seconds`: copy the workspace, run the grader
worker, run the delivered system sandboxed on the held-out data).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def assay(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "assay.cli", *args], cwd=cwd, text=True, capture_output=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--skip-anchors", action="store_true")
    args = ap.parse_args()
    out: dict[str, object] = {"bench": "scenarios"}
    with tempfile.TemporaryDirectory(prefix="assay-bench-scen-") as tmp:
        cwd = Path(tmp)
        os.chmod(cwd, 0o711)
        suite = REPO / "suites" / "starter" / "scenarios"
        r = assay("run", str(suite), "--agent", "reference", "-q", "--json", "r.json", cwd=cwd)
        if r.returncode not in (0, 1):
            sys.exit(r.stderr)
        runs = json.loads((cwd / "r.json").read_text())["runs"]
        grades = {x["task_id"]: x["grade"].get("grade_seconds") for x in runs}
        secs = [v for v in grades.values() if v is not None]
        out["grade_seconds"] = {"n": len(secs), "median": sorted(secs)[len(secs) // 2] if secs else None,
                                "max": max(secs) if secs else None}
        out["per_task"] = grades
        if not args.skip_anchors:
            t0 = time.perf_counter()
            r = assay("validate", "--anchors", str(REPO / "suites" / "starter"), cwd=cwd)
            out["anchors_minutes"] = round((time.perf_counter() - t0) / 60, 2)
            out["anchors_exit"] = r.returncode
    for k, v in out.items():
        if k != "per_task":
            print(f"{k}: {v}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
