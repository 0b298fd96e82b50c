"""A run page shows a bounded window of the transcript, read from the store as far as it shows
it (`assay.store.transcript`, `assay.jsonlimits.loads_head`): a small run whole, a big one in
windows with each long event clipped and marked, the next window and each whole event a link
away, the text escaped as before. (tests/security/test_round5_web.py views a 36 MiB run with
eight visitors on the real server.)"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from starlette.testclient import TestClient

from assay.jsonlimits import loads_head
from assay.record import (
    AssistantEvent,
    Event,
    RunKey,
    RunRecord,
    SystemEvent,
    ToolCallEvent,
    ToolResultEvent,
    UsageCost,
)
from assay.store import Store
from assay.store.transcript import event_window, stored_event
from assay.web.app import EVENT_BYTES, TRANSCRIPT_BYTES, TRANSCRIPT_EVENTS, create_app

BIG = "<b>bold?</b>&\u00e9\u4e2d\U0001f600\x1b[31m\n" * 8_000  # ~220 KB of markup, accents, emoji, ESC


def _record(run_id: str, final: str) -> RunRecord:
    key = RunKey(campaign="c", task_id="t1", task_hash="h", agent=f"script:{run_id}", level=None, epoch=1, options_hash="o")
    return RunRecord(run_id=run_id, key=key, kinds=["contract"], harness_version="t", status="done",
                     end_reason="finished", score=1.0, passed=True, usage=UsageCost(cost_usd=0.0),
                     grade={"sat": True, "audit": {"flags": [], "removed": 0, "pre_audit_score": 1.0}},
                     final_message=final, task_meta={"modality": "text", "execution": "single-step"})


def _events(turns: int, content: str, final: str) -> list[Event]:
    """A system message, `turns` write_file turns of `content`, and the final answer."""
    events: list[Event] = [SystemEvent(seq=0, t=0.0, content="brief <i>")]
    for i in range(turns):
        args = {"path": f"f{i}.html", "content": content}
        events += [AssistantEvent(seq=len(events), t=1.0, tool_calls=[{"id": f"c{i}", "name": "write_file",
                                                                        "arguments": args}]),
                   ToolCallEvent(seq=len(events) + 1, t=1.0, id=f"c{i}", name="write_file", arguments=args),
                   ToolResultEvent(seq=len(events) + 2, t=1.0, id=f"c{i}", name="write_file",
                                   output=f"wrote <{len(content)}> bytes")]
    return [*events, AssistantEvent(seq=len(events), t=2.0, content=final)]


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[FastAPI, TestClient]]:
    web = create_app(f"sqlite:///{tmp_path / 'assay.db'}", create_store=True)
    store: Store = web.state.store
    store.save_run(_record("smallrun0000", "all <done>"), _events(2, "tiny <b>file</b>\x1b", "all <done>"))
    store.save_run(_record("bigrun000000", BIG), _events(30, BIG, BIG))
    yield web, TestClient(web, base_url="http://127.0.0.1")
    store.close()


def _shown_events(page: str) -> list[int]:
    return [int(n) for n in re.findall(r'<span class="seq">#(\d+)</span>', page)]


# --------------------------------------------------------------------------- the pages


def test_a_small_run_shows_every_event_whole_and_escaped(site: tuple[FastAPI, TestClient]) -> None:
    _web, c = site
    page = c.get("/runs/smallrun0000").text
    assert _shown_events(page) == list(range(8))
    assert "8 events, as the agent saw them</span>" in page
    assert "clipped" not in page and "the next events" not in page and "the first events" not in page
    assert "tiny &lt;b&gt;file&lt;/b&gt;\\u001b" in page and "<b>file" not in page  # escaped as ever
    assert "all &lt;done&gt;" in page


def test_a_big_run_shows_a_bounded_window_and_the_rest_is_reachable(site: tuple[FastAPI, TestClient]) -> None:
    web, c = site
    store: Store = web.state.store
    total = len(store.events("bigrun000000"))
    seen: list[int] = []
    url: str | None = "/runs/bigrun000000"
    pages = 0
    while url is not None:
        r = c.get(url)
        assert r.status_code == 200
        page = r.text
        pages += 1
        # bounded: the stored bytes read (each event's head, the page's budget) make a page of
        # a few times that at most, escaped
        assert len(page.encode()) < 4 * (TRANSCRIPT_BYTES + 2 * EVENT_BYTES), len(page)
        shown = _shown_events(page)
        assert shown and len(shown) <= TRANSCRIPT_EVENTS
        assert f"{total} events, as the agent saw them; events {len(seen) + 1}–{len(seen) + len(shown)} shown" in page
        seen += shown
        # each long event is clipped, marked where its text stops, with its size and a link to it whole
        for seq in shown:
            whole = stored_event(store, "bigrun000000", seq)
            assert whole is not None
            size = len(json.dumps(whole.data(), ensure_ascii=False, separators=(",", ":")).encode())
            link = f'/api/runs/bigrun000000/events/{seq}"'
            assert (link in page) == (size > EVENT_BYTES), seq
        assert "&lt;b&gt;bold?&lt;/b&gt;&amp;\u00e9\u4e2d\U0001f600\\u001b[31m" in page and "<b>bold" not in page
        assert "[… clipped]" in page and "bytes more of this event" in page
        if pages > 1:
            assert 'href="/runs/bigrun000000#transcript">← the first events' in page
        m = re.search(r'href="(/runs/bigrun000000\?from=\d+)#transcript">the next events', page)
        url = html.unescape(m.group(1)) if m else None
    assert pages > 1 and seen == list(range(total))


def test_a_clipped_event_is_served_whole(site: tuple[FastAPI, TestClient]) -> None:
    web, c = site
    store: Store = web.state.store
    events = store.events("bigrun000000")
    for seq in (2, len(events) - 1):  # a tool call's arguments; the final answer (kept in the record)
        r = c.get(f"/api/runs/bigrun0000/events/{seq}")  # a prefix of the run id, as everywhere
        assert r.status_code == 200
        assert r.json() == json.loads(json.dumps(events[seq].wire()))
    assert c.get("/api/runs/bigrun000000/events/0").json()["data"]["content"] == "brief <i>"
    assert c.get(f"/api/runs/bigrun000000/events/{len(events)}").status_code == 404
    assert c.get("/api/runs/nosuchrun000/events/0").status_code == 404
    for bad in ("-1", "x", "99999999999", "1e3", "\u0661"):
        assert c.get(f"/api/runs/bigrun000000/events/{bad}").status_code == 400, bad
        assert c.get("/runs/bigrun000000", params={"from": bad}).status_code == 400, bad
    # a window starting past the end shows no event and says so
    empty = c.get("/runs/bigrun000000", params={"from": "2147483647"}).text
    assert _shown_events(empty) == [] and "the next events" not in empty


def test_the_final_answer_is_clipped_on_the_page(site: tuple[FastAPI, TestClient]) -> None:
    _web, c = site
    page = c.get("/runs/bigrun000000").text
    final = page.split('<pre class="final">', 1)[1].split("</pre>", 1)[0]
    assert final.endswith("[… clipped]") and len(final.encode()) < 3 * EVENT_BYTES
    assert final.startswith("&lt;b&gt;bold?&lt;/b&gt;&amp;\u00e9\u4e2d\U0001f600\\x1b[31m\n")  # escaped as ever
    more = len(BIG.encode()) - len(BIG.encode()[:EVENT_BYTES].decode(errors="ignore").encode())
    assert f"clipped: {more:,} bytes more" in page


def test_two_runs_side_by_side_show_a_window_each(site: tuple[FastAPI, TestClient]) -> None:
    web, c = site
    store: Store = web.state.store
    page = c.get("/compare", params=[("run", "smallrun0000"), ("run", "bigrun000000")]).text
    assert len(page.encode()) < 8 * (TRANSCRIPT_BYTES + 2 * EVENT_BYTES)
    assert 'href="/runs/bigrun000000?from=' in page and "bytes more of this event" in page
    assert f"{len(store.events('bigrun000000'))} events" in page


# --------------------------------------------------------------------------- the store's window


def test_a_window_reads_heads_and_stops_at_its_budget(store: Store) -> None:
    store.save_run(_record("bigrun000000", BIG), _events(5, BIG, BIG))
    w = event_window(store, "bigrun000000", 0, max_events=100, max_bytes=3 * 1000, head_bytes=1000, mark="[cut]")
    assert (w.total, w.before) == (17, 0)
    assert [e.event.seq for e in w.events] == [0, 1, 2, 3] and w.next_seq == 4  # 11 + 1000 + 1000 + 43 bytes
    system, call, tool_call, result = (e.event for e in w.events)
    assert system.data() == {"content": "brief <i>"} and not w.events[0].clipped
    assert w.events[1].clipped and w.events[1].read == 1000 and w.events[1].size > len(BIG)
    args = tool_call.data()["arguments"]
    assert args["path"] == "f0.html" and args["content"].endswith("[cut]") and BIG.startswith(args["content"][:-5])
    assert call.data()["tool_calls"][0]["arguments"]["content"].endswith("[cut]")
    assert result.data()["output"] == f"wrote <{len(BIG)}> bytes"
    # the next window, and the last one: the final answer from the record, clipped alike
    w2 = event_window(store, "bigrun000000", 4, max_events=2, max_bytes=10**6, head_bytes=1000, mark="[cut]")
    assert (w2.before, [e.event.seq for e in w2.events], w2.next_seq) == (4, [4, 5], 6)
    last = event_window(store, "bigrun000000", 16, max_events=2, max_bytes=10**6, head_bytes=1000, mark="[cut]")
    assert last.next_seq is None and len(last.events) == 1 and last.events[0].clipped
    content = last.events[0].event.data()["content"]
    assert content.endswith("[cut]") and BIG.startswith(content[:-5])
    whole = stored_event(store, "bigrun000000", 16)
    assert whole is not None and whole.data()["content"] == BIG
    assert stored_event(store, "bigrun000000", 17) is None


# --------------------------------------------------------------------------- reading a JSON text's head


@pytest.mark.parametrize("doc", [
    {"content": "", "tool_calls": [{"id": "c", "name": "w", "arguments": {"path": "p", "content": "é\"\\\n😀" * 9}}]},
    {"a": [1, 2.5, None, True, {"b": "c\u2028"}], "d": {"e": [[], {}]}, "f": -3e-7},
])
def test_every_head_of_a_json_text_reads_as_a_value(doc: dict[str, object]) -> None:
    for text in (json.dumps(doc), json.dumps(doc, ensure_ascii=False, separators=(",", ":")), json.dumps(doc, indent=2)):
        assert loads_head(text) == doc
        for i in range(len(text)):
            value = loads_head(text[:i], "…")
            assert value is None or isinstance(value, dict), text[:i]
            json.dumps(value).encode()  # no lone surrogate half from a cut escape


def test_a_head_keeps_the_cut_string_marked_and_leaves_the_rest_out() -> None:
    assert loads_head('{"path":"f","content":"<b>x</b>\\u00e9\\ud83d\\ude', "[cut]") == {
        "path": "f", "content": "<b>x</b>é[cut]"}
    assert loads_head('{"a":"x\\', "M") == {"a": "xM"}
    assert loads_head('{"a":1,"b', "M") == {"a": 1}  # a key cut in half
    assert loads_head('{"a":[1,2,{"b":"c"},3', "M") == {"a": [1, 2, {"b": "c"}]}  # 3 may be 30
    assert loads_head('[[[[[[1]]]]]]', max_depth=3) == [[[]]]
    assert loads_head("", "M") is None and loads_head("nonsense", "M") is None


def test_a_play_sessions_poll_gives_a_window_and_the_rest_follows(tmp_path: Path) -> None:
    """A page that polls a big play session from the start gets about `POLL_BYTES` of events
    at a time with `more`, and asking from each `next` gives every event once, in order; a
    poll from the end gives none and no `more`."""
    from assay.task.discover import discover
    from assay.web.play_session import POLL_BYTES, PlaySession
    from tests.helpers import answer_task

    task = discover([answer_task(tmp_path / "t1")])[0]
    session = PlaySession(id="s", task=task, name="ann", campaign="web", level=None, epoch=1)
    session.env = {"brief": "b", "tools": [], "limits": None}
    big = "x" * (POLL_BYTES // 3)
    sent = [{"kind": "tool_result", "content": f"{n}:" + (big if n % 2 else "small")} for n in range(20)]
    session.merge({"events": [[2 * n, ev] for n, ev in enumerate(sent)], "next": 40})
    got: list[dict[str, object]] = []
    since, polls = 0, 0
    while True:
        view = session.view(since)
        polls += 1
        assert view["events"], view["next"]
        assert len(json.dumps(view["events"])) <= POLL_BYTES + 100 or len(view["events"]) == 1
        got += view["events"]
        since = view["next"]
        if not view["more"]:
            break
    assert got == sent and since == 40
    assert polls >= 3  # ~3.5 MB of events came in windows, not in one response
    again = session.view(14)  # a window can start anywhere the page asks
    assert again["events"][0] == sent[7]
    end = session.view(40)
    assert end["events"] == [] and end["more"] is False and end["next"] == 40
