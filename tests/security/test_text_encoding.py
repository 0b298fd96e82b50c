"""Category 6: text that cannot break the store.

Lone surrogates and non-UTF-8 file names anywhere (the final answer, a tool argument, a file
name, a command, a stakeholder message) must be stored escaped: `assay run` exits 0/1 (never a
traceback), `assay report` and `assay show` work, and re-running the campaign (resume) works.

Script files carry lone surrogates as JSON escapes ("\\ud800"), which the script reader's
`json.loads` turns into real lone surrogates, exactly as a model client's JSON decoder would.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.security._cases import answer_task, labels_case
from tests.security._support import bwrap_ok, cli, report_json, show, workdir

pytestmark = pytest.mark.skipif(not bwrap_ok(), reason="bubblewrap is not installed")

MAKE_BAD_NAME = "python3 -c \"open(bytes([255, 254]) + b'.txt', 'w').write('hi')\"; echo 42 > answer.txt"
ASK_PY = r"""import socket, sys
payloads = {
    # a JSON escape that decodes to a lone surrogate
    "surrogate": b'{"op": "ask", "to": "owner", "question": "label \\ud800 x"}\n',
    # bytes that are not UTF-8 at all
    "raw": b'{"op": "ask", "to": "owner", "question": "label \xff\xfe"}\n',
}
s = socket.socket(socket.AF_UNIX)
s.connect("/run/assay/ask.sock")
s.sendall(payloads[sys.argv[1]])
s.shutdown(socket.SHUT_WR)
print(s.recv(65536))
"""


def _ask(which: str) -> str:
    return (json.dumps({"tool": "write_file", "args": {"path": "ask.py", "content": ASK_PY}}) + "\n"
            + json.dumps({"tool": "run_command", "args": {"command": f"python3 ask.py {which}"}}) + "\n"
            + '{"say": "done"}\n')


# name: (task kind, script lines as raw JSONL text)
ATTACKS: dict[str, tuple[str, str]] = {
    "say_lone_surrogate": ("contract", '{"say": "the answer \\ud800 is 42"}\n'),
    "write_path_surrogate": ("contract", '{"tool": "write_file", "args": {"path": "a\\udcff.txt", "content": "x"}}\n'
                                         '{"tool": "write_file", "args": {"path": "answer.txt", "content": "42"}}\n'
                                         '{"say": "done"}\n'),
    "write_content_surrogate": ("contract", '{"tool": "write_file", "args": {"path": "answer.txt", '
                                            '"content": "42\\n\\udfff\\n"}}\n{"say": "done"}\n'),
    "command_surrogate": ("contract", '{"tool": "run_command", "args": {"command": "echo \\udc80; echo 42 > answer.txt"}}\n'
                                      '{"say": "done"}\n'),
    "read_path_surrogate": ("contract", '{"tool": "read_file", "args": {"path": "\\ud800.txt"}}\n'
                                        '{"tool": "run_command", "args": {"command": "echo 42 > answer.txt"}}\n'
                                        '{"say": "done"}\n'),
    "nonutf8_file_name": ("contract", json.dumps({"tool": "run_command", "args": {"command": MAKE_BAD_NAME}}) + "\n"
                                      + '{"tool": "list_files", "args": {"path": "."}}\n'
                                      + '{"tool": "read_file", "args": {"path": "\\udcff\\udcfe.txt"}}\n'
                                      + '{"say": "done"}\n'),
    "nonutf8_output": ("contract", '{"tool": "run_command", "args": {"command": "printf \'\\\\377\\\\376 bytes\\\\n\'; '
                                   'echo 42 > answer.txt"}}\n{"say": "done"}\n'),
    "ask_lone_surrogate": ("scenario", _ask("surrogate")),
    "ask_raw_bytes": ("scenario", _ask("raw")),
}


def _no_traceback(r: Any, what: str) -> None:
    assert not r.timed_out, f"{what} hung: " + r.tail()
    assert "Traceback" not in r.stderr + r.stdout, f"{what} printed a traceback: " + r.tail(2500)


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_bad_text_is_stored_escaped(attack: str) -> None:
    kind, lines = ATTACKS[attack]
    with workdir("text") as wd:
        task = answer_task(wd / "suite" / "answer") if kind == "contract" else labels_case(wd / "suite" / "labels")
        spec_file = wd / f"{attack}.jsonl"
        spec_file.write_text(lines)
        json_lines = [json.loads(x) for x in lines.splitlines() if x.strip()]  # the script is valid JSONL
        assert json_lines
        args = ["run", str(task), "--agent", f"script:{spec_file}"]
        r = cli(*args, cwd=wd, timeout=120)
        _no_traceback(r, "assay run")
        assert r.returncode in (0, 1), r.tail()
        rep = report_json(wd)
        assert len(rep["runs"]) == 1, f"the run was not stored: {rep['runs']}; " + r.tail(800)
        (run,) = rep["runs"]
        shown = show(wd, run["run_id"])
        assert shown["events"], "no transcript stored"
        if attack == "say_lone_surrogate":
            final = [e for e in shown["events"] if e["kind"] == "assistant"][-1]["data"]["content"]
            assert final.startswith("the answer ") and final.endswith(" is 42"), final
        # resume: the same command again finds the run done and exits cleanly
        again = cli(*args, cwd=wd, timeout=120)
        _no_traceback(again, "the re-run (resume)")
        assert again.returncode in (0, 1), again.tail()
        assert len(report_json(wd)["runs"]) == 1


def test_report_formats_survive_bad_text() -> None:
    """Every report format (JSON, CSV, HTML) over a run whose answer holds a lone surrogate."""
    with workdir("text-report") as wd:
        task = answer_task(wd / "suite" / "answer")
        (wd / "s.jsonl").write_text('{"tool": "write_file", "args": {"path": "answer.txt", "content": "42"}}\n'
                                    '{"say": "fine \\udc00 text"}\n')
        r = cli("run", str(task), "--agent", f"script:{wd / 's.jsonl'}", cwd=wd, timeout=120)
        _no_traceback(r, "assay run")
        out = Path(wd)
        r = cli("report", "--json", str(out / "r.json"), "--csv", str(out / "r.csv"), "--html", str(out / "r.html"), cwd=wd, timeout=120)
        _no_traceback(r, "assay report")
        assert r.returncode == 0, r.tail()
        assert json.loads((out / "r.json").read_text())["runs"], "no runs in the report"
