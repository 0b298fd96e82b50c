"""The web app in a real browser: leaderboard, run viewer, JSON API, and human play.

The server is the real `assay serve` in a subprocess on 127.0.0.1 (a free port), over a
store filled by the real `assay run`; the browser is Debian's Chromium driven by Playwright
(never `playwright install`: see docs/platform-notes in the design notes).
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from assay.env.bwrap import bwrap_available
from tests.browser import CHROMIUM, chromium
from tests.helpers import answer_task, assay, served

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
pytestmark = [
    pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is not installed (scripts/setup-system.sh)"),
    pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed"),
]


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    tmp = tmp_path_factory.mktemp("web")
    os.chmod(tmp, 0o711)  # sandbox uids need search permission on the workspace's parents
    suite = tmp / "suite"
    answer_task(suite / "answer")
    # A title with markup: pages must escape it, never render it.
    answer_task(suite / "escaped", want="7", title="<b id=\"injected\">bold</b> & co")
    answer_task(suite / "quick", want="5", title="two seconds", budget={"minutes": 0.04})
    r = assay("run", str(suite), "--agent", "reference", "--agent", "noop", "-q", cwd=tmp)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    store = f"sqlite:///{tmp / '.assay' / 'assay.db'}"
    with served(tmp, "--store", store, "--suite", str(suite)) as (base, _port, _proc):
        yield {"base": base, "tmp": tmp, "store": store}


@pytest.fixture(scope="module")
def browser(site: dict[str, object]) -> Iterator[object]:
    with chromium(Path(str(site["tmp"])) / "browser-home") as b:
        yield b


def test_leaderboard_and_run_viewer(site: dict[str, object], browser: object) -> None:
    base = str(site["base"])
    page = browser.new_page()  # type: ignore[attr-defined]
    page.goto(base + "/")
    board = page.locator("table.board[data-campaign=default]").first
    sync_api.expect(board).to_contain_text("reference")
    sync_api.expect(board).to_contain_text("noop")
    sync_api.expect(page.locator("h3", has_text="contract tasks")).to_be_visible()
    # The campaign page lists runs; the run page shows the transcript and the grade.
    page.click("a[href='/campaigns/default']")
    row = page.locator("table.runs tr", has_text="reference").filter(has_text="answer").first
    row.locator("a.mono").click()
    sync_api.expect(page.locator("h1")).to_contain_text("passed")
    sync_api.expect(page.locator("#grade")).to_contain_text("answer.txt")
    sync_api.expect(page.locator("#grade")).to_contain_text("pattern found")
    sync_api.expect(page.locator("#transcript .ev").first).to_be_visible()
    run_id = page.url.rsplit("/", 1)[1]
    # The JSON API mirrors `assay show --json`.
    status, body = _get(f"{base}/api/runs/{run_id}")
    assert status == 200
    shown = assay("show", run_id, "--store", str(site["store"]), "--json", cwd=Path(str(site["tmp"])))
    assert shown.returncode == 0, shown.stderr
    assert json.loads(body) == json.loads(shown.stdout)
    status, body = _get(f"{base}/api/report?campaign=default")
    assert status == 200 and {a["agent"] for a in json.loads(body)["agents"]} == {"reference", "noop"}
    assert _get(f"{base}/api/report?campaign=nope")[0] == 404
    assert _get(f"{base}/runs/0000000000000000")[0] == 404
    # Task text is escaped, never rendered as markup.
    page.goto(base + "/play")
    sync_api.expect(page.locator("tr[data-task=escaped]")).to_contain_text('<b id="injected">bold</b> & co')
    assert page.locator("#injected").count() == 0
    page.close()


def test_human_play_is_graded_and_stored(site: dict[str, object], browser: object) -> None:
    base = str(site["base"])
    tmp = Path(str(site["tmp"]))
    page = browser.new_page()  # type: ignore[attr-defined]
    page.goto(base + "/play")
    form = page.locator("tr[data-task=answer] form.start")
    form.locator("input[name=name]").fill("ada")
    form.locator("button[type=submit]").click()
    page.wait_for_url("**/play/*/workbench")  # a started session opens the workbench
    page.get_by_role("link", name="forms view").click()  # the forms view of the same session
    page.wait_for_url(lambda url: not url.endswith("/workbench"))
    sync_api.expect(page.locator("#state")).to_have_text("running", timeout=30_000)
    sync_api.expect(page.locator("#brief")).to_contain_text("Write 42 into answer.txt.")
    cmd = page.locator("form.tool[data-tool=run_command]")
    cmd.locator("input[name=command]").fill("echo 42 > answer.txt && cat answer.txt && echo done-$((6*7))")
    cmd.locator("button[type=submit]").click()
    out = page.locator("#log .ev-tool_result pre.out").last
    sync_api.expect(out).to_contain_text("done-42", timeout=30_000)
    sync_api.expect(out).to_contain_text("[exit code 0]")
    # The file tools work through the same forms.
    rd = page.locator("form.tool[data-tool=read_file]")
    rd.locator("input[name=path]").fill("answer.txt")
    rd.locator("button[type=submit]").click()
    sync_api.expect(page.locator("#log .ev-tool_call")).to_have_count(2, timeout=30_000)
    sync_api.expect(page.locator("#log .ev-tool_result pre.out").last).to_contain_text("42")
    page.screenshot(path=str(tmp / "play.png"), full_page=True)
    page.locator("#submit-form textarea[name=answer]").fill("I wrote 42 into answer.txt.")
    page.locator("#submit-form button[type=submit]").click()
    sync_api.expect(page.locator("#state")).to_have_text("done", timeout=60_000)
    sync_api.expect(page.locator("#result")).to_contain_text("passed")
    sync_api.expect(page.locator("#result")).to_contain_text("end reason finished")
    page.locator("#run-link").click()
    sync_api.expect(page.locator("h1")).to_contain_text("passed")
    sync_api.expect(page.locator("dl.facts")).to_contain_text("human:ada")
    transcript = page.locator("#transcript")
    sync_api.expect(transcript).to_contain_text("echo 42 > answer.txt")
    sync_api.expect(transcript).to_contain_text("I wrote 42 into answer.txt.")
    page.screenshot(path=str(tmp / "run.png"), full_page=True)
    # The person joined the models' campaign (`assay run`'s default): ranked beside them, no campaign typed.
    page.goto(base + "/")
    board = page.locator("table.board[data-campaign=default]").first
    sync_api.expect(board).to_contain_text("human:ada")
    sync_api.expect(board).to_contain_text("reference")
    page.screenshot(path=str(tmp / "leaderboard.png"), full_page=True)
    page.close()
    # The run is in the store like any other: the CLI report sees it, recorded as for a model.
    rep = assay("report", "--campaign", "default", "--agent", "human:ada", "--store", str(site["store"]), "--json",
                "h.json", cwd=tmp)
    assert rep.returncode == 0, rep.stderr
    runs = json.loads((tmp / "h.json").read_text())["runs"]
    assert [(r["agent"], r["passed"], r["end_reason"], r["sandbox"]) for r in runs] == [
        ("human:ada", True, "finished", "bwrap")]
    status, body = _get(f"{base}/api/runs/{runs[0]['run_id']}")
    events = [e for e in json.loads(body)["events"]  # past the note of the sandbox limits the run had
              if not (e["kind"] == "harness" and str(e["data"].get("note", "")).startswith("sandbox limits:"))]
    kinds = [e["kind"] for e in events]
    assert kinds == ["user", "assistant", "tool_call", "tool_result", "assistant", "tool_call", "tool_result",
                     "assistant"]
    assert events[2]["data"]["name"] == "run_command"
    assert events[-1]["data"]["content"] == "I wrote 42 into answer.txt."
    if os.environ.get("ASSAY_KEEP_SCREENSHOTS"):
        dest = Path(os.environ["ASSAY_KEEP_SCREENSHOTS"])
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("play.png", "run.png", "leaderboard.png"):
            (dest / name).write_bytes((tmp / name).read_bytes())


def test_play_refuses_bad_input(site: dict[str, object]) -> None:
    base = str(site["base"])

    def post(path: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
        req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    assert post("/api/play", {"task_id": "answer", "name": "bad name!"})[0] == 400
    assert post("/api/play", {"task_id": "nope", "name": "bob"})[0] == 400
    status, started = post("/api/play", {"task_id": "answer", "name": "bob", "campaign": "trial"})
    assert status == 200
    sid = str(started["session"])
    assert post(f"/api/play/{sid}/action", {"tool": "no_such_tool", "args": {}})[0] == 409
    status, out = post(f"/api/play/{sid}/action", {"tool": "read_file", "args": {"path": "../../etc/passwd"}})
    assert status == 200 and str(out["output"]).startswith("error:")
    assert post(f"/api/play/{sid}/action", {"submit": ""}) == (200, {"output": "submitted"})
    deadline = time.monotonic() + 60
    while True:
        state = json.loads(_get(f"{base}/api/play/{sid}")[1])
        if state["state"] in ("done", "error") or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert state["state"] == "done" and state["run"]["passed"] is False
    assert post(f"/api/play/{sid}/action", {"submit": "again"})[0] == 409
    assert _get(f"{base}/api/play/unknown")[0] == 404


def test_play_time_limit_ends_and_grades_the_run(site: dict[str, object]) -> None:
    """A person who runs out of time gets `max_time`, and the workspace is graded as it stands."""
    base = str(site["base"])
    req = urllib.request.Request(base + "/api/play", method="POST", headers={"Content-Type": "application/json"},
                                 data=json.dumps({"task_id": "quick", "name": "slow", "campaign": "trial"}).encode())
    with urllib.request.urlopen(req, timeout=30) as r:
        sid = json.loads(r.read())["session"]
    deadline = time.monotonic() + 60
    while True:
        state = json.loads(_get(f"{base}/api/play/{sid}")[1])
        if state["state"] in ("done", "error") or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert state["state"] == "done", state
    assert state["run"]["end_reason"] == "max_time" and state["run"]["status"] == "done"
    assert state["run"]["passed"] is False
