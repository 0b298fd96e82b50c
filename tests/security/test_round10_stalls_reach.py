"""Tenth fresh review: `assay import` of upstream files, the stores fed with hostile values,
the report and listing commands over hostile stored text, task folders with hostile contents,
and the web app's play start and workbench file tree.

Each test drives the public surface (the CLI in a subprocess, `assay serve` over HTTP) and
asserts the secure outcome: exit 2 naming file and field (never a traceback or a crash log),
a bounded time and memory, nothing half-stored, no control sequence of a file or a run
reaching a terminal or a rendered page, no secret read through a link, and other users'
requests answered.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.security._cases import answer_task
from tests.security._support import bwrap_ok, cli, script, workdir, write_yaml

pytestmark = pytest.mark.slow

# A terminal would act on these: clear the screen, set the window title (OSC ... ST), reverse the text.
CLEAR = "\x1b[2J"
OSC_TITLE = "\x1b]0;pwned\x1b\\"
RLO = "\u202e"
HOSTILE = f"x{CLEAR}{OSC_TITLE}<img src=x onerror=alert(1)>{RLO}gnp.exe"
RAW_CONTROLS = (CLEAR, "\x1b]0;", RLO, "\x07")


def _no_traceback(r: Any) -> None:
    for m in re.finditer(r"the details are in (/tmp/assay-crash-[\w.-]+\.log)", r.stderr):
        Path(m.group(1)).unlink(missing_ok=True)  # the crash log this command wrote (only that one)
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout, r.tail()
    assert "fault of its own" not in r.stderr, "a crash log instead of exit 2: " + r.tail()


def _raw_controls(text: str) -> list[str]:
    return [c for c in RAW_CONTROLS if c in text]


def _db_rows(cwd: Path) -> int:
    db = cwd / ".assay" / "assay.db"
    if not db.exists():
        return 0
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        if not con.execute("SELECT name FROM sqlite_master WHERE name='runs'").fetchone():
            return 0
        return int(con.execute("SELECT count(*) FROM runs").fetchone()[0])
    finally:
        con.close()


def _darebench(path: Path, model: str, task_id: str, runs: int = 1, **grading: Any) -> Path:
    path.write_text(json.dumps({"model": model, "tasks": [
        {"task_id": task_id, "grading": {"runs": [{"score": 1, "max_score": 1, **grading}] * runs}}]}))
    return path


def _import_hostile_names(cwd: Path) -> None:
    """Two agents on one task in campaign `h`: one with a hostile model name (darebench), one plain."""
    _darebench(cwd / "evil.json", HOSTILE, f"t{CLEAR}<script>alert(2)</script>")
    _darebench(cwd / "plain.json", "plain", f"t{CLEAR}<script>alert(2)</script>")
    for f in ("evil.json", "plain.json"):
        r = cli("import", "darebench", f, "--campaign", "h", "--create", cwd=cwd, timeout=120)
        assert r.returncode == 0, r.tail()


# --------------------------------------------------------------------------- import: amplification, bombs, links


def test_omb_judges_times_responses_do_not_amplify_into_the_store() -> None:
    """A 110 KB OneMillion-Bench result naming 2,000 (empty) judges, 100 responses and 20 rubric
    items: every item of every response lists every judge in its reason, and every run lists every
    judge twice. The store must stay proportional to the file (or the file be refused)."""
    with workdir("omb-amp") as cwd:
        judges, responses, items = 2000, 100, 20
        task: dict[str, Any] = {"case_id": "c1", "prompt": "What is 2+2?",
                "rubrics": [{"rubric_number": i + 1, "rubric_detail": f"item {i}", "rubric_weight": 1,
                             "rubricLabel": "FI"} for i in range(items)],
                "model_response": {f"model_response_{r + 1}": {"model_name": "m", "response_text": "4"}
                                   for r in range(responses)},
                "rubric_auto_score": {f"j{j}": {} for j in range(judges)}}
        task["rubric_auto_score"]["j0"] = {f"rubric_{i + 1}_response_{r + 1}_auto_score": 1
                                           for i in range(items) for r in range(responses)}
        f = cwd / "omb.json"
        f.write_text(json.dumps(task))
        size = f.stat().st_size
        r = cli("import", "omb", "omb.json", "--create", cwd=cwd, timeout=180)
        _no_traceback(r)
        assert r.returncode in (0, 2), r.tail()
        db = cwd / ".assay" / "assay.db"
        stored = db.stat().st_size if db.exists() else 0
        assert r.seconds < 30, r.tail()
        assert stored <= 50 * size + 4 * 1024**2, (
            f"a {size:,}-byte result file grew the store to {stored:,} bytes ({stored / size:.0f}x)")


def _zip_bomb_eval(path: Path, mib: int = 300) -> None:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z, z.open("header.json", "w") as out:
        chunk = b" " * (1 << 20)
        for _ in range(mib):
            out.write(chunk)
        out.write(b"{}")


def test_inspect_log_folder_is_checked_for_zip_bombs_before_headers_are_read() -> None:
    """`assay import inspect FOLDER`: the log listing reads every log's header (Inspect's
    `header_only` read) before the zip-bomb check that a log named directly gets. A 400 KB
    `.eval` whose `header.json` unpacks to 300 MB of whitespace."""
    with workdir("insp-bomb") as cwd:
        logs = cwd / "logs"
        logs.mkdir()
        _zip_bomb_eval(logs / "2024-01-01T00-00-00+00-00_t_abc.eval")
        direct = cli("import", "inspect", str(next(logs.iterdir())), "--create", cwd=cwd, timeout=120,
                     measure_rss=True)
        assert direct.returncode == 2 and "zip bomb" in direct.stderr, direct.tail()  # the control
        r = cli("import", "inspect", "logs", "--create", cwd=cwd, timeout=120, measure_rss=True)
        _no_traceback(r)
        assert r.returncode == 2, r.tail()
        assert r.max_rss_bytes is not None and direct.max_rss_bytes is not None
        assert r.max_rss_bytes < direct.max_rss_bytes + 150 * 1024**2, (
            f"the folder import took {r.max_rss_bytes / 1e6:.0f} MB to refuse what the direct import refused "
            f"in {direct.max_rss_bytes / 1e6:.0f} MB: " + r.tail())
        assert "zip bomb" in r.stderr, r.tail()


def test_inspect_log_that_is_a_symlink_is_not_read_through() -> None:
    """A downloaded log `x.json` that is a symlink to a root-only JSON file on the host. Every
    other importer refuses links (`read_regular`); Inspect's reader follows it, and pydantic's
    error quotes the head of the file it read."""
    with workdir("insp-link") as cwd:
        secret_dir = Path(cwd.parent / (cwd.name + "-secret"))
        secret_dir.mkdir(mode=0o700)
        try:
            token = "SECRET-" + os.urandom(8).hex()
            secret = secret_dir / "answer.json"
            secret.write_text(json.dumps({"eval": {"task": token}, "answer": 42}))
            os.chmod(secret, 0o600)
            (cwd / "logs").mkdir()
            link = cwd / "logs" / "2024-01-01T00-00-00+00-00_x_abc.json"
            link.symlink_to(secret)
            r = cli("import", "inspect", str(link.relative_to(cwd)), "--create", cwd=cwd, timeout=120)
            _no_traceback(r)
            assert r.returncode == 2, r.tail()
            assert token[:12] not in r.stdout + r.stderr, "the secret file was read and quoted: " + r.tail()
            assert "link" in r.stderr.lower(), "refused, but not as a link: " + r.tail()
        finally:
            subprocess.run(["rm", "-rf", str(secret_dir)], check=False)


def test_inspect_eval_set_manifest_is_refused_by_its_size_before_it_is_read() -> None:
    """An `eval-set.json` (a sparse 600 MiB file) is read whole (`Path.read_bytes`) before the
    16 MiB limit is applied to the text."""
    with workdir("insp-manifest") as cwd:
        (cwd / "logs").mkdir()
        manifest = cwd / "logs" / "eval-set.json"
        with open(manifest, "wb") as f:
            f.truncate(600 * 1024**2)
        r = cli("import", "inspect", "logs/eval-set.json", "--create", cwd=cwd, timeout=120, measure_rss=True)
        _no_traceback(r)
        assert r.returncode == 2, r.tail()
        rss = r.max_rss_bytes or 0
        assert 0 < rss < 400 * 1024**2, (
            f"{rss / 1e6:.0f} MB to refuse a 600 MiB manifest: " + r.tail())


def test_fdegym_run_files_that_are_fifos_or_device_links_are_refused_fast() -> None:
    """Control: FDE-Gym run folders whose result.json is a FIFO, a link to /dev/zero, or whose
    void.json's meta.json is a FIFO: exit 2 at once, naming the file, nothing stored."""
    with workdir("fde-special") as cwd:
        runs = cwd / "runs"
        a = runs / "eng.v1-L0-slug-1"
        a.mkdir(parents=True)
        os.mkfifo(a / "result.json")
        b = runs / "eng.v1-L0-slug-2"
        b.mkdir()
        (b / "result.json").symlink_to("/dev/zero")
        c = runs / "eng.v1-L0-slug-3"
        c.mkdir()
        (c / "void.json").write_text(json.dumps({"end_reason": "api_error", "slug": "slug"}))
        os.mkfifo(c / "meta.json")
        for folder in (a, b, c):
            r = cli("import", "fdegym", str(folder), "--create", cwd=cwd, timeout=30)
            _no_traceback(r)
            assert r.returncode == 2 and r.seconds < 20, r.tail()
            assert folder.name in r.stderr, r.tail()
        assert _db_rows(cwd) == 0


