"""Grading code is out of reach of the code it grades (issue 25, part 5).

Checks that run the agent's program run it in their own sandbox, as the same uid: that
program must not read the checks' source (the expected values), the runner's memory, its
command line or its standard input, nor learn the marker that frames the result line. A
scenario grader that starts the delivered program without `cwd=` must not start it in the
case folder (held-out labels), and root must never follow a link the delivered program makes
while the grader reads its output. Each attack drives `assay run` and reads the report.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.security._support import bwrap_ok, cli, report_json, runs_by_name, script, workdir, write_yaml

pytestmark = [pytest.mark.skipif(not bwrap_ok(), reason="bubblewrap is not installed"), pytest.mark.slow]

EXPECTED = "zebra-7f3a"

CHECKS = f'''\
import subprocess

EXPECTED = "{EXPECTED}"


def grade(workspace, final_message):
    """Runs the agent's solve.py and compares what it prints with the expected word."""
    p = subprocess.run(["python3", "solve.py"], cwd=workspace, capture_output=True, text=True, timeout=20)
    out = p.stdout.strip()
    return {{"correct": 1.0 if out.splitlines()[-1:] == [EXPECTED] else 0.0, "saw": out[-600:]}}
'''

THIEF = r'''
import glob, os, re

found = []
def grab(path, binary=False):
    try:
        with open(path, "rb") as f:
            found.append(f.read(2_000_000).decode("utf-8", "replace"))
    except Exception as e:
        found.append(f"<{path}: {type(e).__name__}>")

for path in glob.glob("/run/assay/checks/*") + glob.glob("/run/assay/**/*", recursive=True):
    grab(path)
pp = os.getppid()
for name in ("cmdline", "environ", "fd/0", "fd/3", "cwd/checks.py"):
    grab(f"/proc/{pp}/{name}")
try:  # the runner's memory, region by region
    with open(f"/proc/{pp}/maps") as maps, open(f"/proc/{pp}/mem", "rb") as mem:
        for line in maps:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if "rw" in line.split()[1] and hi - lo < 64_000_000:
                try:
                    mem.seek(lo)
                    found.append(mem.read(hi - lo).decode("latin-1"))
                except OSError:
                    pass
except Exception as e:
    found.append(f"<mem: {type(e).__name__}>")
blob = "\n".join(found)
m = re.search(r'EXPECTED = "([\w-]+)"', blob)
marker = re.search(r"@@assay-result-[0-9a-f]+@@", blob)
print("marker:" + (marker.group(0) if marker else "none"))
print(m.group(1) if m else "unknown")
'''


@pytest.fixture(scope="module")
def thief() -> Iterator[dict[str, Any]]:
    with workdir("reach-checks") as wd:
        suite = write_yaml(wd / "suite" / "word", {
            "title": "print the word", "domain": "test", "execution": "multi-step-with-tools",
            "prompt": "Write solve.py that prints the secret word.",
            "grading": {"type": "automated", "checks": "checks.py"}},
            {"checks.py": CHECKS, "workspace/README.md": "hello\n"})
        agents = {
            "thief": [{"tool": "write_file", "args": {"path": "solve.py", "content": THIEF}}, {"say": "done"}],
            "knower": [{"tool": "write_file", "args": {"path": "solve.py", "content": f"print({EXPECTED!r})\n"}},
                       {"say": "done"}],
        }
        args = ["run", str(suite), "-q"]
        for name, lines in agents.items():
            args += ["--agent", script(wd, name, lines)]
        r = cli(*args, cwd=wd, timeout=120)
        assert not r.timed_out and "Traceback" not in r.stderr, r.tail()
        yield {"cli": r, "runs": runs_by_name(report_json(wd))}


def test_code_the_checks_start_cannot_read_the_expected_values(thief: dict[str, Any]) -> None:
    run = thief["runs"]["thief"]
    assert run["status"] == "done" and run["score"] == 0.0, run
    saw = run["grade"]["checks"]["saw"]
    assert EXPECTED not in saw and saw.endswith("unknown"), saw


def test_code_the_checks_start_cannot_learn_the_result_marker(thief: dict[str, Any]) -> None:
    saw = thief["runs"]["thief"]["grade"]["checks"]["saw"]
    assert "marker:none" in saw, saw


def test_the_checks_still_grade_an_honest_program(thief: dict[str, Any]) -> None:
    assert thief["runs"]["knower"]["score"] == 1.0, thief["runs"]["knower"]


# --------------------------------------------------------------------------- scenario graders

NO_CWD_GRADER = '''\
"""Runs the delivered predict.py without cwd= (so in this grader's own folder, the case's)."""
import json
import subprocess
import sys
from pathlib import Path


def grade(ws, ctx):
    labels = json.loads((Path(ctx["held_out"]) / "labels.json").read_text())
    p = subprocess.run([sys.executable, str(Path(ws) / "predict.py")], capture_output=True, text=True, timeout=30)
    try:
        preds = json.loads(p.stdout)
    except ValueError:
        preds = []
    hits = sum(1 for a, b in zip(preds, labels) if a == b)
    return {"kpi": hits / len(labels), "kpi_oracle": 1.0, "incidents": [], "summary": f"{hits} right"}
