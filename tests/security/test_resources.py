"""Category 4: per-run resource ceilings.

- memory for the whole run (several processes together), not per process: three 1.5 GB
  processes under the default 4 GiB run limit must not all hold their memory at once;
- writable RAM-backed mounts (/tmp, /dev/shm, /) are size-limited (at most 1 GiB, as /tmp);
- a disk quota per run's workspace: an agent filling it is stopped with a clear reason;
- caps on file count and tree depth when the workspace is copied for grading;
- the file tools act with the run's limits: no file over 1 GiB through them;
- `timeout_s` NaN / Infinity in tool arguments refused; non-finite numbers in task files
  refused at validation (exit 2).

Hooks assumed (environment variables, so an unknown one changes nothing today):
`ASSAY_WORKSPACE_QUOTA_BYTES` (the per-run workspace quota), `ASSAY_COPY_MAX_FILES` and
`ASSAY_COPY_MAX_DEPTH` (the caps applied when a workspace is copied or walked for grading).
Memory uses the documented default (4 GiB per run), so no hook is needed.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.security._cases import answer_task, labels_case
from tests.security._support import (
    bwrap_ok,
    cli,
    cmd,
    du_bytes,
    outputs,
    report_json,
    run_dir_of,
    runs_by_name,
    script,
    show,
    workdir,
)

pytestmark = pytest.mark.skipif(not bwrap_ok(), reason="bubblewrap is not installed")

GiB = 1024**3
MiB = 1024**2

HOG = """\
import os, sys, time
i = sys.argv[1]
try:
    block = b"x" * (1536 * 1024 * 1024)  # 1.5 GB, every page touched
except MemoryError:
    print(f"HOG{i}:MemoryError", flush=True)
    sys.exit(0)
open(f"held-{i}", "w").close()
end = time.time() + 20
while time.time() < end and sum(os.path.exists(f"held-{k}") for k in range(3)) < 3:
    time.sleep(0.05)
print(f"HOG{i}:HELD:{sum(os.path.exists(f'held-{k}') for k in range(3))}", flush=True)
time.sleep(0.5)
"""

FILL = """\
import json, os, sys
where, limit = sys.argv[1], int(sys.argv[2])
chunk = b"\\0" * (64 * 1024 * 1024)
written, err, files = 0, None, []
try:
    while written < limit and err is None:
        path = os.path.join(where, f"fill-{len(files)}.bin")
        files.append(path)
        with open(path, "wb") as f:
            for _ in range(8):  # 512 MB per file: under the 1 GiB file-size limit
                if written >= limit:
                    break
                f.write(chunk)
                f.flush()
                written += len(chunk)
except OSError as e:
    err = f"{type(e).__name__}: {e.strerror}"
for p in files:
    try:
        os.unlink(p)
    except OSError:
        pass
