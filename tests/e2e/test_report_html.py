"""The HTML report file (`assay report --html`) in a real browser: Debian's Chromium driven by
Playwright, opened from disk with no server and no network. Every kind's plot has CI
whiskers, a campaign whose scores and costs are all 0 still draws its (zero) bars and a sane
cost axis, long names are truncated with a tooltip, and the runs table is collapsed, sorts
and filters. Screenshots are kept under the test's tmp dir."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from assay.store import Store
from tests.browser import CHROMIUM, chromium
from tests.helpers import assay
from tests.test_report_blocks import run, synthetic
from tests.test_report_read import varied

LONG = "an-agent-with-a-very-long-name-that-would-overlap-its-neighbours"

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is not installed")


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("html-report")
    st = Store(f"sqlite:///{tmp / '.assay' / 'assay.db'}")
    for r in synthetic():
        st.save_run(r, [])
    for i in range(300):  # enough runs that the table must be collapsed and capped
        st.save_run(run(LONG, f"r{i % 3 + 1}", (i % 10) / 10, epoch=i // 3 + 1, cost=0.001 * (i % 7)), [])
    zeros = [run(agent, f"z{i}", 0.0, cost=0.0) for agent in ("zero-a", "zero-b") for i in range(3)]
    for r in zeros:
        r.key.campaign = "zeros"
        st.save_run(r, [])
    for r in varied("mix"):  # contract runs of both modalities; people (human:alice) beside the models
        st.save_run(r, [])
    st.close()
    out = {}
    for campaign in ("c", "zeros", "mix"):
        res = assay("report", "--campaign", campaign, "--html", f"{campaign}.html", cwd=tmp)
        assert res.returncode == 0, res.stderr
        out[campaign] = tmp / f"{campaign}.html"
    return out


@pytest.fixture(scope="module")
def browser(reports: dict[str, Path]) -> Iterator[object]:
    with chromium(reports["c"].parent / "browser-home") as b:
        yield b


def _open(browser: object, path: Path) -> tuple[object, list[str]]:
    page = browser.new_page(viewport={"width": 1400, "height": 900})  # type: ignore[attr-defined]
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url) if not r.url.startswith(("file:", "data:")) else None)
    page.goto(path.as_uri())
    assert requests == []  # self-contained: nothing fetched
    return page, errors


def test_plots_have_error_bars_a_front_and_readable_labels(reports: dict[str, Path], browser: object,
                                                           tmp_path: Path) -> None:
    page, errors = _open(browser, reports["c"])
    rubric = page.locator("#kind-rubric")  # type: ignore[attr-defined]
    bars = rubric.locator("svg.bars")
    # One bar and one CI whisker per agent with a rubric block (a, b and the long-named one).
    assert bars.locator("rect.bar").count() == 3 and bars.locator("g.errbar").count() == 3
    assert rubric.locator("svg.pareto path.front").count() >= 1 and rubric.locator("svg.pareto circle.pt").count() == 3
    assert rubric.locator("svg.curve path.curve").count() == 6  # pass@k and pass^k, three agents each
    assert page.locator("#kind-scenario svg.bars g.errbar").count() == 1  # type: ignore[attr-defined]
    assert "1.8" in page.locator("#kind-scenario table.families").inner_text()  # type: ignore[attr-defined]
    # The long name is cut, its full text is the tooltip.
    label = bars.locator("text.lbl", has=page.locator("title", has_text=LONG))  # type: ignore[attr-defined]
    assert label.count() == 1 and LONG not in label.text_content().replace(LONG, "", 1)
    assert len(label.evaluate("e => e.lastChild.textContent")) <= 14
    # The same numbers in the table beside the plots.
    assert rubric.locator("table.block").inner_text().count("\n") >= 3
    page.screenshot(path=str(tmp_path / "report-plots.png"), full_page=True)  # type: ignore[attr-defined]
    assert errors == []


def test_zero_scores_draw_zero_bars_and_zero_costs_a_sane_axis(reports: dict[str, Path], browser: object,
                                                                tmp_path: Path) -> None:
    page, errors = _open(browser, reports["zeros"])
    bars = page.locator("#kind-rubric svg.bars rect.bar.zero")  # type: ignore[attr-defined]
    assert bars.count() == 2
    assert all(float(bars.nth(i).get_attribute("height")) > 0 for i in range(2))
    pareto = page.locator("#kind-rubric svg.pareto")  # type: ignore[attr-defined]
    assert "every cost is 0" in pareto.locator("text.title").text_content()
    ticks = [float(t) for t in pareto.locator("text.tick").all_text_contents() if t.replace(".", "").isdigit()]
    assert ticks and min(ticks) == 0 and max(ticks) == 1  # [0, 1], not -0.04..0.04
    page.screenshot(path=str(tmp_path / "report-zeros.png"), full_page=True)  # type: ignore[attr-defined]
    assert errors == []


def test_runs_table_is_collapsed_sortable_and_filterable(reports: dict[str, Path], browser: object,
                                                         tmp_path: Path) -> None:
    page, errors = _open(browser, reports["c"])
    details = page.locator("details#runs")  # type: ignore[attr-defined]
    assert details.evaluate("d => d.open") is False
    assert not page.locator("#runs-table").is_visible()  # type: ignore[attr-defined]
    details.locator("summary").click()
    rows = page.locator("#runs-table tbody tr")  # type: ignore[attr-defined]
    assert rows.count() == 311  # every run (300 + 11): under the 500-row cap
    score_col = page.locator("#runs-table th", has_text="score")  # type: ignore[attr-defined]
    score_col.click()
    first = lambda: rows.first.locator("td").nth(7).text_content()  # noqa: E731
    assert first() == "-3"  # fam/v2: the raw S, -3.0 (the -1 floor is for means only)
    score_col.click()
    assert first() == "0.9"
    page.fill("#runs-filter", "fam/v2")  # type: ignore[attr-defined]
    assert rows.count() == 1 and rows.first.locator("td").nth(1).text_content() == "fam/v2"
    page.fill("#runs-filter", "")  # type: ignore[attr-defined]
    page.select_option("#runs-status", "void")  # type: ignore[attr-defined]
    assert rows.count() == 1 and rows.first.locator("td").nth(5).text_content() == "void"
    page.select_option("#runs-status", "")  # type: ignore[attr-defined]
    rows.filter(has_text="fam/v1").first.locator("a.task").click()  # a task id shows every run of that task
    assert page.input_value("#runs-filter") == "fam/v1" and rows.count() == 1  # type: ignore[attr-defined]
    assert "showing 1 of 1" in page.locator("#runs-shown").text_content()  # type: ignore[attr-defined]
    page.screenshot(path=str(tmp_path / "report-runs.png"), full_page=True)  # type: ignore[attr-defined]
    assert errors == []


def test_text_and_multimodal_pareto_plots_and_the_human_baseline(reports: dict[str, Path], browser: object,
                                                                 tmp_path: Path) -> None:
    page, errors = _open(browser, reports["mix"])
    contract = page.locator("#kind-contract")  # type: ignore[attr-defined]
    for modality in ("text", "multimodal"):
        plot = contract.locator(f"svg.pareto.modality-{modality}")
        assert plot.count() == 1
        assert f"contract ({modality} tasks)" in plot.locator("text.title").text_content()
        assert plot.locator("circle.pt").count() == 3  # m1, m2, human:alice
        assert plot.locator("path.front").count() == 2  # the front and its legend key
    # The pooled front too, and the same numbers in a table beside the plots.
    assert contract.locator("svg.pareto:not(.modality-text):not(.modality-multimodal)").count() == 1
    table = contract.locator("table.pareto-modality").inner_text()
    assert table.count("multimodal") == 3 and "human:alice" in table
    # People are a row of every block, with their own CI, like any agent.
    for kind in ("rubric", "contract", "scenario"):
        assert "human:alice" in page.locator(f"#kind-{kind} table.block").inner_text()  # type: ignore[attr-defined]
    # The baseline: families with 3 runs by people (r1, r2, fam); not c1, c2 (1 run each).
    rubric = page.locator("#kind-rubric table.human-baseline").inner_text()  # type: ignore[attr-defined]
    assert "r1" in rubric and "r2" in rubric and "m1" in rubric
    assert page.locator("#kind-contract table.human-baseline").count() == 0  # type: ignore[attr-defined]
    assert "fam" in page.locator("#kind-scenario table.human-baseline").inner_text()  # type: ignore[attr-defined]
    page.screenshot(path=str(tmp_path / "report-modalities-people.png"), full_page=True)  # type: ignore[attr-defined]
    assert errors == []
