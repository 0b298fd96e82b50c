"""Round 9 (fresh review, issue 25): stalls and hostile files, driven through the public CLI and
`assay serve` on 127.0.0.1.

What must hold (issue 25):
1. no input stalls or crashes anyone; no command ends in a traceback (nor in assay's "fault of its
   own" crash line, which is a traceback kept in a file);
2. hostile task files, imported results and `assay.toml` are refused up front, fast: exit 2 naming
   the file, the field and the reason;
3. task-supplied text is handled in linear time;
4. `assay serve` stays up for everyone.

Every test asserts what the defence promises, so a failing test is a hole.

The attacks:
- integers in [2^1023, 2^1024): they pass the readers' "past a float's range" cap (more than 1,024
  bits), but `float()` of them overflows (2^1024 - 1 is 1.797...e308 rounded *up*); in a
  DareBench `timeout_seconds`, a OneMillion-Bench `rubric_weight`, a HealthBench `points`, a native
  rubric `weight`, a native scenario's `baseline` and a variant's `kpi_baseline`, and in an
  imported OneMillion-Bench auto score;
- YAML values that are not JSON: a scenario variant parameter that is a date (an honest author's
  `due: 2024-03-01`) named by a placeholder, and a `!!binary` parameter of bytes that are not UTF-8;
- a DareBench `grading_type` that is a list (an unhashable dict key), and a DareBench checks block
  that Python's compiler cannot take (100,000 unary minus signs: MemoryError/RecursionError, not a
  SyntaxError);
- DareBench text that the reader's own `re` patterns take polynomial time on: a `## ` heading line
  ending in thousands of spaces (cubic), a prompt line of "write write write ..." (quadratic), an
  Automated Checks section of unclosed ```python fences (quadratic);
- a DareBench task id `../../outside`: its corpus folder becomes a folder outside the suite;
- one scenario's people.json read and checked again for each of 30 one-line variants;
- a `--tasks-from` manifest listing the 4,000 tasks of one HealthBench file (quadratic selection);
- a FIFO named `*.md` or `*.jsonl` in a suite folder (discovery opens it to sniff its format), and a
  FIFO as the store (control);
- an `assay.toml` in UTF-16 or with invalid UTF-8, with NaN prices, with a negative timeout;
- `assay serve`: HTTP/2 prefaces, websocket upgrades, a header of 200 cookies, 3,000 headers,
  hostile JSON to the play API (control), and sign-in form posts of 170,000 fields each, parsed on
  the event loop, while another client asks /healthz.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import clean_env, free_port
from tests.security._cases import answer_task, labels_case
from tests.security._support import REPO, cli, workdir

pytestmark = pytest.mark.slow

BIG = 2**1024 - 1
"""1,024 bits: not "past a float's range" by the readers' bit count, yet float(BIG) overflows."""

CRASH_MARKERS = ("Traceback", "fault of its own", "RecursionError", "MemoryError", "OverflowError")


def _clean(r: Any) -> None:
    """No traceback and no crash line of assay's own, whatever the exit code."""
    for marker in CRASH_MARKERS:
        assert marker not in r.stderr and marker not in r.stdout, f"{marker!r} in the output: " + r.tail()


def _refused(r: Any, file_name: str, fields: tuple[str, ...], *, within: float = 10.0) -> None:
    """Exit 2 naming the file and one of the fields, fast, no traceback."""
    assert not r.timed_out, "the command did not finish: " + r.tail()
    _clean(r)
    assert r.returncode == 2, "expected exit 2 (refused, naming file/field/reason): " + r.tail()
    assert file_name in r.stderr, f"the file {file_name!r} is not named: " + r.tail()
    assert any(f in r.stderr for f in fields), f"none of the fields {fields} is named: " + r.tail()
    assert r.seconds < within, f"took {r.seconds:.1f} s: " + r.tail()


# --------------------------------------------------------------------------- task files


