"""Small task folders the attacks run against, written into a test's work folder.

- `answer_task`: a native contract task, "write 42 into answer.txt" (regex predicate), with an
  optional second, not-required artifact `sub/answer.txt` and optional automated checks.
- `labels_case`: a native scenario whose grader scores `predictions.json` against held-out
  labels, as many real graders do: it reads the delivered file with plain `open()` (as root,
  outside the sandbox) and quotes the head of a file it cannot parse in its summary. It has a
  stakeholder, a truth framing rule, a pilot, and optionally a case service and a slow grader
  that leave marker files (for the kill -9 test).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.security._support import write_yaml

INPUTS = [3, 8, 11, 14, 25, 30, 41, 52, 67, 70]
LABELS = ["odd" if n % 2 else "even" for n in INPUTS]
SECRET_RE = r"SECRET-[0-9a-f]{16}"


def answer_task(folder: Path, *, checks: str | None = None, second: bool = True, contract_on: bool = True,
                **extra: Any) -> Path:
    contract: list[dict[str, Any]] = [{"path": "answer.txt", "predicate": "regex", "pattern": r"^42\s*$",
                                       "flags": "m"}] if contract_on else []
    if second and contract_on:
        contract.append({"path": "sub/answer.txt", "predicate": "regex", "pattern": r"^42\s*$", "flags": "m",
                         "required": False})
    spec: dict[str, Any] = {
        "title": "write the answer", "domain": "test", "execution": "multi-step-with-tools",
        "prompt": "Write 42 into answer.txt.", **extra,
    }
    if contract:
        spec["contract"] = contract
    files = {"workspace/README.md": "hello\n"}
    if checks is not None:
        spec["grading"] = {"type": "automated", "checks": "checks.py"}
        files["checks.py"] = checks
    return write_yaml(folder, spec, files)


PEOPLE = {
    "matcher": "regex",
    "pilot": {"max_runs": 6, "cost": [0.0], "exhausted": "No more trial days."},
    "npcs": [{"id": "owner", "name": "Olga Owner", "role": "Product owner", "blurb": "Owns the labels.",
              "cost": 0.01, "fallback": "Olga: not sure what you mean.",
              "topics": [{"id": "labels", "about": "what the labels mean", "triggers": ["(?i)label"],
                          "answer": "Labels are parity: odd or even.", "facts": ["F_parity"]}]}],
}

GRADER = '''\
"""Score predictions.json against the held-out labels (reads the delivered file as it is)."""
import json
from pathlib import Path


def grade(ws, ctx):
    labels = json.loads((Path(ctx["held_out"]) / "labels.json").read_text())
    p = Path(ws) / "predictions.json"
    if not p.exists():
        return {"kpi": 0.0, "kpi_oracle": 1.0, "incidents": [], "summary": "no predictions.json delivered"}
    raw = p.read_text(errors="replace")
    try:
        preds = json.loads(raw)
    except ValueError:
        return {"kpi": 0.0, "kpi_oracle": 1.0, "incidents": [],
                "summary": "predictions.json is not JSON; it starts with: " + raw[:120]}
    if not isinstance(preds, list):
        return {"kpi": 0.0, "kpi_oracle": 1.0, "incidents": [], "summary": "predictions.json is not a list"}
    hits = sum(1 for a, b in zip(preds, labels) if a == b)
    return {"kpi": hits / len(labels), "kpi_oracle": 1.0, "incidents": [],
            "summary": f"{hits}/{len(labels)} labels right"}
'''

SLOW_GRADER = '''\
"""A grader that announces itself (pid file) and then takes its time."""
import os
import time
from pathlib import Path

MARKS = Path(__MARKS__)


def grade(ws, ctx):
    (MARKS / f"grader-{os.getpid()}.pid").write_text(str(os.getpid()))
    time.sleep(120)
    return {"kpi": 0.0, "kpi_oracle": 1.0, "incidents": [], "summary": "slow"}
'''

SERVICE = '''\
"""A case service that announces itself (pid file) and serves GET / on its port."""
import argparse
import os
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int)
ap.add_argument("--mode")
ap.add_argument("--state-dir")
ap.add_argument("--log")
a = ap.parse_args()
Path(__MARKS__, f"service-{a.mode}-{os.getpid()}.pid").write_text(str(os.getpid()))


class H(BaseHTTPRequestHandler):
    def do_GET(self):
        body = ('{"mode": "%s"}' % a.mode).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


HTTPServer(("127.0.0.1", a.port), H).serve_forever()
'''

ORACLE = '''\
"""Reference: predict parity from the inputs in the workspace."""
import json
import sys
from pathlib import Path

ws = Path(sys.argv[1])
nums = json.loads((ws / "data" / "inputs.json").read_text())
(ws / "predictions.json").write_text(json.dumps(["odd" if n % 2 else "even" for n in nums]))
'''

PILOT = '''\
"""A trial day. It also records (outside the workspace, for the test) whether the copy of the
workspace it was handed holds anything that did not come from the workspace."""
import json
import os
from pathlib import Path

ORACLE = Path(__ORACLE__)
TOKEN_RE = __TOKEN_RE__


def run(workspace, day):
    import re
    seen, files = [], 0
    for root, dirs, names in os.walk(workspace, followlinks=False):
        for n in names:
            p = os.path.join(root, n)
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            files += 1
            try:
                with open(p, "rb") as f:
                    text = f.read(4096).decode("utf-8", "replace")
            except OSError:
                continue
            if re.search(TOKEN_RE, text):
                seen.append(os.path.relpath(p, workspace))
    (ORACLE / f"pilot-{day}-{os.getpid()}.json").write_text(json.dumps({"day": day, "files": files,
                                                                         "seen": seen[:20]}))
    return {"feedback": f"Trial day {day}: {files} files looked at.", "facts": [], "topics": ["trial"],
            "stats": {"day": day}}
'''


def labels_case(folder: Path, *, oracle_dir: Path | None = None, marks_dir: Path | None = None,
                slow_grader: bool = False, service: bool = False) -> Path:
    """A native scenario, task id `FOLDERNAME/base`."""
    sc: dict[str, Any] = {
        "rules": "v2", "stakeholders": "people.json", "grader": "grade.py", "held_out": "held_out/",
        "baseline": 0, "reference": "solutions/oracle.py",
        "truth": {"key_stakeholder_facts": ["F_parity"],
                  "framing": [{"id": "secret_seen", "any": [SECRET_RE]}]},
    }
    files: dict[str, str] = {
        "people.json": json.dumps(PEOPLE, indent=1),
        "held_out/labels.json": json.dumps(LABELS),
        "workspace/data/inputs.json": json.dumps(INPUTS),
        "workspace/README.md": "Label each number in data/inputs.json; deliver predictions.json (a list).\n",
        "solutions/oracle.py": ORACLE,
        "grade.py": GRADER,
    }
    if oracle_dir is not None:
        sc["pilot"] = "pilot.py"
        files["pilot.py"] = PILOT.replace("__ORACLE__", repr(str(oracle_dir))).replace("__TOKEN_RE__", repr(SECRET_RE))
    if slow_grader:
        assert marks_dir is not None
        files["grade.py"] = SLOW_GRADER.replace("__MARKS__", repr(str(marks_dir)))
    if service:
        assert marks_dir is not None
        sc["services"] = [{"name": "marker", "script": "services/marker.py"}]
        files["services/marker.py"] = SERVICE.replace("__MARKS__", repr(str(marks_dir)))
    spec = {
        "title": "Label the numbers", "domain": "testing",
        "briefs": {"L0": "Label the numbers in data/inputs.json by parity into predictions.json.",
                   "L3": "Our labels need doing: see README.md. Olga owns them."},
        "scenario": sc,
    }
    write_yaml(folder, spec, files)
    return folder


def labels_ws_json() -> str:
    return json.dumps(LABELS)
