"""The floor under bench_overhead.py: the same 2,000 chat calls at concurrency 100 against
the same fake server, made directly with the OpenAI SDK (no harness at all). The harness's
own cost is bench_overhead's wall time minus this one, and the framework's CPU per model run is
`bench_scale.py model`'s CPU per run minus this one's `cpu_ms_per_call` (one call per run there).

    python bench/bench_sdk_floor.py [--runs 2000] [--concurrency 100] [--latency 1.0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path


async def run(url: str, runs: int, concurrency: int) -> tuple[float, float]:
    """(wall s, this process's CPU s) of the calls, the SDK's import and client set-up excluded."""
    import openai

    shards = [openai.AsyncOpenAI(api_key="x", base_url=url, max_retries=0, timeout=60)]  # as the harness: one client
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with sem:
            await shards[i % len(shards)].chat.completions.create(
                model="fake-model", messages=[{"role": "user", "content": "Reply with the word pong."}])

    t0, c0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*[one(i) for i in range(runs)])
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    for s in shards:
        await s.close()
    return wall, cpu


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
        wall, cpu = asyncio.run(run(url, args.runs, args.concurrency))
    finally:
        server.stdin.close()  # type: ignore[union-attr]
        server.wait(timeout=10)
    ideal = args.runs / args.concurrency * args.latency
    out = {"bench": "sdk_floor", "runs": args.runs, "concurrency": args.concurrency, "wall_s": round(wall, 2),
           "ideal_s": ideal, "ratio": round(wall / ideal, 3), "cpu_s": round(cpu, 2),
           "cpu_ms_per_call": round(cpu / args.runs * 1000, 3)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
