"""Harness overhead: N single-turn vanilla runs against the fake OpenAI server.

Each run is the normal code path (plan, agent loop, model call over real HTTP, machine-checked
rubric grading, report row, SQLite store write) of a one-item task without workspace or
sandbox. The fake server answers every request after a fixed latency, so with concurrency C
the ideal wall time is N / C x latency; the ratio to that ideal is the harness's overhead.

    python bench/bench_overhead.py [--runs 2000] [--concurrency 100] [--latency 1.0]

Prints a table and one JSON line. The fake server runs in its own process
(bench/fake_openai_proc.py) so that it does not compete for this process's GIL.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


TASK = """\
title: overhead probe
execution: single-step
prompt: Reply with the word pong.
rubric:
  items:
    - id: pong
      text: says pong
      weight: 10
      tag: IF
      check: {regex: "pong"}
"""


async def main_async(args: argparse.Namespace, tmp: Path, url: str) -> dict:
    from assay.campaign.options import RunOptions
    from assay.campaign.service import prepare_campaign, run_prepared

    task = tmp / "tasks" / "probe"
    task.mkdir(parents=True)
    (task / "task.yaml").write_text(TASK)
    (tmp / "assay.toml").write_text(
        f'[models.fake]\nprovider = "openai"\nmodel = "fake-model"\nbase_url = "{url}"\n'
        "max_retries = 0\ntimeout_s = 60\n[models.fake.prices]\ninput = 1.0\noutput = 2.0\n")
    os.chdir(tmp)
    req = RunOptions(paths=[task], agents=["fake"], epochs=args.runs, concurrency=args.concurrency,
                     store=f"sqlite:///{tmp / 'bench.db'}")
    prepared = prepare_campaign(req)
    t0 = time.perf_counter()
    result, report = await run_prepared(prepared, show_progress=False)
    wall = time.perf_counter() - t0
    ideal = args.runs / args.concurrency * args.latency
    done = sum(1 for r in report["runs"] if r["status"] == "done" and r["passed"])
    return {"bench": "overhead", "runs": args.runs, "concurrency": args.concurrency, "latency_s": args.latency,
            "wall_s": round(wall, 2), "ideal_s": round(ideal, 2), "ratio": round(wall / ideal, 3),
            "harness_ms_per_run": round((wall - ideal) / args.runs * 1000 * args.concurrency / args.concurrency, 3),
            "passed_runs": done, "void": result.void,
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=100)
    ap.add_argument("--latency", type=float, default=1.0)
    args = ap.parse_args()
    server = subprocess.Popen([sys.executable, str(Path(__file__).with_name("fake_openai_proc.py")), str(args.latency)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().strip()  # type: ignore[union-attr]
        with tempfile.TemporaryDirectory(prefix="assay-bench-") as tmp:
            out = asyncio.run(main_async(args, Path(tmp), url))
    finally:
        server.stdin.close()  # type: ignore[union-attr]
        server.wait(timeout=10)
    print(f"runs {out['runs']}  concurrency {out['concurrency']}  latency {out['latency_s']} s")
    print(f"wall {out['wall_s']} s  ideal {out['ideal_s']} s  ratio {out['ratio']}  "
          f"harness {out['harness_ms_per_run']} ms/run  peak RSS {out['peak_rss_mb']} MB  "
          f"passed {out['passed_runs']}  void {out['void']}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
