"""Start-up cost of the commands a user types most: `assay --version` and `assay tasks`.

    python bench/bench_startup.py [--repeat 7] [--suite suites/starter]

Each command runs as a fresh process (`python -m assay ...` is avoided: the console script is
what users run), `--repeat` times; it prints the fastest and the median wall time, and the
median CPU time (user + system of the child), which load on the machine changes less than
wall time. Targets (issue 26): `--version` <= 0.3 s, `tasks` <= 0.5 s.

To time the code as it was before a change, put that tree's `src/` first on the path, e.g.

    mkdir -p /tmp/before && git archive <commit> src | tar -x -C /tmp/before
    PYTHONPATH=/tmp/before/src python bench/bench_startup.py

Prints a table, then one JSON line with every number.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _assay() -> list[str]:
    script = Path(sys.executable).parent / "assay"
    if script.exists():
        return [str(script)]
    found = shutil.which("assay")
    if found is None:
        raise SystemExit("bench_startup: no `assay` console script beside this python or on PATH")
    return [found]


def _time(argv: list[str]) -> tuple[float, float]:
    """(wall s, child CPU s) of one run of argv, its output discarded."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=REPO, env=os.environ.copy())
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--suite", default="suites/starter")
    args = ap.parse_args()
    assay = _assay()
    commands = {"--version": [*assay, "--version"], "tasks": [*assay, "tasks", args.suite]}
    results = {}
    for name, argv in commands.items():
        _time(argv)  # once to warm the page cache and write bytecode
        walls, cpus = zip(*(_time(argv) for _ in range(args.repeat)), strict=True)
        results[name] = {"fastest_s": round(min(walls), 3), "median_s": round(statistics.median(walls), 3),
                         "median_cpu_s": round(statistics.median(cpus), 3)}
    print(f"{'command':<12} {'fastest s':>10} {'median s':>10} {'median CPU s':>13}")
    for name, r in results.items():
        print(f"{name:<12} {r['fastest_s']:>10} {r['median_s']:>10} {r['median_cpu_s']:>13}")
    print(json.dumps({"repeat": args.repeat, "suite": args.suite, **results}))


if __name__ == "__main__":
    main()