print("FILL " + json.dumps({"where": where, "written": written, "error": err}), flush=True)
"""


@pytest.fixture(scope="module")
def probes() -> Iterator[dict[str, Any]]:
    """One run that tries the memory and the RAM-backed mounts, one command each."""
    with workdir("res-probes") as wd:
        answer_task(wd / "suite" / "answer")
        lines = [
            {"tool": "write_file", "args": {"path": "hog.py", "content": HOG}},
            {"tool": "write_file", "args": {"path": "fill.py", "content": FILL}},
            cmd("for i in 0 1 2; do python3 hog.py $i & done; wait; echo HOGS-DONE", 90),
            cmd(f"python3 fill.py /tmp {int(1.25 * GiB)}", 90),
            cmd(f"python3 fill.py /dev/shm {int(1.25 * GiB)}", 90),
            cmd(f"mkdir -p /scratch 2>/dev/null; python3 fill.py / {int(1.25 * GiB)}", 90),
            cmd("echo 42 > answer.txt"),
            {"say": "done"},
        ]
        spec = script(wd, "probe", lines)
        r = cli("run", str(wd / "suite"), "--agent", spec, cwd=wd, timeout=300)
        assert not r.timed_out, r.tail()
        (run,) = report_json(wd)["runs"]
        outs = outputs(show(wd, run["run_id"])["events"])
        fills = {}
        for o in outs:
            for m in re.finditer(r"^FILL (\{.*\})$", o, re.M):
                d = json.loads(m.group(1))
                fills[d["where"]] = d
        yield {"run": run, "outputs": outs, "fills": fills}


def test_memory_limit_covers_the_whole_run(probes: dict[str, Any]) -> None:
    out = next(o for o in probes["outputs"] if "HOGS-DONE" in o)
    held_all = out.count(":HELD:3")
    assert "HOG" in out, out
    assert held_all < 3, (f"three processes held 1.5 GB each at the same time (4.5 GB) in one run whose "
                          f"memory limit is 4 GiB: the limit is per process (RLIMIT_AS), not per run:\n{out}")


@pytest.mark.parametrize("mount", ["/tmp", "/dev/shm", "/"])
def test_ram_backed_mounts_are_size_limited(probes: dict[str, Any], mount: str) -> None:
    got = probes["fills"].get(mount)
    assert got is not None, f"no result for {mount}: {probes['outputs']}"
    assert got["written"] <= GiB, (f"{got['written'] / GiB:.2f} GiB written into {mount} inside the sandbox "
                                   f"(a RAM-backed tmpfs) without hitting a size limit: {got}")


# --------------------------------------------------------------------------- disk quota

QUOTA = 256 * MiB


@pytest.fixture(scope="module")
def disk_fill() -> Iterator[dict[str, Any]]:
    with workdir("res-disk") as wd:
        answer_task(wd / "suite" / "answer")
        fill = script(wd, "fill", [
            {"tool": "write_file", "args": {"path": "fill.py", "content": FILL}},
            cmd(f"python3 fill.py . {800 * MiB}; df -h . | tail -1", 120),
            cmd("echo 42 > answer.txt"),
            {"say": "done"}])
        benign = script(wd, "benign", [cmd("echo 42 > answer.txt"), {"say": "done"}])
        r = cli("run", str(wd / "suite"), "--agent", fill, "--agent", benign, "--concurrency", "2", cwd=wd,
                timeout=300, env={"ASSAY_WORKSPACE_QUOTA_BYTES": str(QUOTA)})
        assert not r.timed_out, r.tail()
        runs = runs_by_name(report_json(wd))
        run = runs["fill"]
        events = show(wd, run["run_id"])["events"]
        rd = run_dir_of(wd, run["run_id"])
        # the fill script deletes its files at the end: measure what it managed to write
        fills = [json.loads(m.group(1)) for o in outputs(events) for m in re.finditer(r"^FILL (\{.*\})$", o, re.M)]
        yield {"cwd": wd, "cli": r, "runs": runs, "events": events, "run_dir": rd, "fills": fills}


def test_workspace_disk_quota_stops_the_agent(disk_fill: dict[str, Any]) -> None:
    (got,) = disk_fill["fills"]
    assert got["written"] <= QUOTA + 64 * MiB, (
        f"the agent wrote {got['written'] / MiB:.0f} MiB into its workspace; the quota "
        f"(ASSAY_WORKSPACE_QUOTA_BYTES={QUOTA}) was not enforced: {got}")
    assert got["error"] and re.search(r"(?i)quota|no space", got["error"]), got


def test_disk_quota_leaves_a_clear_reason_and_the_store_intact(disk_fill: dict[str, Any]) -> None:
    runs = disk_fill["runs"]
    assert runs["benign"]["status"] == "done" and runs["benign"]["passed"] is True, runs["benign"]
    run = runs["fill"]
    assert run["status"] == "done", run
    text = json.dumps(disk_fill["events"]) + json.dumps(run)
    assert re.search(r"(?i)quota", text), "nothing in the run's record or transcript says the disk quota was hit"
    if disk_fill["run_dir"] is not None and (disk_fill["run_dir"] / "workspace").exists():
        assert du_bytes(disk_fill["run_dir"] / "workspace") <= QUOTA + 64 * MiB


# --------------------------------------------------------------------------- file count and depth

TREE_CHECK = '''\
import os


def grade(workspace, final_message):
    """What the checks were handed: files_ok / depth_ok say the copy stayed within the caps."""
    files, depth = 0, 0
    stack = [(workspace, 0)]
    while stack:
        d, k = stack.pop()
        depth = max(depth, k)
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                stack.append((e.path, k + 1))
            else:
                files += 1
    return {"files_ok": 1.0 if files <= 6000 else 0.0, "depth_ok": 1.0 if depth <= 100 else 0.0}
'''

MAKE_TREE = ("python3 -c \"import os\nos.makedirs('many')\nfor i in range(20000):\n"
             "    open('many/f%05d' % i, 'w').close()\nos.makedirs('deep')\nos.chdir('deep')\n"
             "for i in range(1500):\n    os.mkdir('d')\n    os.chdir('d')\nopen('leaf', 'w').close()\n"
             "print('TREE-MADE')\"")


@pytest.fixture(scope="module")
def big_tree() -> Iterator[dict[str, Any]]:
    with workdir("res-tree") as wd:
        answer_task(wd / "suite" / "checked", checks=TREE_CHECK, contract_on=False)
        answer_task(wd / "suite" / "answer")
        tree = script(wd, "tree", [cmd(MAKE_TREE, 120), cmd("echo 42 > answer.txt"), {"say": "done"}])
        benign = script(wd, "benign", [cmd("echo 42 > answer.txt"), {"say": "done"}])
        before = set(Path(tempfile.gettempdir()).glob("assay-*"))
        r = cli("run", str(wd / "suite"), "--agent", tree, "--agent", benign, "--concurrency", "2", cwd=wd,
                timeout=300, env={"ASSAY_COPY_MAX_FILES": "5000", "ASSAY_COPY_MAX_DEPTH": "64"})
        # grading copies the harness made outside the run folder and left behind (holding our tree)
        left = [d for d in set(Path(tempfile.gettempdir()).glob("assay-*")) - before
                if (d / "workspace" / "deep").is_dir() or (d / "workspace" / "many").is_dir()]
        try:
            assert not r.timed_out, r.tail()
            yield {"cwd": wd, "cli": r, "runs": runs_by_name(report_json(wd)), "left": left}
        finally:
            for d in left:
                subprocess.run(["rm", "-rf", "--one-file-system", str(d)], check=False)


def test_deep_and_wide_trees_are_capped_when_copied_for_grading(big_tree: dict[str, Any]) -> None:
    run = big_tree["runs"]["tree@checked"]
    assert run["status"] == "done", (
        f"20,000 files and a 1,500-deep tree made the run {run['status']} ({run['end_reason']}: "
        f"{run.get('void_reason')}) instead of a capped copy")
    checks = run["grade"].get("checks") or {}
    assert checks.get("files_ok") == 1.0 and checks.get("depth_ok") == 1.0, (
        f"the checks were handed the whole tree (ASSAY_COPY_MAX_FILES=5000, ASSAY_COPY_MAX_DEPTH=64): {checks}")
    assert re.search(r"(?i)too many|file count|too deep|depth|cap", json.dumps(run["grade"])), (
        "the grade does not record that the copy was capped")


def test_grading_copies_of_a_deep_tree_are_cleaned_up(big_tree: dict[str, Any]) -> None:
    assert not big_tree["left"], f"copies of the workspace left behind in /tmp after grading: {big_tree['left']}"


def test_deep_and_wide_trees_do_not_break_contract_grading(big_tree: dict[str, Any]) -> None:
    run = big_tree["runs"]["tree@answer"]
    assert run["status"] == "done" and run["passed"] is True, (
        f"the contract (answer.txt = 42 holds) was not graded: {run['status']} {run['end_reason']} "
        f"{run.get('void_reason')}")
    for task in ("checked", "answer"):
        other = big_tree["runs"][f"benign@{task}"]
        assert other["status"] == "done" and other["passed"] is True, other


# --------------------------------------------------------------------------- the file tools' own limits


def test_file_tools_cannot_write_past_one_gib() -> None:
    """edit_file with replace_all turns a 1.1 MB file into 1.1 GB: written by the harness (root),
    the sandbox's 1 GiB file-size limit does not apply unless the file tools enforce it."""
    with workdir("res-edit") as wd:
        answer_task(wd / "suite" / "answer")
        spec = script(wd, "amplify", [
            cmd("python3 -c \"open('seed.txt', 'w').write('x' * 1100000)\""),
            {"tool": "edit_file", "args": {"path": "seed.txt", "old_text": "x", "new_text": "y" * 1000,
                                           "replace_all": True}},
            cmd("ls -la seed.txt; echo 42 > answer.txt"),
            {"say": "done"}])
        r = cli("run", str(wd / "suite"), "--agent", spec, cwd=wd, timeout=180)
        assert not r.timed_out, r.tail()
        (run,) = report_json(wd)["runs"]
        outs = outputs(show(wd, run["run_id"])["events"])
        rd = run_dir_of(wd, run["run_id"])
        size = (rd / "workspace" / "seed.txt").stat().st_size if rd and (rd / "workspace" / "seed.txt").exists() else 0
        assert size <= GiB and outs[1].startswith("error"), (
            f"edit_file wrote a {size / GiB:.2f} GiB file into the workspace (tool said: {outs[1][:200]!r})")


