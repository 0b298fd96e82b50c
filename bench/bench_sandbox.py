"""Per-command overhead of the sandbox against a bare subprocess.

Usage (as root, like the harness; bubblewrap installed):

    python bench/bench_sandbox.py            # N=200 runs per cell
    python bench/bench_sandbox.py --n 50

Runs `true` and `python3 -c pass` (Debian's /usr/bin/python3) N times each through
  * bare:       asyncio.create_subprocess_exec with a stdout pipe, nothing else;
  * unisolated: Sandbox(isolated=False): dedicated uid, rlimits, clean env, leftover sweep;
  * isolated:   Sandbox(): bubblewrap with every namespace unshared;
and prints the median and p95 wall time per command in ms, as a table and one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from assay.env.sandbox import Sandbox  # noqa: E402

COMMANDS = {"true": ["/usr/bin/true"], "python3 -c pass": ["/usr/bin/python3", "-c", "pass"]}


def _p95(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(0.95 * (len(s) - 1)))]


async def _bare(argv: list[str]) -> None:
    p = await asyncio.create_subprocess_exec(*argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                             stderr=subprocess.STDOUT)
    await p.communicate()
    assert p.returncode == 0


async def main(n: int) -> dict[str, dict[str, dict[str, float]]]:
    base = Path(tempfile.mkdtemp(prefix="assay-bench-"))
    os.chmod(base, 0o711)
    results: dict[str, dict[str, dict[str, float]]] = {}
    sandboxes: list[Sandbox] = []
    try:
        for mode in ("bare", "unisolated", "isolated"):
            sb: Sandbox | None = None
            if mode != "bare":
                ws = base / mode
                ws.mkdir()
                sb = Sandbox(ws, isolated=(mode == "isolated"))
                sb.prepare()
                sandboxes.append(sb)
            results[mode] = {}
            for name, argv in COMMANDS.items():
                for _ in range(5):  # warm caches
                    await (_bare(argv) if sb is None else sb.run(argv))
                times = []
                for _ in range(n):
                    t0 = time.perf_counter()
                    if sb is None:
                        await _bare(argv)
                    else:
                        r = await sb.run(argv)
                        assert r.exit_code == 0, r.output
                    times.append((time.perf_counter() - t0) * 1000)
                results[mode][name] = {"median_ms": round(statistics.median(times), 2),
                                       "p95_ms": round(_p95(times), 2)}
    finally:
        for sb in sandboxes:
            await sb.close()
        shutil.rmtree(base, ignore_errors=True)
    return results


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200)
    args = ap.parse_args()
    res = asyncio.run(main(args.n))
    print(f"sandbox overhead, N={args.n} per cell, {os.cpu_count()} cpus")
    print(f"{'mode':<12}{'command':<18}{'median ms':>10}{'p95 ms':>10}")
    for mode, cells in res.items():
        for name, v in cells.items():
            print(f"{mode:<12}{name:<18}{v['median_ms']:>10.2f}{v['p95_ms']:>10.2f}")
    print(json.dumps({"bench": "sandbox", "n": args.n, "results": res}))
