"""The report over a large store: `assay report` (terminal) and `assay report --html` over
synthetic stored runs, for many tasks and for many epochs of few tasks.

    python bench/bench_report.py [--runs 100000] [--agents 2] [--answer-chars N] [--repeat 3] [--in-process]

Fills a temporary SQLite store with `--runs` rubric runs (token counts, costs, values in two
currencies, one run in 50 void), written as the rows `Store.save_run` writes but 5,000 per
transaction (one transaction per run would take the fill minutes), once as distinct tasks
(runs / agents tasks per agent, one epoch each) and once as 5 tasks with runs / (5 x agents)
epochs each, then times the real CLI in a subprocess (start-up, store read, report build,
rendering; stdout to a file, as in a pipe), `--repeat` times each: the fastest and the median
are given, beside `machine_loop_s` (a plain Python loop's time: this machine's speed). The
terminal and the HTML report read the current runs' columns (`assay.store.current`), not
their records. `--in-process` also
times, in this process (CPU seconds), the store read + `build_report` through whole validated
`RunRecord`s (`Store.runs`, the old path) against the light read, for the terminal (no per-run
rows) and for report files (with them). Targets (issue 11): terminal <= 3 s, HTML <= 10 s.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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
from assay.store.db import SaveOutcome  # noqa: E402
from assay.store.models import grades_t, runs_t  # noqa: E402


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


def timed(cwd: Path, *args: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one `assay report` subprocess: on a busy machine the CPU
    time says what the report costs, the wall time what a user waits."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with open(cwd / "out.txt", "w") as out:
        r = subprocess.run([sys.executable, "-m", "assay.cli", "report", "--campaign", "bench", *args], cwd=cwd,
                           stdout=out, stderr=subprocess.PIPE, text=True,
                           env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    if r.returncode != 0:
        sys.exit(r.stderr)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def in_process(db: Path) -> dict[str, float]:
    """CPU seconds of store read + report build: old path (validated RunRecords) vs light read."""
    from assay.report.build import build_report
    from assay.report.runs import read_runs

    st = Store(f"sqlite:///{db}")

    def cpu(f: Callable[[], object]) -> float:
        t0 = time.process_time()
        f()
        return round(time.process_time() - t0, 2)

    out = {"old_terminal_cpu_s": cpu(lambda: build_report("bench", st.runs("bench"), details=False)),
           "light_terminal_cpu_s": cpu(lambda: build_report("bench", read_runs(st, "bench", whole=False),
                                                            details=False)),
           "old_files_cpu_s": cpu(lambda: build_report("bench", st.runs("bench"))),
           "light_files_cpu_s": cpu(lambda: build_report("bench", read_runs(st, "bench", whole=True)))}
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
    ap.add_argument("--repeat", type=int, default=3, help="time each report this many times: the fastest and the "
                                                           "median are given (default 3)")
    ap.add_argument("--in-process", action="store_true", help="also time old vs light read in this process")
    args = ap.parse_args()
    results = []
    for shape, tasks in (("distinct tasks", None), ("5 tasks, many epochs", 5)):
        with tempfile.TemporaryDirectory(prefix="assay-bench-report-") as tmp:
            cwd = Path(tmp)
            (cwd / ".assay").mkdir()
            fill_s = fill(cwd / ".assay" / "assay.db", args.runs, args.agents, tasks, args.answer_chars)
            terminal = sorted(timed(cwd) for _ in range(args.repeat))
            html = sorted(timed(cwd, "--html", "r.html") for _ in range(args.repeat))
            mid = args.repeat // 2
            results.append({"shape": shape, "runs": args.runs, "agents": args.agents, "fill_s": round(fill_s, 1),
                            "terminal_s": round(terminal[0][0], 2), "terminal_median_s": round(terminal[mid][0], 2),
                            "terminal_cpu_s": round(terminal[0][1], 2),
                            "html_s": round(html[0][0], 2), "html_median_s": round(html[mid][0], 2),
                            "html_cpu_s": round(html[0][1], 2),
                            "load": round(os.getloadavg()[0], 1), "answer_chars": args.answer_chars,
                            "html_mb": round((cwd / "r.html").stat().st_size / 1e6, 1),
                            "machine_loop_s": machine_loop_s()})
            if args.in_process:
                results[-1].update(in_process(cwd / ".assay" / "assay.db"))
            print(json.dumps(results[-1]), flush=True)


if __name__ == "__main__":
    main()
