"""Sign-in in a real browser: Alice pastes her token, plays a task, and her run is `human:alice`.

The server is the real `assay serve` on a free 127.0.0.1 port with an account made by the
real `assay users add`; the browser is Debian's Chromium driven by Playwright (never
`playwright install`).
"""

from __future__ import annotations

import os
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


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    tmp = tmp_path_factory.mktemp("web-accounts")
    os.chmod(tmp, 0o711)  # sandbox uids need search permission on the workspace's parents
    answer_task(tmp / "suite" / "answer")
    store = f"sqlite:///{tmp / 'store.db'}"
    added = assay("users", "add", "alice", "--store", store, cwd=tmp)
    assert added.returncode == 0, added.stderr
    with served(tmp, "--store", store, "--suite", str(tmp / "suite")) as (base, _port, _proc):
        yield {"base": base, "tmp": tmp, "token": added.stdout.strip()}


def test_sign_in_play_and_the_run_is_human_alice(site: dict[str, object]) -> None:
    base, tmp = str(site["base"]), Path(str(site["tmp"]))
    with chromium(tmp / "browser-home") as browser:
        page = browser.new_page()
        page.goto(base + "/play")  # not signed in: sent to the sign-in page, and back afterwards
        page.wait_for_url("**/signin?next=*")
        page.locator("#signin input[name=token]").fill("not-the-token")
        page.locator("#signin button[type=submit]").click()
        sync_api.expect(page.locator("p.error")).to_contain_text("not valid")
        page.locator("#signin input[name=token]").fill(str(site["token"]))
        page.locator("#signin button[type=submit]").click()
        page.wait_for_url(base + "/play")
        sync_api.expect(page.locator("#me")).to_have_text("alice")
        cookie = next(c for c in page.context.cookies() if c["name"] == "assay_session")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and not cookie["secure"], cookie
        form = page.locator("tr[data-task=answer] form.start")
        assert form.locator("input[name=name]").count() == 0  # the account plays, no name to type
        form.locator("button[type=submit]").click()
        page.wait_for_url("**/play/*/workbench")  # a started session opens the workbench
        page.get_by_role("link", name="forms view").click()  # the forms view of the same session
        page.wait_for_url(lambda url: not url.endswith("/workbench"))
        sync_api.expect(page.locator("h1 .agent")).to_have_text("human:alice")
        sync_api.expect(page.locator("#state")).to_have_text("running", timeout=30_000)
        cmd = page.locator("form.tool[data-tool=run_command]")
        cmd.locator("input[name=command]").fill("echo 42 > answer.txt && echo wrote-$((40+2))")
        cmd.locator("button[type=submit]").click()  # a fetch() post: carries X-CSRF-Token
        sync_api.expect(page.locator("#log .ev-tool_result pre.out").last).to_contain_text("wrote-42",
                                                                                         timeout=30_000)
        page.locator("#submit-form textarea[name=answer]").fill("done")
        page.locator("#submit-form button[type=submit]").click()
        sync_api.expect(page.locator("#state")).to_have_text("done", timeout=60_000)
        sync_api.expect(page.locator("#result")).to_contain_text("passed")
        page.screenshot(path=str(tmp / "accounts-play.png"), full_page=True)
        page.goto(base + "/")
        board = page.locator("table.board[data-campaign=default]").first
        sync_api.expect(board).to_contain_text("human:alice")
        page.screenshot(path=str(tmp / "accounts-leaderboard.png"), full_page=True)
        # signing out ends the session: the next page is the sign-in page again
        page.locator("form.signout button[type=submit]").click()
        page.wait_for_url("**/signin")
        page.goto(base + "/")
        page.wait_for_url("**/signin?next=*")
        page.close()
    if os.environ.get("ASSAY_KEEP_SCREENSHOTS"):
        dest = Path(os.environ["ASSAY_KEEP_SCREENSHOTS"])
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("accounts-play.png", "accounts-leaderboard.png"):
            (dest / name).write_bytes((tmp / name).read_bytes())