BAD_TIMEOUTS = ["NaN", "Infinity", "-Infinity", "1e999"]


@pytest.fixture(scope="module")
def timeouts() -> Iterator[dict[str, str]]:
    with workdir("res-timeout") as wd:
        answer_task(wd / "suite" / "answer")
        # JSON proper has no NaN/Infinity, but Python's json (the script reader's) takes them
        text = "".join(f'{{"tool": "run_command", "args": {{"command": "sleep 0.2; echo ran-{i}", "timeout_s": {b}}}}}\n'
                       for i, b in enumerate(BAD_TIMEOUTS)) + '{"say": "done"}\n'
        (wd / "timeouts.jsonl").write_text(text)
        r = cli("run", str(wd / "suite"), "--agent", f"script:{wd / 'timeouts.jsonl'}", cwd=wd, timeout=120)
        assert not r.timed_out, r.tail()
        (run,) = report_json(wd)["runs"]
        yield dict(zip(BAD_TIMEOUTS, outputs(show(wd, run["run_id"])["events"]), strict=False))


@pytest.mark.parametrize("bad", BAD_TIMEOUTS)
def test_non_finite_timeout_is_refused(timeouts: dict[str, str], bad: str) -> None:
    got = timeouts.get(bad, "")
    assert got.startswith("error") and "timeout_s" in got and "ran-" not in got, (
        f"run_command with timeout_s={bad} was not refused: {got[:200]!r}")