# --------------------------------------------------------------------------- task folders


def test_a_sparse_huge_workspace_file_does_not_stall_validate() -> None:
    """A downloaded task whose `workspace/` holds a sparse 32 GiB file (no disk used; tar keeps
    it sparse), beside a FIFO and a link to /dev/zero. No copy would take it (1 GiB per file),
    but `assay validate` (and `assay tasks`, `assay run`) hash every byte of it for the task's
    content hash: 16 GiB took 18 s here. Secure: refused (exit 2 naming the file) or skipped fast."""
    with workdir("sparse-ws") as cwd:
        answer_task(cwd / "suite" / "t", second=False)
        ws = cwd / "suite" / "t" / "workspace"
        with open(ws / "big.bin", "wb") as f:
            f.truncate(32 * 1024**3)
        os.mkfifo(ws / "fifo")
        (ws / "zero").symlink_to("/dev/zero")
        r = cli("validate", "suite", cwd=cwd, timeout=30)
        _no_traceback(r)
        assert not r.timed_out and r.seconds < 15, "assay validate stalled on a sparse file: " + r.tail()
        assert r.returncode in (0, 2), r.tail()


# --------------------------------------------------------------------------- PostgreSQL fed hostile values

PG_CASES = {
    "nul-in-task-id": lambda res: res["tasks"][1].update(task_id="a\u0000b"),
    "model-name-past-its-column": lambda res: res.update(model="m" * 250),
    "task-id-past-its-column": lambda res: res["tasks"][1].update(task_id="t" * 400),
    "nul-in-a-void-reason": lambda res: res["tasks"][1].update(
        status="error", grading={"runs": [{"score": 1, "max_score": 1, "notes": "bad\u0000x"}]}),
}


