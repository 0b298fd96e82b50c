"""The workbench in a real browser: a whole scenario session, a reload and a server restart
mid-way, and the score equal to `assay run` with a script agent doing the same things.

The server is the real `assay serve` (an account from the real `assay users add`) over the
native refund-desk scenario; the browser is Debian's Chromium driven by Playwright. The
server is stopped with SIGTERM mid-session and started again on the same store: the session
resumes by replaying its recorded actions (docs/web.md, "Workbench").
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from assay.env.bwrap import bwrap_available
from tests.browser import CHROMIUM, chromium
from tests.helpers import REPO, answer_task, assay, free_port, report, start_server, stop_process

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
pytestmark = [
    pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is not installed (scripts/setup-system.sh)"),
    pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed"),
]

SUITE = REPO / "suites" / "starter" / "scenarios-native"
TASK = "refund-desk-native/base"
ANCHOR = '    if amount <= RULES["auto_approve_limit"]:\n'
FIX_CHECK = ('    # Trust & Safety: serial returners go to a human before money goes out.\n'
             '    orders = max(1, int(request.get("orders_12m") or 0))\n'
             '    if int(request.get("account_age_days") or 0) < 90 and '
             'int(request.get("returns_12m") or 0) / orders >= 0.5:\n'
             '        return "review"\n\n')
Q_MEI = "Is there an abuse pattern behind the refunds? In the history I counted 312 refunds flagged abuse_confirmed."
Q_RUTH = "Which finance controls must stay in place, the FC-7 hard cap?"
TEST_CMD = "cd system && python3 -m unittest discover -s tests 2>&1 | tail -3"
NOTE = "Serial returners (abuse) now go to review; auto-approve limit raised to $150; FC-7 hard cap kept."
EDITOR_LINES = 100_000


def _ask(page: Any, who: str, question: str, expect_in_reply: str | None = None) -> None:
    n = page.locator("#chat pre.msg-them").count()
    page.locator("#ask-form input[name=to]").fill(who)
    page.locator("#ask-form input[name=message]").fill(question)
    page.locator("#ask-form button[type=submit]").click()
    sync_api.expect(page.locator("#chat pre.msg-them")).to_have_count(n + 1, timeout=30_000)
    if expect_in_reply:
        sync_api.expect(page.locator("#chat pre.msg-them").last).to_contain_text(expect_in_reply)


def _edit(page: Any, path: str, old: str, new: str) -> str:
    """Open `path` from the file tree, replace `old` by `new` in the editor, save; the saved text."""
    page.locator(f"#tree a[data-path='{path}']").click()
    sync_api.expect(page.locator("#editor-path")).to_have_text(path, timeout=30_000)
    sync_api.expect(page.locator("#editor")).to_be_editable()
    text = page.locator("#editor").input_value()
    assert old in text, text[:2000]
    text = text.replace(old, new, 1)
    page.locator("#editor").fill(text)
    page.locator("#save").click()
    sync_api.expect(page.locator("#editor-note")).to_contain_text("wrote", timeout=30_000)
    return str(text)


def _wait_running(page: Any, timeout: float = 90_000) -> None:
    sync_api.expect(page.locator("#state")).to_have_text("running", timeout=timeout)


def test_a_whole_scenario_in_the_workbench_scores_as_the_cli(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o711)  # sandbox uids need search permission on the workspace's parents
    store = f"sqlite:///{tmp_path / 'store.db'}"
    added = assay("users", "add", "alice", "--store", store, cwd=tmp_path)
    assert added.returncode == 0, added.stderr
    token = added.stdout.strip()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    logs = [tmp_path / "serve1.log", tmp_path / "serve2.log"]
    proc = start_server(tmp_path, "--store", store, "--suite", str(SUITE), port=port, log=logs[0])
    actions: list[dict[str, Any]] = []  # what the person did, for the script agent
    try:
        with chromium(tmp_path / "browser-home") as browser:
            page = browser.new_page()
            page.goto(base + "/play")
            page.wait_for_url("**/signin?next=*")
            page.locator("#signin input[name=token]").fill(token)
            page.locator("#signin button[type=submit]").click()
            page.wait_for_url(base + "/play")
            form = page.locator(f"tr[data-task='{TASK}'] form.start")
            form.locator("select[name=level]").select_option("L3")
            form.locator("button[type=submit]").click()
            page.wait_for_url("**/play/*/workbench")  # a started session opens the workbench
            _wait_running(page)
            # the brief, and the file tree of the workspace
            sync_api.expect(page.locator("#brief")).to_contain_text("bin/ask")
            sync_api.expect(page.locator("#tree a[data-path='system/refunds.py']")).to_be_visible()
            # the people: the directory (never the hidden prices), then two questions
            page.locator("#who").click()
            sync_api.expect(page.locator("#chat pre.msg-them").first).to_contain_text("mei", timeout=30_000)
            directory = page.locator("#chat pre.msg-them").first.inner_text()
            assert "cost" not in directory.lower() and "$" not in directory
            actions.append({"tool": "run_command", "args": {"command": "bin/ask --who"}})
            _ask(page, "mei", Q_MEI)
            actions.append({"tool": "run_command", "args": {"command": f"bin/ask mei '{Q_MEI}'"}})
            # the editor: open from the tree (a read_file turn), change, save (a write_file turn)
            code = _edit(page, "system/refunds.py", ANCHOR, FIX_CHECK + ANCHOR)
            actions += [{"tool": "read_file", "args": {"path": "system/refunds.py", "limit": EDITOR_LINES}},
                        {"tool": "write_file", "args": {"path": "system/refunds.py", "content": code}}]
            # the console: the scenario's tests, through the sandbox
            page.locator("#console-in").fill(TEST_CMD)
            page.locator("#console-in").press("Enter")
            sync_api.expect(page.locator("#console-out pre.cmd-out").last).to_contain_text("OK", timeout=60_000)
            actions.append({"tool": "run_command", "args": {"command": TEST_CMD}})
            page.screenshot(path=str(tmp_path / "workbench-1-working.png"), full_page=True)
            # a reload: the console's scrollback, the chat and the timeline come back
            page.reload()
            _wait_running(page)
            sync_api.expect(page.locator("#console-out .cmd-line")).to_contain_text(["$ " + TEST_CMD])
            sync_api.expect(page.locator("#chat pre.msg-them")).to_have_count(2)
            page.locator("#console-in").press("ArrowUp")  # command history
            assert page.locator("#console-in").input_value() == TEST_CMD
            page.locator("#console-in").fill("")
            # a server restart (SIGTERM): the page reconnects, the session resumes where it was
            first_boot = page.locator("#wb").get_attribute("data-boot")
            stop_process(proc, timeout=30)
            assert proc.returncode == 0, logs[0].read_text()[-3000:]
            assert "stopped (SIGTERM)" in logs[0].read_text()
            proc = start_server(tmp_path, "--store", store, "--suite", str(SUITE), port=port, log=logs[1])
            sync_api.expect(page.locator("#wb")).not_to_have_attribute("data-boot", first_boot or "", timeout=60_000)
            sync_api.expect(page.locator("#state")).to_have_text("running", timeout=120_000)
            sync_api.expect(page.locator("#turns")).to_have_text(str(len(actions)), timeout=30_000)
            sync_api.expect(page.locator("#chat pre.msg-them")).to_have_count(2)
            sync_api.expect(page.locator("#console-out .cmd-line")).to_contain_text(["$ " + TEST_CMD])
            page.screenshot(path=str(tmp_path / "workbench-2-resumed.png"), full_page=True)
            # still signed in (the sign-in is in the store), and the work goes on
            _ask(page, "ruth", Q_RUTH)
            actions.append({"tool": "run_command", "args": {"command": f"bin/ask ruth '{Q_RUTH}'"}})
            rules = _edit(page, "system/refund_rules.json", '"auto_approve_limit": 60.0', '"auto_approve_limit": 150.0')
            actions += [{"tool": "read_file", "args": {"path": "system/refund_rules.json", "limit": EDITOR_LINES}},
                        {"tool": "write_file", "args": {"path": "system/refund_rules.json", "content": rules}}]
            note_cmd = f"printf '%s\\n' '{NOTE}' > deliverables/NOTE.md"
            page.locator("#console-in").fill(note_cmd)
            page.locator("#console-in").press("Enter")
            sync_api.expect(page.locator("#console-out pre.cmd-out").last).to_contain_text("exit code 0",
                                                                                          timeout=30_000)
            actions.append({"tool": "run_command", "args": {"command": note_cmd}})
            page.locator("#submit-form textarea[name=answer]").fill(NOTE)
            page.locator("#submit-form button[type=submit]").click()
            actions.append({"say": NOTE})
            sync_api.expect(page.locator("#state")).to_have_text("done", timeout=120_000)
            score_el = page.locator("#score")
            sync_api.expect(score_el).to_be_visible()
            web_score = float(score_el.get_attribute("data-score") or "nan")
            run_id = (page.locator("#run-link").get_attribute("href") or "").rsplit("/", 1)[-1]
            page.screenshot(path=str(tmp_path / "workbench-3-done.png"), full_page=True)
            page.close()
    finally:
        stop_process(proc, timeout=30)
    log_text = "".join(p.read_text() for p in logs)
    assert "POST /signin 303" in log_text and "POST /api/play/" in log_text and "/healthz 200" in log_text
    assert token not in log_text and "assay_session=" not in log_text and "Traceback" not in log_text
    # the same actions by a script agent through `assay run`: the same score
    script = tmp_path / "same.jsonl"
    script.write_text("".join(json.dumps(a) + "\n" for a in actions))
    cli = tmp_path / "cli"
    cli.mkdir(mode=0o711)
    r = assay("run", str(SUITE), "--task", TASK, "--level", "L3", "--agent", f"script:{script}", "-q", cwd=cli)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (cli_run,) = report(cli)["runs"]
    shown = assay("show", run_id, "--json", "--store", store, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    web_run = json.loads(shown.stdout)["run"]
    assert web_run["agent"] == "human:alice" and web_run["status"] == "done" and web_run["end_reason"] == "finished"
    assert web_run["turns"] == len(actions) == cli_run["turns"]
    assert web_run["score"] == pytest.approx(web_score, abs=1e-4)
    assert web_run["score"] == pytest.approx(cli_run["score"], abs=1e-9), (web_run["grade"], cli_run["grade"])
    assert web_run["grade"]["asked_by_person"] == cli_run["grade"]["asked_by_person"] == {"mei": 1, "ruth": 1}
    assert web_run["score"] > 0.5 and web_run["passed"]


def test_a_session_past_its_time_limit_at_restart_is_replayed_and_graded_as_it_stands() -> None:
    """Over the API: the person writes the answer, the server stops (SIGTERM) before the time
    limit, and starts again after it: the session's actions are replayed and the run ends
    with max_time, graded on the workspace as it stood, stored once."""
    from tests.security._support import workdir
    from tests.security.test_web_auth import add_user, bearer, hget, hpost, serve

    with workdir("wb-restart") as wd:
        answer_task(wd / "suite" / "quick", budget={"minutes": 0.1})
        store = f"sqlite:///{wd / 'store.db'}"
        h = bearer(add_user(wd, store, "alice"))
        with serve(wd, store) as site:
            r = hpost(site["base"] + "/api/play", json={"task_id": "quick"}, headers=h)
            assert r.status_code == 200, r.text
            sid = r.json()["session"]
            r = hpost(f"{site['base']}/api/play/{sid}/action", headers=h,
                      json={"tool": "write_file", "args": {"path": "answer.txt", "content": "42\n"}})
            assert r.status_code == 200 and r.json()["output"].startswith("wrote"), r.text
            started = time.monotonic()
            stop_process(site["proc"], timeout=30)
            assert site["proc"].returncode == 0
        while time.monotonic() - started < 6.5:  # past the 6 s limit while the server is down
            time.sleep(0.1)
        with serve(wd, store) as site:
            deadline = time.monotonic() + 120
            while (state := hget(f"{site['base']}/api/play/{sid}", headers=h).json())["state"] not in ("done",
                                                                                                     "error"):
                assert time.monotonic() < deadline, state
                time.sleep(0.2)
            run = state["run"]
            assert run["end_reason"] == "max_time" and run["passed"] and run["turns"] == 1, run
            assert state["turns"] == 1
            rep = hget(f"{site['base']}/api/report?campaign=default", headers=h).json()
            assert [x["agent"] for x in rep["runs"]] == ["human:alice"]
        with serve(wd, store) as site:  # nothing left to resume: the session is done
            assert hget(f"{site['base']}/api/play/{sid}", headers=h).status_code == 404
            assert hget(site["base"] + "/healthz").json()["play_sessions"] == 0