# --------------------------------------------------------------------------- non-finite numbers in task files


def _native_yaml(folder: Path, text_fields: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "task.yaml").write_text(
        "title: t\ndomain: test\nprompt: Write 42 into answer.txt.\n" + text_fields)
    return folder / "task.yaml"


def _contract(extra: str) -> str:
    return ("contract:\n  - path: answer.txt\n    predicate: number\n    value: 42\n" + extra)


NONFINITE: dict[str, tuple[str, str]] = {
    # name: (how to write the task, the field the message must name)
    "budget_minutes_inf": ("native", _contract("") + "budget: {minutes: .inf}\n"),
    "budget_usd_nan": ("native", _contract("") + "budget: {usd: .nan}\n"),
    "contract_tolerance_inf": ("native", _contract("    tolerance: .inf\n")),
    "contract_value_nan": ("native", "contract:\n  - path: answer.txt\n    predicate: number\n    value: .nan\n"),
    "value_amount_inf": ("native", _contract("") + "value: {amount: .inf, currency: USD}\n"),
    "threshold_nan": ("native", _contract("") + "threshold: .nan\n"),
    "rubric_weight_nan": ("native", "rubric:\n  items:\n    - {id: a, text: says 42, weight: .nan, tag: FI}\n"),
    "scenario_baseline_nan": ("scenario", "nan"),
    "scenario_kpi_oracle_inf": ("scenario", "kpi_oracle"),
    "omb_weight_nan": ("omb", "NaN"),
    "omb_weight_inf": ("omb", "Infinity"),
    "healthbench_points_nan": ("healthbench", "NaN"),
    "healthbench_points_inf": ("healthbench", "-Infinity"),
}