@pytest.mark.parametrize("case", list(PG_CASES))
def test_import_values_postgresql_cannot_hold_are_exit_2_and_nothing_is_written(case: str, pg_url: str) -> None:
    """A DareBench results file whose second task holds a value PostgreSQL refuses (a NUL in a
    text column; a name longer than its VARCHAR). `assay run` checks lengths before it runs
    (`service._check_lengths`); the importers check nothing, so PostgreSQL refuses at the insert,
    after the first run was stored."""
    from sqlalchemy import create_engine, text

    with workdir("pg-import") as cwd:
        res: dict[str, Any] = {"model": "m", "tasks": [
            {"task_id": "ok", "grading": {"runs": [{"score": 1, "max_score": 1}]}},
            {"task_id": "t2", "grading": {"runs": [{"score": 1, "max_score": 1}]}}]}
        PG_CASES[case](res)
        (cwd / "d.json").write_text(json.dumps(res))
        r = cli("import", "darebench", "d.json", "--store", pg_url, cwd=cwd, timeout=120)
        engine = create_engine(pg_url)
        try:
            with engine.connect() as conn:
                try:
                    stored = int(conn.execute(text("SELECT count(*) FROM runs")).scalar() or 0)
                except Exception:  # no table: nothing was written
                    stored = 0
        finally:
            engine.dispose()
        _no_traceback(r)
        assert r.returncode in (0, 2), r.tail()
        if r.returncode == 2:
            assert "d.json" in r.stderr, r.tail()
            assert stored == 0, f"refused, but {stored} run(s) of the file were stored: " + r.tail()
        else:
            assert stored == 2, r.tail()


