"""The web leaderboard as a report (issue 11 part 8, issue 13 part 4) in a real browser: the
campaign page shows each kind's plots and the human expert baseline, links each agent to its
runs, filters runs by agent, task, status and score, and opens two runs of one task side by
side (facts, grades, transcripts); a run page offers the other runs of its task. The server is
the real `assay serve` on 127.0.0.1 (a free port), the browser Debian's Chromium through
Playwright. Screenshots are kept under the test's tmp dir."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from assay.record import AssistantEvent, UserEvent
from assay.store import Store
from tests.browser import CHROMIUM, chromium
from tests.helpers import served
from tests.test_report_read import varied

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is not installed")


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=20) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    tmp = tmp_path_factory.mktemp("web-report")
    url = f"sqlite:///{tmp / '.assay' / 'assay.db'}"
    st = Store(url)
    runs = varied("c")
    ids: dict[str, str] = {}
    for r in runs:
        events = []
        if r.key.task_id == "c1":  # a transcript on each agent's run of c1
            events = [UserEvent(seq=0, t=0.0, content="make out.csv"),
                      AssistantEvent(seq=1, t=0.5, content=f"answer of {r.key.agent} <b>not bold</b>")]
            ids[r.key.agent] = r.run_id
        st.save_run(r, events)
    st.close()
    with served(tmp, "--store", url) as (base, _port, _proc):
        yield {"base": base, "tmp": tmp, "ids": ids}


@pytest.fixture(scope="module")
def browser(site: dict[str, object]) -> Iterator[object]:
    with chromium(Path(str(site["tmp"])) / "browser-home") as b:
        yield b


def _page(browser: object) -> tuple[object, list[str]]:
    page = browser.new_page(viewport={"width": 1400, "height": 900})  # type: ignore[attr-defined]
    errors: list[str] = []
    # A failed load is reported by URL below (the browser's own /favicon.ico request aside).
    page.on("console", lambda m: errors.append(m.text)
            if m.type == "error" and not m.text.startswith("Failed to load resource") else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("response", lambda r: errors.append(f"{r.status} {r.url}")
            if r.status >= 400 and not r.url.endswith("/favicon.ico") else None)
    return page, errors


def test_campaign_page_plots_baseline_agent_links_and_filters(site: dict[str, object], browser: object,
                                                              tmp_path: Path) -> None:
    page, errors = _page(browser)
    page.goto(f"{site['base']}/campaigns/c")  # type: ignore[attr-defined]
    for kind in ("rubric", "contract", "scenario"):  # the HTML report's plots, per kind
        assert page.locator(f"#plots-{kind} svg.plot").count() >= 2  # type: ignore[attr-defined]
    assert page.locator("#plots-contract svg.pareto.modality-multimodal").count() == 1  # type: ignore[attr-defined]
    assert "human:alice" in page.locator("#plots-rubric table.human-baseline").inner_text()  # type: ignore[attr-defined]
    rows = page.locator("table.runs tbody tr")  # type: ignore[attr-defined]
    assert rows.count() == 44  # 3 agents x 14 runs, m1's void r3, m2's re-run r3 (its void attempt replaced)
    page.locator("table.board[data-campaign] a", has_text="human:alice").click()  # type: ignore[attr-defined]
    assert "agent=human%3Aalice" in page.url  # type: ignore[attr-defined]
    assert rows.count() == 14 and set(rows.locator("td.agent").all_text_contents()) == {"human:alice"}
    page.goto(f"{site['base']}/campaigns/c")  # type: ignore[attr-defined]
    page.select_option("#run-filter select[name=status]", "void")  # type: ignore[attr-defined]
    page.click("#run-filter button")  # type: ignore[attr-defined]
    assert rows.count() == 1 and "void" in rows.first.inner_text()
    page.select_option("#run-filter select[name=status]", "")  # type: ignore[attr-defined]
    page.fill("#run-filter input[name=task]", "FAM/V1")  # type: ignore[attr-defined]
    page.fill("#run-filter input[name=min_score]", "0.5")  # type: ignore[attr-defined]
    page.click("#run-filter button")  # type: ignore[attr-defined]
    # fam/v1 scores 0.9 at L0 for each of the three agents; -2.5 at L1 and 0.3 at L3
    assert rows.count() == 3 and all("fam/v1" in t for t in rows.all_inner_texts())
    page.screenshot(path=str(tmp_path / "campaign-filtered.png"), full_page=True)  # type: ignore[attr-defined]
    status, body = _get(f"{site['base']}/campaigns/c?min_score=abc")
    assert status == 400 and "min_score" in body and "not a number" in body
    status, body = _get(f"{site['base']}/campaigns/c?status=lost")
    assert status == 400 and "status" in body
    assert errors == []


def test_two_runs_of_one_task_side_by_side(site: dict[str, object], browser: object, tmp_path: Path) -> None:
    ids: dict[str, str] = site["ids"]  # type: ignore[assignment]
    page, errors = _page(browser)
    page.goto(f"{site['base']}/campaigns/c?task=c1")  # type: ignore[attr-defined]
    page.check(f"input[name=run][value='{ids['m1']}']")  # type: ignore[attr-defined]
    page.check(f"input[name=run][value='{ids['human:alice']}']")  # type: ignore[attr-defined]
    page.click("#run-compare button")  # type: ignore[attr-defined]
    sides = page.locator(".side-by-side .side")  # type: ignore[attr-defined]
    assert sides.count() == 2
    shown = [sides.nth(i).locator("dd.agent").inner_text() for i in range(2)]
    assert sorted(shown) == ["human:alice", "m1"]  # in the order the runs table lists them
    # Each side: its grade (the contract's predicates) and its own transcript, text never markup.
    for i, agent in enumerate(shown):
        side = sides.nth(i)
        assert side.locator("section.grade table.board").count() >= 1
        assert f"answer of {agent} <b>not bold</b>" in side.locator("section.transcript").inner_text()
    assert page.locator(".side b", has_text="not bold").count() == 0  # type: ignore[attr-defined]
    page.screenshot(path=str(tmp_path / "side-by-side.png"), full_page=True)  # type: ignore[attr-defined]
    # A run page offers the other runs of its task.
    page.goto(f"{site['base']}/runs/{ids['m2']}")  # type: ignore[attr-defined]
    links = page.locator("#siblings a.vs")  # type: ignore[attr-defined]
    assert links.count() == 2
    links.first.click()
    assert page.locator(".side-by-side .side").count() == 2  # type: ignore[attr-defined]
    assert errors == []


def test_side_by_side_refuses_other_tasks_and_wrong_counts(site: dict[str, object]) -> None:
    ids: dict[str, str] = site["ids"]  # type: ignore[assignment]
    status, body = _get(f"{site['base']}/compare?run={ids['m1']}")
    assert status == 400 and "exactly two runs" in body
    status, body = _get(f"{site['base']}/compare?run={ids['m1']}&run=nosuchrun000")
    assert status == 404
    status, body = _get(f"{site['base']}/campaigns/c?task=r1")
    other = body.split("/runs/")[1].split('"')[0]
    status, body = _get(f"{site['base']}/compare?run={ids['m1']}&run={other}")
    assert status == 400 and "not the same task" in body
