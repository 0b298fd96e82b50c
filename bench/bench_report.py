"""The report over a large store (issue 26's targets): `assay report` (terminal), `--md`,
`--html`, `--json` and `assay compare` over synthetic stored runs, for many tasks and for many
epochs of few tasks.

    python bench/bench_report.py [--runs 100000] [--agents 2] [--answer-chars N] [--repeat 1]
                                 [--cpus 0] [--in-process]

Fills a temporary SQLite store with `--runs` rubric runs (token counts, costs, values in two
currencies, one run in 50 void), written as the rows `Store.save_runs` writes (`runs`, `grades`,
`current_runs`) but 5,000 per transaction (one transaction per run would take the fill
minutes), once as distinct tasks (runs / agents tasks per agent, one epoch each) and once as 5
tasks with runs / (5 x agents) epochs each, then times the real CLI in a subprocess pinned to
the CPUs `--cpus` names (`taskset -c`; default 0: one core), `--repeat` times each (the fastest
is given): wall seconds, CPU seconds (user + system) and peak RSS (MB) of each command, beside
`machine_loop_s` (a plain Python loop's time: this machine's speed). `--in-process` also times
in this process (CPU seconds) the report computed by the store against the records read whole
and reported through an in-memory store. Targets (issue 26): terminal and --md <= 2 s, HTML <= 5 s, compare
<= 3 s and <= 300 MB, --json <= 300 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from assay.record import Grade, RubricGrade, RunKey, RunRecord, UsageCost  # noqa: E402
from assay.store import Store, current  # noqa: E402
from assay.store.models import grades_t, runs_t  # noqa: E402
from assay.store.saves import SaveOutcome  # noqa: E402


def _rows(r: RunRecord) -> tuple[dict[str, object], dict[str, object], dict[str, object]]:
    """The `runs`, `grades` and `current_runs` rows of one run, as `Store.save_runs` writes them."""
    save = SaveOutcome(r, [])
    return save.run_row(time.time()), save.grade_row(), save.current_row()


def fill(db: Path, runs: int, agents: int, tasks: int | None, answer_chars: int = 0) -> float:
    """`answer_chars`: the length of each run's final message (0: none), to see what larger
    stored records cost."""
    t0 = time.perf_counter()
    st = Store(f"sqlite:///{db}")
    per_agent = runs // agents
    batch: list[RunRecord] = []
    for a in range(agents):
        for i in range(per_agent):
            task, epoch = (f"t{i}", 1) if tasks is None else (f"t{i % tasks}", i // tasks + 1)
            score = ((i * 7919 + a * 104729) % 1000) / 1000
            void = i % 50 == 49
            batch.append(RunRecord(
                run_id=uuid.uuid4().hex,
                key=RunKey(campaign="bench", task_id=task, task_hash="h-" + task, agent=f"agent-{a}", level=None,
                           epoch=epoch, options_hash="o"),
                kinds=["rubric"], harness_version="bench", status="void" if void else "done",
                end_reason="api_error" if void else "finished", score=None if void else score,
                passed=None if void else score >= 0.7,
                grade=Grade(rubric=RubricGrade(expert_score=score, tags={"FI": score, "AR": 1 - score})),
                usage=UsageCost(input_tokens=1000 + i % 500, output_tokens=200, cost_usd=0.001 * (1 + i % 9)),
                value={"amount": 100.0 + i % 7, "currency": "USD" if i % 2 else "EUR"},
                task_meta={"title": task, "domain": "bench", "language": "en"},
                final_message=("An answer of some length. " * (answer_chars // 26 + 1))[:answer_chars]))
            if len(batch) == 5000 or (a == agents - 1 and i == per_agent - 1):
                if not st.campaigns():
                    st.save_run(batch.pop(), [])  # the first run the normal way: creates the campaign
                rows = [_rows(r) for r in batch]
                with st.engine.begin() as conn:
                    conn.execute(runs_t.insert(), [r for r, _g, _s in rows])
                    conn.execute(grades_t.insert(), [g for _r, g, _s in rows])
                    current.upsert(conn, [s for _r, _g, s in rows])
                batch = []
    st.close()
    return time.perf_counter() - t0


_WRAP = (
    "import atexit, os, resource, sys\n"
    "atexit.register(lambda: open(os.environ['BENCH_RSS'], 'w').write("
    "str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)))\n"
    "sys.argv = ['assay', *sys.argv[1:]]\n"
    "from assay.cli import main\n"
    "main()\n"
)
"""Runs the CLI and writes its peak RSS (KiB, `ru_maxrss`) to the file $BENCH_RSS at exit."""


def timed(cwd: Path, cpus: str, *args: str) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak RSS in MB) of one `assay` subprocess: on a busy machine
    the CPU time says what the command costs, the wall time what a user waits."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    pin = ["taskset", "-c", cpus] if cpus and shutil.which("taskset") else []
    t0 = time.perf_counter()
    with open(cwd / "out.txt", "w") as out:
        r = subprocess.run([*pin, sys.executable, "-c", _WRAP, *args], cwd=cwd, stdout=out, stderr=subprocess.PIPE,
                           text=True, env={**os.environ, "PYTHONPATH": str(REPO / "src"),
                                           "BENCH_RSS": str(cwd / "rss.txt")})
    if r.returncode != 0:
        sys.exit(r.stderr)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    rss_mb = int((cwd / "rss.txt").read_text()) / 1024
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), rss_mb


COMMANDS: dict[str, list[str]] = {
    "terminal": ["report", "--campaign", "bench"],
    "md": ["report", "--campaign", "bench", "--md", "r.md"],
    "html": ["report", "--campaign", "bench", "--html", "r.html"],
    "json": ["report", "--campaign", "bench", "--json", "r.json"],
    "compare": ["compare", "agent-0", "agent-1", "--campaign", "bench"],
}
"""What is timed: each command over the filled store."""


def in_process(db: Path) -> dict[str, float]:
    """CPU seconds of a report in this process: computed by the store (`stored_report`, the
    path every command takes) against the records read whole and reported through an
    in-memory store (`build_report`, what a report of runs held in memory costs)."""
    from assay.report.build import build_report, stored_report

    st = Store(f"sqlite:///{db}")

    def cpu(f: Callable[[], object]) -> float:
        t0 = time.process_time()
        f()
        return round(time.process_time() - t0, 2)

    out = {"stored_terminal_cpu_s": cpu(lambda: stored_report(st, "bench")),
           "stored_table_cpu_s": cpu(lambda: stored_report(st, "bench", details="table")),
           "records_terminal_cpu_s": cpu(lambda: build_report("bench", st.runs("bench"), details=False))}
    st.close()
    return out


def machine_loop_s() -> float:
    """Seconds this machine takes for a plain Python loop of 10 million additions (fastest of
    3): to compare numbers taken on machines of different speed."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        total = 0
        for i in range(10_000_000):
            total += i
        best = min(best, time.perf_counter() - t0)
    return round(best, 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=100_000)
    ap.add_argument("--agents", type=int, default=2)
    ap.add_argument("--answer-chars", type=int, default=0, help="each run's final message length (default: none)")
    ap.add_argument("--repeat", type=int, default=1, help="time each command this many times: the fastest is given")
    ap.add_argument("--cpus", default="0", help="the CPUs the commands run on (taskset -c; '' for any)")
    ap.add_argument("--in-process", action="store_true", help="also time old vs current-runs read in this process")
    ap.add_argument("--shape", choices=("distinct", "epochs", "both"), default="both")
    args = ap.parse_args()
    shapes = [("distinct tasks", None), ("5 tasks, many epochs", 5)]
    if args.shape != "both":
        shapes = shapes[:1] if args.shape == "distinct" else shapes[1:]
    for shape, tasks in shapes:
        with tempfile.TemporaryDirectory(prefix="assay-bench-report-") as tmp:
            cwd = Path(tmp)
            (cwd / ".assay").mkdir()
            fill_s = fill(cwd / ".assay" / "assay.db", args.runs, args.agents, tasks, args.answer_chars)
            result: dict[str, object] = {"shape": shape, "runs": args.runs, "agents": args.agents,
                                         "fill_s": round(fill_s, 1), "cpus": args.cpus}
            for name, cmd in COMMANDS.items():
                if name == "compare" and args.agents < 2:
                    continue
                wall, cpu, rss = min(timed(cwd, args.cpus, *cmd) for _ in range(args.repeat))
                result.update({f"{name}_s": round(wall, 2), f"{name}_cpu_s": round(cpu, 2),
                               f"{name}_mb": round(rss)})
            result.update({"load": round(os.getloadavg()[0], 1), "answer_chars": args.answer_chars,
                           "html_file_mb": round((cwd / "r.html").stat().st_size / 1e6, 1),
                           "machine_loop_s": machine_loop_s()})
            if args.in_process:
                result.update(in_process(cwd / ".assay" / "assay.db"))
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