@pytest.mark.skipif(not bwrap_ok(), reason="needs bubblewrap")
def test_a_nul_in_a_task_field_does_not_crash_a_postgresql_campaign(pg_url: str) -> None:
    """A downloaded task whose `domain` holds a NUL (YAML "\\0"), beside an honest task, run on a
    PostgreSQL store: the current-runs row cannot hold it. Secure: the bad task refused (exit 2
    naming it) or stored escaped, the honest run stored done, never a crash of the campaign."""
    with workdir("pg-nul") as cwd:
        answer_task(cwd / "suite" / "honest", second=False)
        answer_task(cwd / "suite" / "nul", second=False)
        spec = (cwd / "suite" / "nul" / "task.yaml").read_text().replace("domain: test", 'domain: "te\\0st"')
        (cwd / "suite" / "nul" / "task.yaml").write_text(spec)
        agent = script(cwd, "writer", [{"tool": "write_file", "args": {"path": "answer.txt", "content": "42\n"}}])
        r = cli("run", "suite", "--agent", agent, "--store", pg_url, cwd=cwd, timeout=300)
        _no_traceback(r)
        assert r.returncode in (0, 2), r.tail()
        from sqlalchemy import create_engine, text

        engine = create_engine(pg_url)
        try:
            with engine.connect() as conn:
                rows = conn.execute(text("SELECT task_id, status FROM current_runs")).fetchall()
        finally:
            engine.dispose()
        assert ("honest", "done") in {(t, s) for t, s in rows}, f"the honest run was lost: {rows}; " + r.tail()


# --------------------------------------------------------------------------- control sequences on the terminal


def test_assay_tasks_shows_control_characters_of_a_task_id_escaped() -> None:
    """A downloaded task whose `id` and `domain` carry ESC sequences (clear screen, window title)
    and a bidi override: `assay tasks` prints its table straight to the terminal."""
    with workdir("tasks-esc") as cwd:
        write_yaml(cwd / "suite" / "t1", {
            "id": f"t{CLEAR}{OSC_TITLE}{RLO}1", "title": "t", "domain": f"d{CLEAR}",
            "execution": "multi-step-with-tools", "prompt": "Write 42 into answer.txt.",
            "contract": [{"path": "answer.txt", "predicate": "regex", "pattern": "^42"}]},
            {"workspace/README.md": "hi\n"})
        r = cli("tasks", "suite", cwd=cwd, timeout=60)
        _no_traceback(r)
        assert r.returncode == 0, r.tail()
        assert not _raw_controls(r.stdout + r.stderr), f"raw controls on the terminal: {_raw_controls(r.stdout)!r}"