'''

CWD_THIEF = '''\
import json, os
try:
    print(json.dumps(json.load(open("held_out/labels.json"))))
except OSError as e:
    print(json.dumps([]))
'''

RACE_GRADER = '''\
"""Starts the delivered server, reads its predictions.json while it still runs (as some do)."""
import json
import subprocess
import sys
import time
from pathlib import Path


def grade(ws, ctx):
    labels = json.loads((Path(ctx["held_out"]) / "labels.json").read_text())
    p = subprocess.Popen([sys.executable, str(Path(ws) / "serve.py")], cwd=str(ws))
    try:
        out = Path(ws) / "predictions.json"
        for _ in range(100):
            if out.is_symlink() or out.exists():
                break
            time.sleep(0.1)
        time.sleep(1.0)
        raw = out.read_text(errors="replace")
    finally:
        p.kill()
        p.wait()
    try:
        preds = json.loads(raw)
    except ValueError:
        return {"kpi": 0.0, "kpi_oracle": 1.0, "incidents": [], "summary": "not JSON: " + raw[:200]}
    hits = sum(1 for a, b in zip(preds, labels) if a == b)
    return {"kpi": hits / len(labels), "kpi_oracle": 1.0, "incidents": [], "summary": f"{hits} right"}
'''

SWAPPER = '''\
import json, os, time
json.dump(["odd"] * 10, open("predictions.json", "w"))
time.sleep(0.3)
os.remove("predictions.json")
os.symlink(__SECRET__, "predictions.json")
time.sleep(60)
'''


@pytest.fixture(scope="module")
def graders() -> Iterator[dict[str, Any]]:
    from tests.security._cases import labels_case
    from tests.security._support import host_secret, leaks

    with workdir("reach-graders") as wd, host_secret() as secret:
        nocwd = labels_case(wd / "nocwd")
        (nocwd / "grade.py").write_text(NO_CWD_GRADER)
        race = labels_case(wd / "race")
        (race / "grade.py").write_text(RACE_GRADER)
        agents = {
            "cwd_thief": [{"tool": "write_file", "args": {"path": "predict.py", "content": CWD_THIEF}},
                          {"tool": "write_file", "args": {"path": "serve.py", "content": "import time\n"}},
                          {"say": "done"}],
            "swapper": [{"tool": "write_file", "args": {"path": "serve.py",
                                                         "content": SWAPPER.replace("__SECRET__",
                                                                                    repr(str(secret.file)))}},
                        {"tool": "write_file", "args": {"path": "predict.py", "content": "print('[]')\n"}},
                        {"say": "done"}],
        }
        args = ["run", str(nocwd), str(race), "-q", "--concurrency", "2"]
        for name, lines in agents.items():
            args += ["--agent", script(wd, name, lines)]
        r = cli(*args, cwd=wd, timeout=240)
        assert not r.timed_out, r.tail()
        yield {"cli": r, "runs": runs_by_name(report_json(wd)), "leaks": leaks(wd, secret.needles())}


def test_delivered_code_started_without_cwd_does_not_see_the_case_folder(graders: dict[str, Any]) -> None:
    run = graders["runs"]["cwd_thief@nocwd/base"]
    assert run["status"] == "done" and run["grade"]["kpi"] == 0.0, run


def test_root_never_follows_a_link_the_running_delivered_code_swapped_in(graders: dict[str, Any]) -> None:
    run = graders["runs"]["swapper@race/base"]
    assert run["status"] == "done" and run["score"] == 0.0 and run["grade"]["solved"] is False, run
    assert any(f["part"] == "kpi" and "Too many levels of symbolic links" in f["reason"]
               for f in run["grade"]["faults"]), run["grade"]
    assert graders["leaks"] == [], "the root-only file's content reached the store"


SETSID_GRADER = '''\
"""Leaves a child behind in a session of its own, then answers."""
import subprocess
import sys
from pathlib import Path

MARKS = Path(__MARKS__)


def grade(ws, ctx):
    loop = "import os, time\\nwhile True:\\n    time.sleep(0.2)\\n"
    p = subprocess.Popen(["/usr/bin/python3", "-c", loop], start_new_session=True)
    (MARKS / "child.pid").write_text(str(p.pid))
    return {"kpi": 0.0, "kpi_oracle": 1.0, "incidents": [], "summary": "left a child"}
'''


def test_a_graders_setsid_child_is_killed_with_the_grade() -> None:
    import os
    import time

    from tests.security._cases import labels_case

    with workdir("reach-setsid") as wd:
        marks = wd / "marks"
        marks.mkdir()
        case = labels_case(wd / "setsid")
        (case / "grade.py").write_text(SETSID_GRADER.replace("__MARKS__", repr(str(marks))))
        r = cli("run", str(case), "--agent", "noop", "-q", cwd=wd, timeout=120)
        assert not r.timed_out, r.tail()
        pid = int((marks / "child.pid").read_text())
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}") and _state(pid) not in ("Z", "X"):
            time.sleep(0.1)
        assert not os.path.exists(f"/proc/{pid}") or _state(pid) in ("Z", "X"), (
            "the grader's setsid child outlived its grade")


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0].decode()
    except OSError:
        return "X"