DARE_FRONT = ("id: task_round9_00\nname: round nine\ncategory: testing\ngrading_type: automated\n"
              "timeout_seconds: 120\nenvironment:\n  type: sandbox\n  requirements: []\nworkspace_files: []\n")
DARE_CHECKS = ('```python\ndef grade(transcript, workspace_path):\n'
               '    return {"ok": 1.0}\n```\n')


def _dare(folder: Path, *, front: str = DARE_FRONT, prompt: str = "Write 42 into `answer.txt`.",
          checks: str = DARE_CHECKS, extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / "task_round9_00.md"
    p.write_text(f"---\n{front}---\n\n## Prompt\n\n{prompt}\n\n{extra}## Automated Checks\n\n{checks}\n")
    return p


def _omb(folder: Path, weight: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / "omb_round9.json"
    p.write_text(json.dumps({"prompt": "What is 6 x 7?", "case_id": 9901, "tags": ["Math"], "rubrics": [
        {"rubric_number": 1, "rubric_detail": "Says 42.", "rubric_weight": weight,
         "rubricLabel": "Factual Information"}]}))
    return p


def _healthbench(folder: Path, points: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / "hb_round9.jsonl"
    p.write_text(json.dumps({"prompt_id": "r9", "prompt": [{"role": "user", "content": "Is water wet?"}],
                             "rubrics": [{"criterion": "Answers the question", "points": points}]}) + "\n")
    return p


def _native_rubric(folder: Path, weight: Any) -> Path:
    spec = {"title": "say 42", "domain": "test", "execution": "single-step", "prompt": "Say 42.",
            "rubric": {"items": [{"id": "a", "text": "Says 42", "weight": weight, "tag": "FI",
                                  "check": {"regex": "42"}}]}}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "task.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return folder


def _scenario(folder: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    """The shared labels case, its task.yaml edited by `edit` (dumped with yaml.safe_dump, so dates
    stay YAML timestamps and bytes become !!binary)."""
    labels_case(folder)
    spec = yaml.safe_load((folder / "task.yaml").read_text())
    edit(spec)
    (folder / "task.yaml").write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True))
    return folder


def _fdegym(folder: Path) -> Path:
    shutil.copytree(REPO / "tests" / "fixtures" / "fdegym" / "tiny-case", folder)
    (folder / "variants.json").write_text(json.dumps({"variants": [
        {"name": "base", "kpi_baseline": BIG, "params": {"target": 7, "who": "Ann", "secret_note": "n"}}]}))
    return folder


def _raw_task(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "task.yaml").write_text(text)
    return folder


def _sc_baseline(spec: dict[str, Any]) -> None:
    spec["scenario"]["baseline"] = BIG


def _sc_kpi(spec: dict[str, Any]) -> None:
    spec["scenario"]["variants"] = [{"name": "base", "kpi_baseline": BIG}]


def _sc_date_param(spec: dict[str, Any]) -> None:
    spec["scenario"]["variants"] = [{"name": "base", "params": {"due": datetime.date(2024, 3, 1)}}]
    spec["briefs"]["L0"] += " Deliver by {{due}}."


def _sc_binary_param(spec: dict[str, Any]) -> None:
    spec["scenario"]["variants"] = [{"name": "base", "params": {"blob": b"\xff\xfe\x00assay"}}]


# case id -> (builder(work) -> path to validate, file name expected in the message, fields (any of))
TASK_FILES: dict[str, tuple[Callable[[Path], Path], str, tuple[str, ...]]] = {
    "darebench-timeout-at-float-limit": (
        lambda w: _dare(w / "suite", front=DARE_FRONT.replace("timeout_seconds: 120", f"timeout_seconds: {BIG}")),
        "task_round9_00.md", ("timeout_seconds",)),
    "darebench-grading-type-a-list": (
        lambda w: _dare(w / "suite", front=DARE_FRONT.replace("grading_type: automated", "grading_type: [automated]")),
        "task_round9_00.md", ("grading_type",)),
    "darebench-checks-the-compiler-cannot-take": (
        lambda w: _dare(w / "suite", checks='```python\ndef grade(transcript, workspace_path):\n'
                                            '    return {"ok": ' + "-" * 100_000 + '1}\n```\n'),
        "task_round9_00.md", ("Automated Checks",)),
    "omb-weight-at-float-limit": (lambda w: _omb(w / "suite", BIG), "omb_round9.json", ("rubric_weight",)),
    "healthbench-points-at-float-limit": (lambda w: _healthbench(w / "suite", BIG), "hb_round9.jsonl", ("points",)),
    "native-rubric-weight-at-float-limit": (lambda w: _native_rubric(w / "suite" / "t", BIG), "task.yaml",
                                            ("weight",)),
    "scenario-baseline-at-float-limit": (lambda w: _scenario(w / "suite" / "sc", _sc_baseline), "task.yaml",
                                         ("baseline",)),
    "scenario-variant-kpi-at-float-limit": (lambda w: _scenario(w / "suite" / "sc", _sc_kpi), "task.yaml",
                                            ("kpi_baseline", "variants")),
    "scenario-binary-parameter-not-utf8": (lambda w: _scenario(w / "suite" / "sc", _sc_binary_param), "task.yaml",
                                           ("blob", "params")),
    "fdegym-variant-kpi-at-float-limit": (lambda w: _fdegym(w / "suite" / "tiny-case"), "variants.json",
                                          ("kpi_baseline",)),
    # control: a Python tag and an unhashable key are refused by the safe loader
    "control-yaml-python-tag-and-unhashable-key": (lambda w: _raw_task(
        w / "suite" / "t", 'title: x\nprompt: !!python/object/apply:os.system ["true"]\n? [a, b]\n: c\n'),
        "task.yaml", ("python/object", "constructor")),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(TASK_FILES))
def test_hostile_task_file_is_exit_2_naming_file_and_field(case: str) -> None:
    build, file_name, fields = TASK_FILES[case]
    with workdir("r9-task") as w:
        path = build(w)
        r = cli("validate", str(path), cwd=w, timeout=20)
        _refused(r, file_name, fields)


def test_a_date_parameter_in_a_brief_is_read_as_written() -> None:
    """An honest `due: 2024-03-01` among a variant's params, used as `{{due}}` in a brief: YAML
    reads it as a date, and a date broke the task's hash (a crash, exit 1). A task file's date is
    the text it is written in, as JSON has it: the task is valid and its brief says the date."""
    with workdir("r9-date") as w:
        path = _scenario(w / "suite" / "sc", _sc_date_param)
        r = cli("validate", str(path), cwd=w, timeout=20)
        _clean(r)
        assert r.returncode == 0, r.tail()
        from assay import load_tasks

        (task,) = load_tasks([path])
        assert "Deliver by 2024-03-01." in task.briefs["L0"], task.briefs["L0"]


# --------------------------------------------------------------------------- linear time on task text


def _dare_heading(w: Path) -> Path:
    # `_HEADING = ^##\s+(.+?)\s*#*\s*$` on "## a" + spaces + "x": cubic in the spaces
    return _dare(w / "suite", extra="## Notes" + " " * 4000 + "x\n\nsome notes\n\n")


def _dare_write_verbs(w: Path) -> Path:
    # `_WRITE_TO = \b(write|...)\b[^.\n]*?\b(to|in|into|as)\s+...`: each "write" scans the rest of the line
    return _dare(w / "suite", prompt="Write 42 into `answer.txt`.\n" + "write " * 25_000)


def _dare_open_fences(w: Path) -> Path:
    # `_PY_BLOCK` (DOTALL, lazy, back-reference): each unclosed ```python scans the rest of the section
    # (no closing fence anywhere, so no start matches)
    return _dare(w / "suite", checks="```python\n" * 25_000)


LINEAR = {"heading-line-of-spaces": _dare_heading, "prompt-of-write-verbs": _dare_write_verbs,
          "checks-of-unclosed-fences": _dare_open_fences}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(LINEAR))
def test_darebench_task_text_is_read_in_linear_time(case: str) -> None:
    """A DareBench file of a few hundred KB is read (accepted or refused) in seconds: the reader's
    own patterns must not backtrack polynomially on the task's text."""
    with workdir("r9-linear") as w:
        path = LINEAR[case](w)
        assert path.stat().st_size < 400_000
        r = cli("validate", str(path), cwd=w, timeout=5)
        assert not r.timed_out, f"`assay validate` on a {path.stat().st_size:,}-byte DareBench file ran past 5 s"
        _clean(r)
        assert r.returncode in (0, 2), r.tail()
        assert r.seconds < 4, f"took {r.seconds:.1f} s: " + r.tail()


@pytest.mark.slow
def test_stakeholder_spec_is_not_read_again_for_every_variant() -> None:
    """A 1.8 MB people.json (20,000 topics, one trigger each) takes about 1 s to read and check; a
    task.yaml naming 30 variants (one short line each, no placeholders) makes `assay validate` read
    and check it 40 times over (measured 12 s for 10 variants). The work must be bounded by the
    files' sizes, not multiplied by a count the task file chooses for free."""
    with workdir("r9-people") as w:
        folder = labels_case(w / "suite" / "sc")
        people = json.loads((folder / "people.json").read_text())
        people["npcs"][0]["topics"] = [{"id": f"t{i}", "about": "x", "triggers": [f"(?i)word{i}"], "answer": "a",
                                        "facts": []} for i in range(20_000)]
        (folder / "people.json").write_text(json.dumps(people))
        spec = yaml.safe_load((folder / "task.yaml").read_text())
        spec["scenario"]["variants"] = [{"name": f"v{i}"} for i in range(30)]
        (folder / "task.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
        r = cli("validate", str(w / "suite"), cwd=w, timeout=8)
        assert not r.timed_out, "`assay validate` of one scenario with 30 variants ran past 8 s"
        _clean(r)
        assert r.returncode in (0, 2), r.tail()
        assert r.seconds < 6, f"took {r.seconds:.1f} s: " + r.tail()


@pytest.mark.slow
def test_a_suite_manifest_of_thousands_of_tasks_is_selected_in_linear_time() -> None:
    """`assay run --tasks-from` with a manifest listing the 4,000 tasks of one HealthBench file (the
    real HealthBench has 5,000): the ids are matched against every task for every listed id, and
    `select` keeps a list of chosen tasks tested with `not in` (pydantic equality of whole tasks).
    Control: the same run without the manifest."""
    n = 4000
    with workdir("r9-manifest") as w:
        suite = w / "suite"
        suite.mkdir()
        with open(suite / "hb.jsonl", "w") as f:
            for i in range(n):
                f.write(json.dumps({"prompt_id": f"p{i}", "prompt": [{"role": "user", "content": "q"}],
                                    "rubrics": [{"criterion": "c", "points": 1}]}) + "\n")
        (w / "manifest.json").write_text(json.dumps({"tasks": [f"p{i}" for i in reversed(range(n))]}))
        args = ("run", "suite", "--agent", "noop", "--judge", "openai/gpt-4o-mini", "--dry-run")
        plain = cli(*args, cwd=w, timeout=30)
        assert plain.returncode == 0, plain.tail()
        r = cli(*args, "--tasks-from", "manifest.json", cwd=w, timeout=plain.seconds + 8)
        assert not r.timed_out, (f"with --tasks-from the dry run ran past {plain.seconds + 8:.0f} s "
                                 f"(without it: {plain.seconds:.1f} s)")
        _clean(r)
        assert r.returncode == 0, r.tail()


# --------------------------------------------------------------------------- special files in a suite


@pytest.mark.slow
@pytest.mark.parametrize("name", ["notes.md", "rows.jsonl"])
def test_fifo_named_like_a_task_file_does_not_hang_discovery(name: str) -> None:
    """Discovery sniffs `*.md` (DareBench front matter) and `*.jsonl` (HealthBench rows) by opening
    them: a FIFO there must be skipped or refused, never waited on."""
    with workdir("r9-fifo") as w:
        suite = w / "suite"
        answer_task(suite / "good")
        os.mkfifo(suite / name)
        r = cli("validate", str(suite), cwd=w, timeout=4)
        assert not r.timed_out, f"`assay validate` hung on the FIFO {name} in the suite"
        _clean(r)
        assert r.returncode in (0, 2), r.tail()
        if r.returncode == 2:
            assert name in r.stderr, r.tail()


@pytest.mark.slow
def test_darebench_task_id_that_climbs_out_is_refused() -> None:
    """A DareBench task's corpus is `corpus/<task id>/` of the nearest `corpus/` folder; an id of
    `../../outside` makes it a folder outside the suite, which the content hash then walks and reads
    whole (no entry or byte cap: an id of `../` repeated to `/` walks the host as root). A task id
    with a path separator or `..` must be refused at validation."""
    with workdir("r9-id") as w:
        outside = w / "outside"
        outside.mkdir()
        (outside / "not-in-the-suite.txt").write_text("host file\n")
        suite = w / "suite"
        (suite / "corpus").mkdir(parents=True)
        path = _dare(suite, front=DARE_FRONT.replace("id: task_round9_00", 'id: "../../outside"'))
        r = cli("validate", str(path), cwd=w, timeout=20)
        _refused(r, "task_round9_00.md", ("id", "corpus"))


# --------------------------------------------------------------------------- assay.toml


ALIAS = '[models.m]\nprovider = "openai"\nmodel = "gpt-round9"\nbase_url = "http://127.0.0.1:9/v1"\n'

TOMLS: dict[str, tuple[bytes, tuple[str, ...], tuple[str, ...]]] = {
    # case -> (assay.toml bytes, the command's arguments after the work folder's setup, fields)
    "utf16-with-bom": ('store = "x.db"\n'.encode("utf-16"), ("runs",), ("UTF", "utf", "text", "decode")),
    "invalid-utf8": (b'store = "x\xff.db"\n', ("runs",), ("UTF", "utf", "text", "decode")),
    "nan-price": ((ALIAS + "[models.m.prices]\ninput = nan\noutput = nan\n").encode(),
                  ("run", "suite", "--agent", "m", "--dry-run"), ("prices", "input")),
    "negative-timeout": ((ALIAS + "timeout_s = -5.0\nmax_retries = -3\n").encode(),
                         ("run", "suite", "--agent", "m", "--dry-run"), ("timeout_s", "max_retries")),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(TOMLS))
def test_hostile_assay_toml_is_exit_2_naming_file_and_field(case: str) -> None:
    raw, args, fields = TOMLS[case]
    with workdir("r9-toml") as w:
        answer_task(w / "suite" / "t")
        (w / "assay.toml").write_bytes(raw)
        r = cli(*args, cwd=w, timeout=30)
        _refused(r, "assay.toml", fields, within=25)


@pytest.mark.slow
def test_store_that_is_a_fifo_is_refused_not_waited_on() -> None:
    """`store = PATH` in assay.toml (or --store) naming a FIFO: SQLite opens it read-write, which
    does not block, then waits forever to read its header."""
    with workdir("r9-store") as w:
        fifo = w / "store.db"
        os.mkfifo(fifo)
        (w / "assay.toml").write_text(f'store = "{fifo}"\n')
        r = cli("runs", cwd=w, timeout=8)
        assert not r.timed_out, "`assay runs` with a FIFO for its store hung"
        _clean(r)
        assert r.returncode == 2, r.tail()
        assert "store" in r.stderr, r.tail()


# --------------------------------------------------------------------------- imported results


@pytest.mark.slow
def test_imported_omb_auto_score_at_float_limit_is_exit_2_and_nothing_stored() -> None:
    with workdir("r9-import") as w:
        p = w / "omb_results.json"
        p.write_text(json.dumps({
            "prompt": "What is 6 x 7?", "case_id": 9902, "tags": ["Math"],
            "rubrics": [{"rubric_number": 1, "rubric_detail": "Says 42.", "rubric_weight": 5,
                         "rubricLabel": "Factual Information"}],
            "model_response": {"model_response_1": {"model_name": "m", "response_text": "42"}},
            "rubric_auto_score": {"judge/x": {"rubric_1_response_1_auto_score": BIG}}}))
        r = cli("import", "omb", str(p), "--create", cwd=w, timeout=30)
        _refused(r, "omb_results.json", ("auto_score", "rubric_auto_score"), within=25)
        db = w / ".assay" / "assay.db"
        if db.exists():
            import sqlite3

            con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
            try:
                n = con.execute("SELECT count(*) FROM runs").fetchone()[0]
            finally:
                con.close()
            assert n == 0, f"{n} run(s) stored from a refused import"


# --------------------------------------------------------------------------- assay serve


def _healthz(port: int, timeout: float = 5.0) -> float:
    t0 = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=timeout) as r:
        assert r.status == 200
        r.read()
    return time.monotonic() - t0


def _raw(port: int, data: bytes, src: str, hold: float, read: bool = True) -> bytes:
    """Send `data` from `src` to the server; keep the connection `hold` seconds; what came back."""
    got = b""
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=5,
                                                                 source_address=(src, 0)) as s:
        s.sendall(data)
        end = time.monotonic() + hold
        s.settimeout(0.5)
        while time.monotonic() < end:
            try:
                chunk = s.recv(65536) if read else b""
            except TimeoutError:
                continue
            except OSError:
                break
            if read and not chunk:
                break
            got += chunk
            if not read:
                time.sleep(0.2)
    return got