def test_validate_error_shows_a_hostile_field_name_escaped() -> None:
    """A task.yaml whose unknown key is an escape sequence: the exit-2 message names the field,
    and `fail()` writes it to stderr as it is."""
    with workdir("validate-esc") as cwd:
        folder = cwd / "suite" / "t"
        (folder / "workspace").mkdir(parents=True)
        (folder / "task.yaml").write_text(
            'title: t\ndomain: d\nexecution: multi-step-with-tools\nprompt: hi\n"bad\\e]0;pwned\\e\\\\\\e[2J": 1\n')
        r = cli("validate", "suite", cwd=cwd, timeout=60)
        _no_traceback(r)
        assert r.returncode == 2 and "task.yaml" in r.stderr, r.tail()
        assert not _raw_controls(r.stderr), f"raw controls in the error: {r.stderr!r}"


def test_import_error_shows_a_hostile_field_name_escaped() -> None:
    """A DareBench file refused (score outside 0..1) for a task whose id is an escape sequence:
    the message names `tasks[<id>]...` raw."""
    with workdir("import-esc") as cwd:
        _darebench(cwd / "d.json", "m", f"t{CLEAR}{OSC_TITLE}\x07", score=5)
        r = cli("import", "darebench", "d.json", "--create", cwd=cwd, timeout=60)
        _no_traceback(r)
        assert r.returncode == 2 and "d.json" in r.stderr, r.tail()
        assert not _raw_controls(r.stderr), f"raw controls in the error: {r.stderr!r}"


def test_report_tables_show_imported_agent_names_escaped() -> None:
    """An imported agent (a DareBench model name) and task id carrying ESC sequences and a bidi
    override: `assay report --runs` prints the leaderboard, the kind blocks and the runs table.
    (`assay runs` escapes them; the report's tables do not.)"""
    with workdir("report-esc") as cwd:
        _import_hostile_names(cwd)
        r = cli("report", "--campaign", "h", "--runs", cwd=cwd, timeout=120)
        _no_traceback(r)
        assert r.returncode == 0, r.tail()
        listing = cli("runs", cwd=cwd, timeout=60)
        assert listing.returncode == 0 and not _raw_controls(listing.stdout), listing.tail()  # the control
        assert not _raw_controls(r.stdout + r.stderr), f"raw controls in the report: {_raw_controls(r.stdout)!r}"


def test_compare_error_lists_stored_agent_names_escaped() -> None:
    """`assay compare A B` with an agent the campaign does not hold: the error lists the agents
    there, hostile names included, raw."""
    with workdir("compare-esc") as cwd:
        _import_hostile_names(cwd)
        r = cli("compare", "nobody", "darebench:plain", "--campaign", "h", cwd=cwd, timeout=60)
        _no_traceback(r)
        assert r.returncode == 2, r.tail()
        assert not _raw_controls(r.stderr), f"raw controls in the error: {r.stderr!r}"


