"""Round 6 red team: stalls, hostile files, the web app (play polls in windows), import caps.

Each test drives the real CLI or the real `assay serve` with the real bubblewrap sandbox. An
attack that broke a defence (found in round 6, fixed since) asserts the secure behaviour;
one that holds is a passing test whose docstring starts "Control:".
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import answer_task, assay, report, served

pytestmark = [pytest.mark.slow]

BWRAP = shutil.which("bwrap") is not None


def _nest(base: Path, depth: int, name: str = "d") -> None:
    """`depth` folders nested in `base`, made through descriptors (no path grows past PATH_MAX,
    and no Python recursion, which `os.makedirs` has)."""
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir(name, dir_fd=fd)
            nfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nfd
        with open(os.open("leaf.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as f:
            f.write("leaf\n")
    finally:
        os.close(fd)


def _clean_exit_2(r: Any, name: str) -> None:
    assert "Traceback" not in r.stderr + r.stdout, (r.stderr + r.stdout)[-1500:]
    assert r.returncode == 2, (r.returncode, (r.stderr + r.stdout)[-1500:])
    assert name in r.stderr


def _script(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def _rm_deep(path: Path) -> None:
    """Remove a tree too deep for `shutil.rmtree` on Python 3.11 (it recurses)."""
    import subprocess
    subprocess.run(["rm", "-rf", str(path)], check=False)


# ---------------------------------------------------------------- hostile task files


def test_task_workspace_folder_nested_past_pythons_recursion_limit_is_exit_2(tmp_path: Path) -> None:
    """A suite from anywhere ships `t1/workspace/d/d/.../d/leaf.txt`, 1,100 folders deep (a
    2,200-character path, well inside PATH_MAX). The task's content hash walks it with one
    Python frame per level. A user running `assay validate suite` (or `assay run`) sees a
    RecursionError traceback, not a one-line refusal naming the folder."""
    t = answer_task(tmp_path / "suite" / "t1")
    _nest(t / "workspace", 1100)
    t0 = time.monotonic()
    try:
        r = assay("validate", str(tmp_path / "suite"), cwd=tmp_path)
        assert time.monotonic() - t0 < 30
        _clean_exit_2(r, "workspace")
        r = assay("run", str(tmp_path / "suite"), "--agent", "noop", cwd=tmp_path)
        _clean_exit_2(r, "workspace")
        assert not (tmp_path / ".assay").exists() or "t1" not in assay("runs", cwd=tmp_path).stdout
    finally:
        _rm_deep(tmp_path / "suite")


def test_suite_with_a_folder_nested_past_pythons_recursion_limit_is_exit_2(tmp_path: Path) -> None:
    """A suite holds one good task and, beside it, `e/e/.../e` 1,100 folders deep (no task in
    it). Task discovery walks the suite with `os.walk`, which on Python 3.11 recurses once per
    level. `assay validate suite` ends in a RecursionError traceback instead of either skipping
    the folder or refusing it with exit 2 naming it."""
    answer_task(tmp_path / "suite" / "t1")
    _nest(tmp_path / "suite", 1100, "e")
    try:
        r = assay("validate", str(tmp_path / "suite"), cwd=tmp_path)
        assert "Traceback" not in r.stderr + r.stdout, (r.stderr + r.stdout)[-1500:]
        assert r.returncode in (0, 2), r.returncode
        if r.returncode == 2:
            assert "suite" in r.stderr
    finally:
        _rm_deep(tmp_path / "suite")


def test_task_workspace_folder_64_deep_still_validates(tmp_path: Path) -> None:
    """Control: an ordinary deep-ish task workspace (64 levels) validates and hashes, so a fix
    for the recursion must not refuse real suites."""
    t = answer_task(tmp_path / "suite" / "t1")
    _nest(t / "workspace", 64)
    r = assay("validate", str(tmp_path / "suite"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr


# ---------------------------------------------------------------- an agent's workspace the harness walks


@pytest.mark.skipif(not BWRAP, reason="needs bubblewrap")
def test_agent_workspace_nested_3000_deep_is_graded_and_other_runs_go_on(tmp_path: Path) -> None:
    """Control: the agent makes `d/d/.../d` 3,000 folders deep in its workspace (through
    descriptors, inside the sandbox), then writes the right answer; a second task runs in the
    same campaign. The copy out, the grading copy, the audit's walk and the clean-up (where
    `shutil.rmtree` on 3.11 would recurse) are all depth-capped or iterative: the attacker's
    run is done and passed, the other run too, within seconds, and the kept workspace says
    deeper folders were left out."""
    answer_task(tmp_path / "suite" / "t1")
    answer_task(tmp_path / "suite" / "t2")
    mk = ("import os\nfd=os.open('.',os.O_RDONLY)\nfor i in range(3000):\n"
          "    os.mkdir('d',dir_fd=fd); n=os.open('d',os.O_RDONLY,dir_fd=fd); os.close(fd); fd=n\nprint('made', i+1)\n")
    agent = _script(tmp_path / "deep.jsonl", [
        {"tool": "write_file", "args": {"path": "mk.py", "content": mk}},
        {"tool": "run_command", "args": {"command": "python3 mk.py"}},
        {"tool": "write_file", "args": {"path": "answer.txt", "content": "42\n"}},
        {"say": "done"}])
    t0 = time.monotonic()
    r = assay("run", str(tmp_path / "suite"), "--agent", f"script:{agent}", cwd=tmp_path)
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    assert took < 120, took
    rows = report(tmp_path)
    text = json.dumps(rows)
    assert "void" in text
    runs = assay("runs", cwd=tmp_path).stdout
    assert runs.count("1.000 pass") == 2, runs


# ---------------------------------------------------------------- the web app: play polls in windows


def _req(url: str, body: dict[str, Any] | None = None, timeout: float = 60) -> tuple[int, Any, float]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST" if body is not None else "GET",
                                 headers={"Content-Type": "application/json"} if body is not None else {})
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None, time.monotonic() - t0
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw), time.monotonic() - t0
        except ValueError:
            return e.code, raw.decode(errors="replace"), time.monotonic() - t0


def _play_session(base: str) -> str:
    code, body, _ = _req(f"{base}/api/play", {"task_id": "t1", "name": "mallory"})
    assert code == 200, body
    sid = body["session"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        code, v, _ = _req(f"{base}/api/play/{sid}")
        if code == 200 and v.get("state") == "running":
            return str(sid)
        time.sleep(0.3)
    raise AssertionError(f"the session did not start: {v}")


@pytest.mark.skipif(not BWRAP, reason="needs bubblewrap")
def test_play_poll_from_the_start_of_a_big_session_answers_in_windows(tmp_path: Path) -> None:
    """Control: a visitor fills a play session with 12 `write_file` actions of 600 KB each (a
    7 MB transcript, the tool-call events carrying the content), then four clients poll
    `/api/play/{id}?since=0` over and over. Each answer is a window of about POLL_BYTES (1 MiB)
    with `more: true` and a `next`; following `next` reaches every event once; `/healthz`
    meanwhile answers within 5 s. Odd `since` values (-5, 10**30, 'abc') are answered, never a
    500."""
    answer_task(tmp_path / "suite" / "t1")
    with served(tmp_path, "--suite", str(tmp_path / "suite")) as (base, port, _proc):
        sid = _play_session(base)
        blob = "x" * 600_000
        for i in range(12):
            code, body, _ = _req(f"{base}/api/play/{sid}/action",
                                 {"tool": "write_file", "args": {"path": f"f{i}.txt", "content": blob}})
            assert code == 200, body
        # follow the windows
        since, seen, windows, biggest = 0, [], 0, 0
        while True:
            code, v, _ = _req(f"{base}/api/play/{sid}?since={since}")
            assert code == 200, v
            size = len(json.dumps(v["events"]))
            biggest = max(biggest, size)
            windows += 1
            seen += [e for e in v["events"]]
            if not v["more"]:
                break
            assert v["next"] > since
            since = v["next"]
            assert windows < 100
        assert windows >= 4, windows
        assert biggest < 3 * 600_000 + 200_000, biggest  # a window, not the transcript
        assert sum(1 for e in seen if "600000" in json.dumps(e) or blob[:1000] in json.dumps(e)) >= 12

        stop = threading.Event()
        slow: list[float] = []

        def poll() -> None:
            while not stop.is_set():
                try:  # from another loopback address: the per-address request budget is its own
                    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60, source_address=("127.0.0.2", 0))
                    c.request("GET", f"/api/play/{sid}?since=0")
                    c.getresponse().read()
                    c.close()
                except OSError:
                    time.sleep(0.1)

        threads = [threading.Thread(target=poll, daemon=True) for _ in range(4)]
        for t in threads:
            t.start()
        try:
            for _ in range(20):
                code, _b, took = _req(f"{base}/healthz", timeout=30)
                assert code == 200
                slow.append(took)
                time.sleep(0.2)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=60)
        assert max(slow) < 5, slow
        for odd in ("-5", str(10**30), "abc", "1e3"):
            code, v, _ = _req(f"{base}/api/play/{sid}?since={odd}")
            assert code in (200, 400, 422), (odd, code, v)


@pytest.mark.skipif(not BWRAP, reason="needs bubblewrap")
def test_many_small_events_then_a_poll_from_zero_stays_a_window(tmp_path: Path) -> None:
    """Control: 300 tiny actions (`list_files`), each adding a call and a result, make many
    small events; a poll from 0 answers at most ~1 MiB; the window's `next` is an index of an
    event the window did not include (no event lost or repeated at the seams)."""
    answer_task(tmp_path / "suite" / "t1")
    with served(tmp_path, "--suite", str(tmp_path / "suite")) as (base, _port, _proc):
        sid = _play_session(base)
        for i in range(40):
            code, body, _ = _req(f"{base}/api/play/{sid}/action",
                                 {"tool": "write_file", "args": {"path": f"g{i}.txt", "content": "y" * 90_000}})
            assert code == 200, body
        code, v, _ = _req(f"{base}/api/play/{sid}?since=0")
        assert code == 200
        assert v["more"] is True
        assert len(json.dumps(v["events"]).encode()) < (1 << 20) + 200_000
        total: list[int] = []
        since = 0
        while True:
            code, v, _ = _req(f"{base}/api/play/{sid}?since={since}")
            evs = v["events"]
            total.append(len(evs))
            if not v["more"]:
                break
            since = v["next"]
        contents = 0
        since = 0
        while True:
            code, v, _ = _req(f"{base}/api/play/{sid}?since={since}")
            contents += sum(json.dumps(e).count("y" * 90_000) for e in v["events"])
            if not v["more"]:
                break
            since = v["next"]
        assert contents >= 40, (contents, total)


# ---------------------------------------------------------------- imports: caps on costs and durations


def _dare(tmp_path: Path, name: str, **usage: Any) -> Path:
    doc = {"model": "openai/gpt-4o", "tasks": [
        {"task_id": "task_finqa_00", "status": "success", "execution_time": 1.0,
         "usage": {"input_tokens": 10, "output_tokens": 2, **usage},
         "grading": {"runs": [{"task_id": "task_finqa_00", "score": 1.0, "max_score": 1.0,
                               "grading_type": "automated", "breakdown": {}}]}}]}
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


def test_darebench_import_with_a_price_that_makes_a_cost_past_the_cap_is_exit_2(tmp_path: Path) -> None:
    """Control: `assay.toml` prices the model at 10^9 dollars per million tokens and a
    DareBench results file claims 10^12 output tokens (within MAX_COUNT), so the computed cost is
    10^15 dollars, past MAX_AMOUNT: `assay import darebench` refuses with exit 2 naming the
    run's `usage.cost_usd`, writes nothing. Token counts of "1e999", 1e300 or "NaN"
    are refused too."""
    (tmp_path / "assay.toml").write_text('[prices."openai/gpt-4o"]\ninput = 1e9\noutput = 1e9\n')
    p = _dare(tmp_path, "pricey.json", output_tokens=10**12)
    r = assay("import", "darebench", str(p), cwd=tmp_path)
    _clean_exit_2(r, "pricey.json")
    assert "cost_usd" in r.stderr
    assert not (tmp_path / ".assay").exists()
    for i, bad in enumerate(("1e999", 1e300, "NaN")):
        q = _dare(tmp_path, f"odd{i}.json", output_tokens=bad)
        r = assay("import", "darebench", str(q), cwd=tmp_path)
        _clean_exit_2(r, f"odd{i}.json")
    assert not (tmp_path / ".assay").exists()


def test_darebench_import_a_total_tokens_surplus_stays_within_the_count_cap(tmp_path: Path) -> None:
    """Control (bound on stored counts): a negative `input_tokens` of -10^12 beside `output_tokens`
    and `total_tokens` at MAX_COUNT: the surplus of `total_tokens` over the itemised counts is
    counted as output after the per-field check, so it is the one count not checked by the
    field bounds. Either the import refuses it (exit 2) or every stored token count is at most
    MAX_COUNT; never a traceback."""
    from assay.interop.runs import MAX_COUNT
    from assay.store import Store

    p = _dare(tmp_path, "surplus.json", output_tokens=10**12, input_tokens=-(10**12), total_tokens=10**12)
    r = assay("import", "darebench", str(p), cwd=tmp_path)
    assert "Traceback" not in r.stderr, r.stderr
    if r.returncode == 2:
        return
    assert r.returncode == 0, r.stderr
    st = Store(f"sqlite:///{tmp_path / '.assay' / 'assay.db'}")
    try:
        for rec in st.runs("darebench"):
            for name in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
                assert abs(getattr(rec.usage, name)) <= MAX_COUNT, (name, getattr(rec.usage, name))
    finally:
        st.close()
