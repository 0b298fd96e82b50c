"""Scale benchmarks: cost per run as campaigns grow, and throughput with several workers.

    python bench/bench_scale.py policy --runs 100000 [--tasks 1] [--concurrency 100]
    python bench/bench_scale.py model --runs 10000 --concurrency 500 [--latency 1.0]
    python bench/bench_scale.py workers --workers 1 2 4 [--runs 800] [--concurrency 20] [--latency 0.5]
    python bench/bench_scale.py ray --workers 1 2 4 [--runs 200] [--latency 0.5]

`policy`: a one-item machine-checked rubric task answered by its reference policy (no model,
no workspace, no sandbox), `--tasks` distinct tasks x N/tasks epochs, SQLite store.
`model`: the same task answered by a model on the fake OpenAI server (bench/fake_openai_proc.py,
its own process, fixed latency). Both run the campaign in this process (`run_campaign`, the
code path of `assay run`) and print the campaign's process CPU time per run (user + system,
less sensitive to other load than wall time), its wall time, the peak RSS during the campaign
and after the end-of-campaign report, and the store's size. `--profile FILE` writes a cProfile
of the campaign (store calls then run inline on the event loop, so the profile sees them); `--tracemalloc` prints the 15 largest allocation sites still live at the end.

`workers`: N real `assay run` processes on one campaign of fake-model runs sharing a real
PostgreSQL (started like tests/pg.py does), against the fake OpenAI server with fixed latency
and concurrency per worker fixed, so the ideal is linear in N. It prints the wall time, the
throughput between the first and the last stored run (without the processes' start-up), its
ratio to N x one worker's, the workers' CPU per run, and the store's cost of claiming (1,000
keys one at a time and 32 at a time; CPU and wall ms per run).

`ray`: `assay run --backend ray` against a Ray head started with N CPUs (one run per CPU at a
time: N Ray workers), all inside a private network namespace (needs root; Ray binds to the
machine's address, so it runs where only `lo` exists, and everything in the namespace ends
with it), the fake OpenAI server with fixed latency beside it, SQLite store. It prints the
throughput between the first and the last stored run, its ratio to N x one worker's, and the
driver's CPU per run (the workers' CPU is Ray's processes, not children of the benchmark).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

POLICY_TASK = """\
title: scale probe {i}
execution: single-step
prompt: Reply with the word pong.
reference: {{answer: pong}}
rubric:
  items:
    - id: pong
      text: says pong
      weight: 10
      tag: IF
      check: {{regex: "pong"}}