def test_show_of_a_hostile_imported_scenario_run_is_escaped() -> None:
    """Control: an FDE-Gym run whose slug, model, summary, incidents, gates and flags carry ESC
    sequences; `assay show RUN` prints every part of it."""
    with workdir("show-esc") as cwd:
        folder = cwd / "runs" / "eng.v1-L0-slug-1"
        folder.mkdir(parents=True)
        (folder / "result.json").write_text(json.dumps({
            "engagement": "eng", "level": "L0", "variant": "base", "kpi": 0.5, "kpi_baseline": 0.0,
            "kpi_oracle": 1.0, "incidents": [f"inc{CLEAR}", {"why": OSC_TITLE}], "summary": f"sum{CLEAR}{RLO}",
            "gates": {f"g{CLEAR}": OSC_TITLE}, "uplift": 0.5, "uplift_bounded": 0.5,
            "discovery": {"facts_obtained": [f"f{CLEAR}"], "asked_by_person": {f"p{OSC_TITLE}": 1}},
            "agent": {"end_reason": "finished", "slug": f"s{CLEAR}", "model": f"m{OSC_TITLE}",
                      "summary": f"final{CLEAR}{RLO}", "flags": [f"rm -rf /{CLEAR}"]},
            "rep": 1}))
        r = cli("import", "fdegym", "runs", "--create", cwd=cwd, timeout=60)
        assert r.returncode == 0, r.tail()
        con = sqlite3.connect(f"file:{cwd / '.assay' / 'assay.db'}?mode=ro", uri=True)
        try:
            run_id = con.execute("SELECT run_id FROM runs").fetchone()[0]
        finally:
            con.close()
        s = cli("show", run_id, cwd=cwd, timeout=60)
        _no_traceback(s)
        assert s.returncode == 0, s.tail()
        assert not _raw_controls(s.stdout + s.stderr), f"raw controls in assay show: {_raw_controls(s.stdout)!r}"


# --------------------------------------------------------------------------- report files


def test_markdown_report_carries_no_raw_html_from_stored_names() -> None:
    """`assay report --md` is meant for papers and pull requests: rendered by Markdown viewers
    (many render raw HTML). An imported model name `<img src=x onerror=...>` and a task id
    `<script>...` go into its cells with only controls and pipes escaped."""
    with workdir("md-html") as cwd:
        _import_hostile_names(cwd)
        r = cli("report", "--campaign", "h", "--md", "r.md", cwd=cwd, timeout=120)
        assert r.returncode == 0, r.tail()
        md = (cwd / "r.md").read_text()
        assert "<img" not in md and "<script" not in md, "raw HTML from stored names in the Markdown report"


def test_html_report_escapes_the_markup_of_stored_names() -> None:
    """Control: the same names in `assay report --html`: text in tables and SVG titles escaped,
    the runs table's JSON safe inside its script element."""
    with workdir("html-markup") as cwd:
        _import_hostile_names(cwd)
        r = cli("report", "--campaign", "h", "--html", "r.html", cwd=cwd, timeout=120)
        assert r.returncode == 0, r.tail()
        page = (cwd / "r.html").read_text()
        assert "<img src=x" not in page and "<script>alert" not in page


def test_html_report_shows_control_and_bidi_characters_of_names_escaped() -> None:
    """The same names in `assay report --html`: a bidi override (U+202E) reverses the rest of an
    agent's name in the leaderboard and plot labels (`gnp.exe` reads `exe.png`), as every other
    view of assay (terminal, Markdown, the web app) escapes it."""
    with workdir("html-bidi") as cwd:
        _import_hostile_names(cwd)
        r = cli("report", "--campaign", "h", "--html", "r.html", cwd=cwd, timeout=120)
        assert r.returncode == 0, r.tail()
        page = (cwd / "r.html").read_text()
        assert RLO not in page and "\x1b" not in page, "raw bidi/ESC characters of stored names in the HTML report"


# --------------------------------------------------------------------------- the web app


def _http(method: str, url: str, body: Any = None, timeout: float = 30) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data is not None else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw[:1] in (b"{", b"[") else raw.decode(errors="replace")
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, raw.decode(errors="replace")


