"""`bin/ask` and `bin/pilot`: the stdlib clients the agent runs inside the sandbox.

Both speak the JSON-lines protocol of `assay.env.stakeholder_server` over the Unix socket
`/run/assay/ask.sock` (override with the environment variable `ASSAY_ASK_SOCKET`). The CLI is
upstream FDE-Gym's: `bin/ask --who`, `bin/ask ID "message"`, `bin/ask --now`,
`bin/ask --wait 6h|2d`, `bin/ask --inbox`; `bin/pilot [DAY]`. Bad arguments print the usage
and exit 2; a refusal from the service is printed to stderr with exit 1.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["ASK_SCRIPT", "DEFAULT_SOCKET", "PILOT_SCRIPT", "install_clients"]

DEFAULT_SOCKET = "/run/assay/ask.sock"

_COMMON = r'''
import json
import os
import socket
import sys

SOCKET = os.environ.get("ASSAY_ASK_SOCKET") or "/run/assay/ask.sock"


def call(req, timeout=1800):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(SOCKET)
        s.sendall((json.dumps(req, ensure_ascii=False) + "\n").encode("utf-8"))
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while True:
            b = s.recv(65536)
            if not b:
                break
            chunks.append(b)
    except OSError as e:
        sys.stderr.write("the stakeholder service cannot be reached (%s)\n" % e)
        sys.exit(1)
    finally:
        s.close()
    try:
        r = json.loads(b"".join(chunks).decode("utf-8").splitlines()[0])
    except (ValueError, IndexError):
        sys.stderr.write("the stakeholder service sent an unreadable reply\n")
        sys.exit(1)
    if not r.get("ok"):
        sys.stderr.write(str(r.get("error") or "request refused") + "\n")
        sys.exit(1)
    return r.get("text", "")


def usage():
    sys.stderr.write(USAGE + "\n")
    sys.exit(2)
'''

ASK_SCRIPT = '''#!/usr/bin/env python3
"""Message a customer stakeholder.

    ask --who                      list the people you can reach
    ask <id> "your question"       send one question, get the reply
    ask --now                      the date and time at the customer's site, where there is one
    ask --wait 2d                  let time pass at the customer's site (hours "6h" or days "2d")
    ask --inbox                    read what people at the customer have sent you

Ask one specific thing at a time; that is how
people here answer best.
"""
''' + _COMMON + r'''
USAGE = """usage: ask --who
       ask <id> "your question"
       ask --now
       ask --wait 6h | ask --wait 2d
       ask --inbox"""


def main():
    args = sys.argv[1:]
    if args and args[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if not args:
        usage()
    op = args[0]
    if op in ("--who", "--now", "--inbox"):
        if len(args) != 1:
            usage()
        print(call({"op": op[2:]}))
        return 0
    if op == "--wait":
        spec = (args[1] if len(args) == 2 else "").strip().lower()
        try:
            n = float(spec[:-1])
            if spec[-1] not in "mhd" or n < 0:
                raise ValueError
        except (ValueError, IndexError):
            sys.stderr.write("usage: ask --wait 6h | ask --wait 2d\n")
            sys.exit(2)
        print(call({"op": "wait", "duration": spec}))
        return 0
    if op.startswith("-"):
        usage()
    question = " ".join(args[1:]).strip()
    if not question:
        usage()
    print(call({"op": "ask", "to": op, "question": question}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''

PILOT_SCRIPT = '''#!/usr/bin/env python3
"""Put the current contents of system/ into the customer's trial environment for one day.

    pilot          run one trial day and print what the customer's people report back
    pilot DAY      the same, checking that DAY is the next trial day

The trial runs whatever is in system/ right now, on that day's real traffic.
"""
''' + _COMMON + r'''
USAGE = "usage: pilot [DAY]"


def main():
    args = sys.argv[1:]
    if args and args[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if len(args) > 1:
        usage()
    req = {"op": "pilot"}
    if args:
        try:
            req["day"] = int(args[0])
        except ValueError:
            usage()
        if req["day"] < 1:
            usage()
    print(call(req))
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


def install_clients(workspace: Path, *, pilot: bool) -> None:
    """Write bin/ask (and bin/pilot when the scenario has a pilot) into a workspace, mode 0755."""
    bindir = Path(workspace) / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    scripts = [("ask", ASK_SCRIPT)] + ([("pilot", PILOT_SCRIPT)] if pilot else [])
    for name, text in scripts:
        path = bindir / name
        if path.is_symlink() or (path.exists() and not path.is_file()):
            raise FileExistsError(f"{path} exists and is not a regular file")
        tmp = bindir / f".{name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)