def _write_nonfinite(suite: Path, kind: str, body: str) -> Path:
    if kind == "native":
        return _native_yaml(suite / "t", body)
    if kind == "scenario":
        case = labels_case(suite / "labels")
        text = (case / "task.yaml").read_text()
        if body == "nan":
            text = text.replace("baseline: 0", "baseline: .nan")
        else:
            text = text.replace("  baseline: 0", "  baseline: 0\n  variants:\n  - {name: base, kpi_oracle: .inf}")
        (case / "task.yaml").write_text(text)
        return case / "task.yaml"
    if kind == "omb":
        p = suite / "case.json"
        p.write_text('{"case_id": "c1", "prompt": "Say 42.", "rubrics": [{"rubric_number": 1, "rubric_detail": '
                     f'"Says 42.", "rubric_weight": {body}, "rubricLabel": "FI"}}, {{"rubric_number": 2, '
                     '"rubric_detail": "Is short.", "rubric_weight": 5, "rubricLabel": "IF"}]}')
        return p
    p = suite / "rows.jsonl"
    p.write_text('{"prompt": [{"role": "user", "content": "Say 42."}], "prompt_id": "hb-x", "rubrics": ['
                 f'{{"criterion": "Says 42.", "points": {body}, "tags": ["axis:accuracy"]}}, '
                 '{"criterion": "Is short.", "points": 3, "tags": ["axis:completeness"]}]}\n')
    return p


@pytest.mark.parametrize("name", list(NONFINITE))
def test_non_finite_numbers_in_task_files_are_refused(name: str) -> None:
    kind, body = NONFINITE[name]
    with workdir("res-nonfinite") as wd:
        suite = wd / "suite"
        suite.mkdir()
        file = _write_nonfinite(suite, kind, body)
        r = cli("validate", str(suite), cwd=wd, timeout=60)
        msg = r.stdout + r.stderr
        assert r.returncode == 2, f"{name}: `assay validate` accepted a non-finite number (exit {r.returncode}): {msg[-600:]}"
        assert "Traceback" not in msg and file.name in msg, msg


def test_labels_case_is_valid_as_written() -> None:
    """Control for the scenario cases above: the unmodified case validates."""
    with workdir("res-control") as wd:
        labels_case(wd / "labels")
        r = cli("validate", str(wd / "labels"), cwd=wd, timeout=60)
        assert r.returncode == 0, r.tail()


def test_nonfinite_native_control_is_valid() -> None:
    with workdir("res-control") as wd:
        _native_yaml(wd / "suite" / "t", _contract("    tolerance: 0.5\n") + "budget: {minutes: 5}\n")
        r = cli("validate", str(wd / "suite"), cwd=wd, timeout=60)
        assert r.returncode == 0, r.tail()

