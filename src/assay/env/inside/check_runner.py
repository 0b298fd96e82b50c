"""The runner of a contract task's automated checks, inside a fresh sandbox.

`python3 -I -B runner.py MODE CHECKS_DIR WORKSPACE MARKER` (MODE: darebench, native or
predicate) loads the task's `checks.py` from CHECKS_DIR (bound read-only), calls its
`grade(...)` (or a predicate function) on the workspace copy, and prints the JSON result
behind MARKER, a per-run random string, so nothing the checks print can pose as the result
(`assay.grade.contract_grading` reads it). A crash prints the traceback and exits 3.
"""
from __future__ import annotations

import json
import sys
import traceback
from typing import Any


def main() -> None:
    mode, checks_dir, workspace, marker = sys.argv[1:5]
    sys.argv = [checks_dir + "/checks.py"]
    with open(checks_dir + "/checks.py", encoding="utf-8") as f:
        code = f.read()
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


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()
        sys.exit(3)