class _Prober:
    """GET /healthz every 0.1 s from a thread; the slowest answer."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.worst = 0.0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            t0 = time.monotonic()
            with contextlib.suppress(OSError):
                _http("GET", self.base + "/healthz", timeout=20)
            self.worst = max(self.worst, time.monotonic() - t0)
            time.sleep(0.1)

    def __enter__(self) -> _Prober:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.thread.join(timeout=30)


def _wait_running(base: str, sid: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code, view = _http("GET", f"{base}/api/play/{sid}")
        if code == 200 and isinstance(view, dict) and view.get("state") == "running":
            return
        time.sleep(0.5)
    raise AssertionError(f"session {sid} did not start: {view}")


@pytest.mark.skipif(not bwrap_ok(), reason="needs bubblewrap")
def test_starting_a_play_in_a_big_campaign_does_not_stall_other_users() -> None:
    """A visitor starts play sessions naming an existing campaign of 20,000 (imported) runs:
    `PlayManager._epoch` reads every record of the campaign (`store.all_attempts`) on the
    server's event loop, inside `async def api_play_start`. /healthz of everyone else waits."""
    from tests.helpers import served

    with workdir("play-big") as cwd:
        answer_task(cwd / "suite" / "t", second=False)
        _darebench(cwd / "big.json", "m", "t", runs=20_000)
        r = cli("import", "darebench", "big.json", "--campaign", "big", "--create", cwd=cwd, timeout=300)
        assert r.returncode == 0, r.tail()
        with served(cwd, "--suite", "suite") as (base, _port, _proc):
            code, _ = _http("GET", base + "/healthz")
            assert code == 200
            with _Prober(base) as small:  # the control: a start in a small campaign
                code, s0 = _http("POST", base + "/api/play", {"task_id": "t", "name": "alice"}, timeout=60)
                time.sleep(1.0)
            assert code == 200, s0
            results: list[tuple[int, Any]] = []

            def start(n: int) -> None:
                results.append(_http("POST", base + "/api/play", {"task_id": "t", "name": f"bob{n}",
                                                                  "campaign": "big"}, timeout=120))

            with _Prober(base) as big:
                starters = [threading.Thread(target=start, args=(n,)) for n in range(3)]
                for t in starters:
                    t.start()
                for t in starters:
                    t.join(timeout=180)
                time.sleep(1.0)
            assert all(c == 200 for c, _ in results), results
            assert big.worst < max(1.5, 3 * small.worst), (
                f"/healthz waited {big.worst:.1f} s while three sessions started in the big campaign "
                f"({small.worst:.2f} s for a start in a small one)")


@pytest.mark.skipif(not bwrap_ok(), reason="needs bubblewrap")
def test_workbench_tree_and_open_do_not_follow_links_to_the_host() -> None:
    """Control: a person's session links `/` and `/proc/self/root` (the worker is root's) into the
    workspace, then asks the workbench's file tree and editor for paths through them, `..`,
    absolute paths and a 5,000-character name: each refused, nothing of the host shown."""
    from tests.helpers import served

    with workdir("wb-links") as cwd:
        answer_task(cwd / "suite" / "t", second=False)
        with served(cwd, "--suite", "suite") as (base, _port, _proc):
            code, s0 = _http("POST", base + "/api/play", {"task_id": "t", "name": "alice"}, timeout=60)
            assert code == 200, s0
            sid = s0["session"]
            _wait_running(base, sid)
            code, out = _http("POST", f"{base}/api/play/{sid}/action",
                              {"tool": "run_command", "args": {"command": "ln -s / root; ln -s /proc/self/root pr"}})
            assert code == 200, out
            with _Prober(base) as probe:
                for path in ("root", "pr/etc", "../../..", "/etc", "root/etc", "a" * 5000):
                    code, out = _http("GET", f"{base}/api/play/{sid}/tree?path={urllib.parse.quote(path)}")
                    assert code in (400, 409, 414, 431), (path, code, str(out)[:300])
                    assert "shadow" not in json.dumps(out) and "passwd" not in json.dumps(out), (path, out)
                for path in ("root/etc/shadow", "pr/etc/passwd", "root/dev/zero"):
                    code, out = _http("POST", f"{base}/api/play/{sid}/open", {"path": path})
                    assert "root:" not in json.dumps(out), (path, out)
            assert probe.worst < 2.0, probe.worst
