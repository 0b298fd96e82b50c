"""The runner of a contract task's automated checks, inside a fresh sandbox.

`python3 -I -B runner.py MODE CHECKS_DIR WORKSPACE` (MODE: darebench, native or predicate)
reads `{"code": ..., "marker": ...}` from its standard input: the task's checks code and a
per-run random string. It calls the code's `grade(...)` (or a predicate function) on the
workspace copy, reading its inputs (transcript, final message, predicate) from CHECKS_DIR
(bound read-only), and prints the JSON result behind the marker, so nothing the checks print
can pose as the result (`assay.grade.contract_checks` reads it). A crash prints the
traceback and exits 3.

Checks often run what the agent wrote (a `solve.py`), as this same uid in this same sandbox.
That code must not read the checks' expected values, nor forge the result line: so the code
and the marker never touch a file or the command line (both of which it could read), and
before the checks run the process makes itself non-dumpable (`PR_SET_DUMPABLE` 0), which
closes its /proc/PID/mem, environ and fd entries to other processes of its uid. The result is
the only marker line the harness accepts (a second one is a fault: score 0), and the process
ends the moment it is written (`os._exit`), so code the checks *import* from the workspace
cannot add a later one at exit. Such code runs inside this process, though, and could still
rewrite the runner itself: checks should start the agent's code as a program (docs/SECURITY.md
G12).
"""
from __future__ import annotations

import ctypes
import json
import os
import sys
import traceback
from typing import Any

PR_SET_DUMPABLE = 4


def _undumpable() -> None:
    """No other process of this uid may read this one's memory or descriptors from /proc."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def main() -> None:
    mode, checks_dir, workspace = sys.argv[1:4]
    given = json.loads(sys.stdin.read())
    code, marker = given["code"], given["marker"]
    del given
    _undumpable()
    sys.argv = [checks_dir + "/checks.py"]
    ns: dict[str, Any] = {"__name__": "assay_checks", "__file__": checks_dir + "/checks.py", "__builtins__": __builtins__}
    exec(compile(code, "checks.py", "exec"), ns)
    if mode == "darebench":
        with open(checks_dir + "/transcript.jsonl", encoding="utf-8") as f:
            transcript = [json.loads(line) for line in f if line.strip()]
        result = ns["grade"](transcript, workspace)
    elif mode == "native":
        with open(checks_dir + "/final_message.txt", encoding="utf-8") as f:
            final = f.read()
        result = ns["grade"](workspace, final)
    else:
        with open(checks_dir + "/predicate.json", encoding="utf-8") as f:
            spec = json.load(f)
        fn = ns.get(spec["function"])
        if not callable(fn):
            raise SystemExit("checks code defines no function {!r}".format(spec["function"]))
        result = fn(workspace.rstrip("/") + "/" + spec["path"])
    sys.stdout.flush()
    sys.stderr.flush()
    sys.stdout.write("\n" + marker + json.dumps(result, default=repr) + "\n")
    sys.stdout.flush()
    os._exit(0)  # nothing runs after the result: no atexit handler or finaliser of code the checks imported


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()
        sys.exit(3)