"""


def _rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _current_rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return round(int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


def write_suite(root: Path, tasks: int) -> Path:
    suite = root / "suite"
    for i in range(tasks):
        d = suite / f"probe-{i:05d}"
        d.mkdir(parents=True)
        (d / "task.yaml").write_text(POLICY_TASK.format(i=i))
    return suite


def model_config(root: Path, url: str) -> None:
    (root / "assay.toml").write_text(
        f'[models.fake]\nprovider = "openai"\nmodel = "fake-model"\nbase_url = "{url}"\n'
        "max_retries = 0\ntimeout_s = 60\n[models.fake.prices]\ninput = 1.0\noutput = 2.0\n")


async def in_process(args: argparse.Namespace, root: Path, agent: str) -> dict[str, Any]:
    """One campaign in this process; CPU, wall, RSS and store size."""
    from rich.console import Console

    from assay.campaign.options import RunOptions
    from assay.campaign.runner import RunContext
    from assay.campaign.scheduler import run_campaign
    from assay.campaign.service import prepare_campaign
    from assay.report.build import stored_report

    suite = write_suite(root, args.tasks)
    os.chdir(root)
    db = root / "bench.db"
    req = RunOptions(paths=[suite], agents=[agent], epochs=args.runs // args.tasks, concurrency=args.concurrency,
                     store=f"sqlite:///{db}", unsafe_no_sandbox=True)
    prepared = prepare_campaign(req)
    ctx = RunContext(store=prepared.store, options=prepared.options)
    rss_start = _current_rss_mb()
    if args.tracemalloc:
        import tracemalloc

        tracemalloc.start(8)
    prof = None
    if args.profile:
        import cProfile

        async def inline(func: Any, /, *a: Any, **kw: Any) -> Any:  # store calls in the profiled thread
            return func(*a, **kw)

        asyncio.to_thread = inline  # type: ignore[assignment]
        prof = cProfile.Profile()
        prof.enable()
    c0, t0 = time.process_time(), time.perf_counter()
    result = await run_campaign(prepared.plan, ctx, console=Console(file=io.StringIO()), show_progress=False)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    if prof is not None:
        prof.disable()
        prof.dump_stats(args.profile)
    rss_campaign, rss_end_campaign = _rss_mb(), _current_rss_mb()
    if args.tracemalloc:
        import tracemalloc

        snap = tracemalloc.take_snapshot()
        for stat in snap.statistics("traceback")[:15]:
            print(f"{stat.size / 2**20:8.2f} MB {stat.count:8d} blocks  {stat.traceback.format()[-1].strip()}")
        tracemalloc.stop()
    for a in prepared.agents:
        await a.aclose()
    out: dict[str, Any] = {
        "runs": len(prepared.plan.runs), "tasks": args.tasks, "concurrency": args.concurrency,
        "campaign_wall_s": round(wall, 2), "campaign_cpu_s": round(cpu, 2),
        "cpu_ms_per_run": round(cpu / max(1, result.ran) * 1000, 3),
        "rss_before_campaign_mb": rss_start, "peak_rss_campaign_mb": rss_campaign,
        "rss_after_campaign_mb": rss_end_campaign, "void": result.void,
        "store_mb": round(sum(p.stat().st_size for p in root.glob("bench.db*")) / 2**20, 1),
    }
    if not args.no_report:
        c1, t1 = time.process_time(), time.perf_counter()
        report = stored_report(prepared.store, prepared.options.campaign, details=True, tasks=True)
        out.update(report_cpu_s=round(time.process_time() - c1, 2), report_wall_s=round(time.perf_counter() - t1, 2),
                   report_runs=len(report["runs"]), peak_rss_with_report_mb=_rss_mb())
    prepared.store.close()
    return out


def fake_server(latency: float) -> tuple[subprocess.Popen[str], str]:
    server = subprocess.Popen([sys.executable, str(Path(__file__).with_name("fake_openai_proc.py")), str(latency)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    return server, server.stdout.readline().strip()


def stop_server(server: subprocess.Popen[str]) -> None:
    assert server.stdin is not None
    server.stdin.close()
    server.wait(timeout=30)


def cmd_policy(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="assay-scale-") as tmp:
        return {"bench": "scale-policy", **asyncio.run(in_process(args, Path(tmp), "reference"))}


def cmd_model(args: argparse.Namespace) -> dict[str, Any]:
    server, url = fake_server(args.latency)
    try:
        with tempfile.TemporaryDirectory(prefix="assay-scale-") as tmp:
            model_config(Path(tmp), url)
            out = asyncio.run(in_process(args, Path(tmp), "fake"))
    finally:
        stop_server(server)
    ideal = args.runs / args.concurrency * args.latency
    return {"bench": "scale-model", "latency_s": args.latency, "ideal_s": round(ideal, 2),
            "ratio": round(out["campaign_wall_s"] / ideal, 3), **out}


def _store_window(url: str, campaign: str) -> tuple[int, float]:
    """Runs stored for `campaign` and the seconds between the first and the last save."""
    from sqlalchemy import create_engine, text

    eng = create_engine(url)
    try:
        with eng.connect() as c:
            n, first, last = c.execute(text("SELECT count(*), min(created_at), max(created_at) FROM runs "
                                            "WHERE campaign = :c AND status = 'done'"), {"c": campaign}).one()
    finally:
        eng.dispose()
    return int(n), float(last - first) if n else 0.0


def _claim_cost(url: str) -> dict[str, float]:
    """Store CPU and wall per run of claiming: 1,000 keys one at a time and 32 at a time."""
    from assay.store import Store

    st = Store(url)
    out: dict[str, float] = {}
    try:
        for size in (1, 32):
            keys = [f"claim-bench-{size}-{i}" for i in range(1000)]
            c0, t0 = time.process_time(), time.perf_counter()
            for i in range(0, len(keys), size):
                st.claim_many(f"claim-bench-{size}", keys[i:i + size], "bench", 60)
            out[f"claim_batch{size}_cpu_ms_per_run"] = round((time.process_time() - c0) / len(keys) * 1000, 3)
            out[f"claim_batch{size}_wall_ms_per_run"] = round((time.perf_counter() - t0) / len(keys) * 1000, 3)
    finally:
        st.close()
    return out


def cmd_workers(args: argparse.Namespace) -> dict[str, Any]:
    """N `assay run` processes on one campaign in a real PostgreSQL, fake model, fixed latency."""
    from sqlalchemy import create_engine, text
    from tests.pg import postgres_server

    from assay.store import Store

    server, url = fake_server(args.latency)
    rows: list[dict[str, Any]] = []
    try:
        with postgres_server() as pg, tempfile.TemporaryDirectory(prefix="assay-scale-") as tmp:
            root = Path(tmp)
            suite = write_suite(root, 1)
            model_config(root, url)
            base = f"postgresql+psycopg://postgres@{pg['host']}:{pg['port']}"
            admin = create_engine(base + "/postgres", isolation_level="AUTOCOMMIT")
            env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "ASSAY_"))}
            env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1] / "src")
            for n in args.workers:
                with admin.connect() as c:
                    c.execute(text(f"CREATE DATABASE bench_{n}"))
                store = f"{base}/bench_{n}"
                Store(store).close()  # migrated before the clock starts
                cmd = [sys.executable, "-m", "assay.cli", "run", str(suite), "--agent", "fake", "--epochs",
                       str(args.runs), "--concurrency", str(args.concurrency), "--store", store, "-q"]
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                t0 = time.perf_counter()
                procs = [subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                          text=True) for _ in range(n)]
                errs = [p.communicate()[1] for p in procs]
                wall = time.perf_counter() - t0
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                bad = [(p.returncode, e[-500:]) for p, e in zip(procs, errs, strict=True) if p.returncode != 0]
                if bad:
                    raise SystemExit(f"a worker failed: {bad}")
                done, window = _store_window(store, "default")
                cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
                rows.append({"workers": n, "runs": done, "wall_s": round(wall, 2), "save_window_s": round(window, 2),
                             "runs_per_s": round(done / window, 1) if window else None,
                             "ideal_runs_per_s": round(n * args.concurrency / args.latency, 1),
                             "worker_cpu_ms_per_run": round(cpu / done * 1000, 2)})
            claim = _claim_cost(f"{base}/bench_{args.workers[0]}")
            admin.dispose()
    finally:
        stop_server(server)
    one = rows[0]["runs_per_s"] / rows[0]["workers"] if rows[0]["runs_per_s"] else None
    for r in rows:
        r["scaling"] = round(r["runs_per_s"] / (one * r["workers"]), 3) if one and r["runs_per_s"] else None
    return {"bench": "scale-workers", "latency_s": args.latency, "concurrency_per_worker": args.concurrency,
            "rows": rows, **claim}


def cmd_ray(args: argparse.Namespace) -> dict[str, Any]:
    """`assay run --backend ray` on a Ray head of N CPUs in a network namespace, fake model."""
    from tests.netns import HAVE_NS, NetNamespace

    if not HAVE_NS:
        raise SystemExit("the ray benchmark needs root, unshare and nsenter (a private network namespace)")
    port = 6391
    rows: list[dict[str, Any]] = []
    for n in args.workers:
        with tempfile.TemporaryDirectory(prefix="assay-scale-ray-") as tmp:
            root = Path(tmp)
            os.chmod(root, 0o711)
            ns = NetNamespace(root)
            try:
                server = subprocess.Popen(ns.argv([sys.executable, str(Path(__file__).with_name("fake_openai_proc.py")),
                                                   str(args.latency)], root),
                                          env=ns.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                assert server.stdout is not None
                url = server.stdout.readline().strip()
                head = ns.run([sys.executable, "-m", "ray.scripts.scripts", "start", "--head", f"--port={port}",
                               "--node-ip-address=127.0.0.1", f"--num-cpus={n}", "--object-store-memory=100000000",
                               "--include-dashboard=false", "--disable-usage-stats"], cwd=root, timeout=300)
                if head.returncode != 0:
                    raise SystemExit(f"ray start failed: {head.stderr[-2000:]}")
                suite = write_suite(root, 1)
                model_config(root, url)
                db = root / "ray.db"
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                t0 = time.perf_counter()
                r = ns.run([sys.executable, "-m", "assay.cli", "run", str(suite), "--agent", "fake", "--epochs",
                            str(args.runs), "--backend", "ray", "--ray-address", f"127.0.0.1:{port}",
                            "--unsafe-no-sandbox", "--store", f"sqlite:///{db}", "-q"], cwd=root, timeout=3600)
                wall = time.perf_counter() - t0
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                if r.returncode != 0:
                    raise SystemExit(f"assay run --backend ray failed: {r.stderr[-2000:]}")
                done, window = _store_window(f"sqlite:///{db}", "default")
                cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
                rows.append({"workers": n, "runs": done, "wall_s": round(wall, 2), "save_window_s": round(window, 2),
                             "runs_per_s": round(done / window, 2) if window else None,
                             "ideal_runs_per_s": round(n / args.latency, 2),
                             "driver_cpu_ms_per_run": round(cpu / done * 1000, 2)})
                assert server.stdin is not None
                server.stdin.close()
            finally:
                ns.close()
    one = rows[0]["runs_per_s"] / rows[0]["workers"] if rows[0]["runs_per_s"] else None
    for row in rows:
        row["scaling"] = round(row["runs_per_s"] / (one * row["workers"]), 3) if one and row["runs_per_s"] else None
    return {"bench": "scale-ray", "latency_s": args.latency, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("policy", "model"):
        p = sub.add_parser(name)
        p.add_argument("--runs", type=int, default=2000)
        p.add_argument("--tasks", type=int, default=1, help="distinct tasks (runs / tasks epochs each)")
        p.add_argument("--concurrency", type=int, default=100)
        p.add_argument("--latency", type=float, default=1.0)
        p.add_argument("--profile", default=None, help="write a cProfile of the campaign here")
        p.add_argument("--tracemalloc", action="store_true", help="largest live allocation sites at the end")
        p.add_argument("--no-report", action="store_true", help="skip the end-of-campaign report")
    w = sub.add_parser("workers")
    w.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    w.add_argument("--runs", type=int, default=800, help="runs of the campaign (epochs of one task)")
    w.add_argument("--concurrency", type=int, default=20, help="per worker")
    w.add_argument("--latency", type=float, default=0.5)
    rw = sub.add_parser("ray")
    rw.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4], help="CPUs of the Ray head")
    rw.add_argument("--runs", type=int, default=200, help="runs of the campaign (epochs of one task)")
    rw.add_argument("--latency", type=float, default=0.5)
    args = ap.parse_args()
    out = {"policy": cmd_policy, "model": cmd_model, "workers": cmd_workers, "ray": cmd_ray}[args.cmd](args)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
