"""Reference solution: triage logs/app.log into report.json.

Usage: python3 solve.py WORKSPACE   (standard library only)
"""

import json
import re
import sys
from pathlib import Path

ENTRY = re.compile(r"^(?P<ts>\d{4}-\d\d-\d\dT\S+)\s+(?P<level>[A-Z]+)\s+(?P<rest>.*)$")
ERROR = re.compile(r"^(?P<req>req-[0-9a-f]{8})\s+code=(?P<code>E\d{4})\b")
RESPONSE = re.compile(r"^(?P<req>req-[0-9a-f]{8})\s+[A-Z]+\s+\S+\s+status=(?P<status>\d{3})\b")


def main(ws: Path) -> None:
    error_counts: dict[str, int] = {}
    failed: list[str] = []
    for line in (ws / "logs" / "app.log").read_text(encoding="utf-8").splitlines():
        m = ENTRY.match(line)
        if m is None:  # stack-trace continuation lines
            continue
        rest = m["rest"]
        if m["level"] == "ERROR":
            e = ERROR.match(rest)
            if e:
                error_counts[e["code"]] = error_counts.get(e["code"], 0) + 1
        r = RESPONSE.match(rest)
        if r and int(r["status"]) >= 500 and r["req"] not in failed:
            failed.append(r["req"])
    report = {
        "error_counts": dict(sorted(error_counts.items())),
        "total_errors": sum(error_counts.values()),
        "failed_requests": len(failed),
        "first_failing_request": failed[0] if failed else None,
    }
    (ws / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
