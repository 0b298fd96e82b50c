#!/usr/bin/env python3
"""`bin/ask` and `bin/pilot`: the agent's clients of the stakeholder service.

Installed into each scenario workspace (`bin/ask`, and `bin/pilot` when the scenario has a
pilot, the same file with `MODE` set), run by the sandbox's python. Both speak the JSON-lines
protocol of `assay.people.server` over the Unix socket `/run/assay/ask.sock` (override with
`ASSAY_ASK_SOCKET`). The command line is upstream FDE-Gym's. Bad arguments print the usage
and exit 2; a refusal from the service is printed to stderr with exit 1. A service that is
busy (a run may hold only so many connections at once) is asked again for about ten seconds
before its refusal is printed.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import time
from typing import Any, NoReturn

MODE = "ask"  # "pilot" in bin/pilot

ASK_HELP = """Message a customer stakeholder.

    ask --who                      list the people you can reach
    ask <id> "your question"       send one question, get the reply
    ask --now                      the date and time at the customer's site, where there is one
    ask --wait 2d                  let time pass at the customer's site (hours "6h" or days "2d")
    ask --inbox                    read what people at the customer have sent you

Ask one specific thing at a time; that is how
people here answer best.
"""
ASK_USAGE = """usage: ask --who
       ask <id> "your question"
       ask --now
       ask --wait 6h | ask --wait 2d
       ask --inbox"""

PILOT_HELP = """Put the current contents of system/ into the customer's trial environment for one day.

    pilot          run one trial day and print what the customer's people report back
    pilot DAY      the same, checking that DAY is the next trial day

The trial runs whatever is in system/ right now, on that day's real traffic.
"""
PILOT_USAGE = "usage: pilot [DAY]"

SOCKET = os.environ.get("ASSAY_ASK_SOCKET") or "/run/assay/ask.sock"


BUSY_RETRIES = 20  # a busy service (too many connections open at once) is asked again ...
BUSY_PAUSE_S = 0.5  # ... after this pause, for about ten seconds in all


def exchange(req: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One request, one reply object (exit 1 when the service is away or its reply unreadable)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(SOCKET)
        # ASCII on the wire: text that is not valid UTF-8 (a non-UTF-8 argument) travels as
        # JSON escapes, which the service records escaped.
        s.sendall((json.dumps(req) + "\n").encode("ascii"))
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while True:
            b = s.recv(65536)
            if not b:
                break
            chunks.append(b)
    except OSError as e:
        sys.stderr.write(f"the stakeholder service cannot be reached ({e})\n")
        sys.exit(1)
    finally:
        s.close()
    try:
        r = json.loads(b"".join(chunks).decode("utf-8").splitlines()[0])
    except (ValueError, IndexError):
        r = None
    if not isinstance(r, dict):
        sys.stderr.write("the stakeholder service sent an unreadable reply\n")
        sys.exit(1)
    return r


def call(req: dict[str, Any], timeout: float = 1800) -> str:
    """Send one request, return the reply's text (exit 1 when the service refuses or is away)."""
    r = exchange(req, timeout)
    for _ in range(BUSY_RETRIES):
        if not r.get("busy"):
            break
        time.sleep(BUSY_PAUSE_S)
        r = exchange(req, timeout)
    if not r.get("ok"):
        sys.stderr.write(str(r.get("error") or "request refused") + "\n")
        sys.exit(1)
    return str(r.get("text", ""))


def usage(text: str) -> NoReturn:
    sys.stderr.write(text + "\n")
    sys.exit(2)


def ask(args: list[str]) -> int:
    if args and args[0] in ("-h", "--help"):
        print(ASK_HELP)
        return 0
    if not args:
        usage(ASK_USAGE)
    op = args[0]
    if op in ("--who", "--now", "--inbox"):
        if len(args) != 1:
            usage(ASK_USAGE)
        print(call({"op": op[2:]}))
        return 0
    if op == "--wait":
        spec = (args[1] if len(args) == 2 else "").strip().lower()
        try:
            n = float(spec[:-1])
            if spec[-1] not in "mhd" or n < 0:
                raise ValueError
        except (ValueError, IndexError):
            usage("usage: ask --wait 6h | ask --wait 2d")
        print(call({"op": "wait", "duration": spec}))
        return 0
    if op.startswith("-"):
        usage(ASK_USAGE)
    question = " ".join(args[1:]).strip()
    if not question:
        usage(ASK_USAGE)
    print(call({"op": "ask", "to": op, "question": question}))
    return 0


def pilot(args: list[str]) -> int:
    if args and args[0] in ("-h", "--help"):
        print(PILOT_HELP)
        return 0
    if len(args) > 1:
        usage(PILOT_USAGE)
    req: dict[str, Any] = {"op": "pilot"}
    if args:
        try:
            day = int(args[0])
        except ValueError:
            usage(PILOT_USAGE)
        if day < 1:
            usage(PILOT_USAGE)
        req["day"] = day
    print(call(req))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    return pilot(args) if MODE == "pilot" else ask(args)


if __name__ == "__main__":
    sys.exit(main())