def _post_json(port: int, path: str, body: bytes) -> int:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


@contextlib.contextmanager
def _serving(w: Path) -> Any:
    """`assay serve` on a free loopback port with the work folder's suite; yields (port, stop), where
    stop() sends SIGTERM and returns the seconds it took the server to end."""
    answer_task(w / "suite" / "t")
    port = free_port()
    log = w / "serve.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "assay.cli", "serve", "--host", "127.0.0.1", "--port",
                                 str(port), "--create", "--suite", str(w / "suite")], cwd=w, env=clean_env(),
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    took: list[float] = []

    def stop() -> float:
        if not took:
            t0 = time.monotonic()
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            took.append(time.monotonic() - t0)
        return took[0]

    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError, AssertionError):
                _healthz(port, 2)
                break
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.2)
        yield port, stop
    finally:
        stop()


def _log_ok(w: Path, stopped_in: float) -> None:
    text = (w / "serve.log").read_text(errors="replace")
    assert stopped_in < 8, f"SIGTERM took {stopped_in:.1f} s"
    assert "Traceback" not in text, "the server log holds a traceback:\n" + text[-3000:]
    assert len(text) < 200_000, f"the server log grew to {len(text):,} characters"


@pytest.mark.slow
def test_serve_answers_healthz_under_h2_prefaces_upgrades_cookie_floods_and_hostile_play_json() -> None:
    with workdir("r9-serve") as w:
        with _serving(w) as (port, stop):
            h2 = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x12\x04\x00\x00\x00\x00\x00" + b"\x00" * 18
            upgrade = (b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                       b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
                       + b"\x81\xfe\xff\xff" + b"x" * 1000)
            h2c = (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade, HTTP2-Settings\r\n"
                   b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n")
            cookies = "; ".join(f"c{i}={'v' * 90}" for i in range(200))
            cookie_req = (f"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: {cookies}\r\n\r\n").encode()
            many_headers = (b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                            + b"".join(b"X-H%d: y\r\n" % i for i in range(3000)) + b"\r\n")
            answers: dict[str, list[bytes]] = {"h2": [], "upgrade": [], "h2c": [], "cookie": [], "headers": []}
            lock = threading.Lock()

            def attack(kind: str, data: bytes, src: str, hold: float) -> None:
                got = _raw(port, data, src, hold)
                with lock:
                    answers[kind].append(got)

            threads = []
            for i in range(12):
                src = f"127.0.0.{2 + i % 4}"
                for kind, data in (("h2", h2), ("upgrade", upgrade), ("h2c", h2c), ("cookie", cookie_req),
                                   ("headers", many_headers)):
                    threads.append(threading.Thread(target=attack, args=(kind, data, src, 4.0), daemon=True))
            for t in threads:
                t.start()
            # hostile JSON to the play API (none of these may start a session)
            statuses = [_post_json(port, "/api/play", body) for body in (
                b'{"task_id": {"$gt": ""}, "name": ["x"], "level": {"L3": 1}}',
                b'{"task_id": "t", "name": "a" , "level": ["L3"]}',
                b'{"task_id": "t", "name": "\\ud800", "campaign": "\\udfff"}',
                b'{"task_id": 1e999, "name": 123456789012345678901234567890, "level": true}',
                b'[' * 100_000 + b']' * 100_000,
                b'{"task_id": "' + b'a' * 900_000 + b'"}',
                b'\xff\xfe{\x00}\x00',
            )]
            statuses += [_post_json(port, "/api/play/nosuch/action", body) for body in (
                b'{"tool": {"a": 1}, "args": [1]}', b'{"submit": {"x": [1, 2]}}')]
            waits = []
            end = time.monotonic() + 4.0
            while time.monotonic() < end:
                waits.append(_healthz(port, 10))
                time.sleep(0.25)
            for t in threads:
                t.join(10)
            waits.append(_healthz(port, 10))
            assert max(waits) < 3.0, f"/healthz waited up to {max(waits):.1f} s during the attack ({waits})"
            assert all(s < 500 for s in statuses), f"the play API answered {statuses}"
            assert all(not g.startswith(b"HTTP/1.1 500") for gs in answers.values() for g in gs), answers
            stopped_in = stop()
        _log_ok(w, stopped_in)


def _form_poster(port: int, src: str, body: bytes, until: float, done: list[int]) -> None:
    head = (f"POST /signin HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/x-www-form-urlencoded"
            f"\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    while time.monotonic() < until:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=20,
                                                                     source_address=(src, 0)) as s:
            s.sendall(head + body)
            while s.recv(65536):
                pass
            done.append(1)


@pytest.mark.slow
def test_big_form_posts_do_not_hold_the_event_loop() -> None:
    """A form body of at most 1 MiB (the cap) made of 170,000 fields `a=%41`: the sign-in form is
    parsed with `parse_qs` inside the async handler, on the server's one event loop, before the
    token is even looked at (about 0.75 s of the loop per request). Sixteen such posters from eight
    loopback addresses (two each, well within the per-address caps) must not keep /healthz waiting.
    Measured: with the same number of posters of a plain 1 MiB body (one field) /healthz answers in
    0.03 s; with these bodies it waits 2 to 4 s."""
    body = (b"a=%41&" * 174_762)[: 1024 * 1024 - 16]
    with workdir("r9-form") as w:
        with _serving(w) as (port, stop):
            until = time.monotonic() + 6.0
            done: list[int] = []
            threads = [threading.Thread(target=_form_poster, args=(port, f"127.0.0.{2 + i % 8}", body, until, done),
                                        daemon=True) for i in range(16)]
            for t in threads:
                t.start()
            time.sleep(1.0)
            waits = []
            while time.monotonic() < until:
                waits.append(_healthz(port, 30))
                time.sleep(0.2)
            for t in threads:
                t.join(30)
            stopped_in = stop()
        _log_ok(w, stopped_in)
        assert done, "no form post was answered"
        assert max(waits) < 2.0, (f"/healthz waited up to {max(waits):.1f} s while {len(done)} big form posts "
                                  f"were parsed (waits: {[round(x, 1) for x in waits]})")
