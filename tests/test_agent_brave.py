"""The Brave Search client against a fake Brave server on 127.0.0.1 speaking Brave's wire format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assay.agent.brave import MAX_REPLY_BYTES, BraveSearch, format_results
from assay.agent.search import CorpusSearch, SearchOffer, offer_search, search_skip_reason
from assay.errors import InputError, ProviderError
from assay.task.model import Task
from tests.fakes.brave_server import SEARCH_PATH, FakeBraveServer, Page

PAGES = [
    Page("Apollo 11 - NASA", "https://www.nasa.gov/apollo11",
         "Apollo 11 landed on the <strong>Moon</strong> on July 20, 1969 &amp; returned safely.",
         ("Armstrong and Aldrin walked on the surface.", "Collins stayed in orbit."), age="July 20, 1969"),
    Page("Moon facts", "https://example.org/moon", "The Moon is Earth's only natural satellite."),
    Page("Mars rover", "https://example.org/mars", "Perseverance landed in Jezero crater."),
]


def client(srv: FakeBraveServer, key: str = "brave-test-key") -> BraveSearch:
    return BraveSearch(key, srv.url, timeout_s=5, retry_base_delay=0.01)


def test_request_and_results_in_brave_format() -> None:
    with FakeBraveServer(pages=PAGES) as srv:
        out = client(srv).search("moon landing", k=2)
    (seen,) = srv.requests
    assert seen.path == SEARCH_PATH
    assert seen.params == {"q": "moon landing", "count": "2"}
    assert seen.headers["x-subscription-token"] == "brave-test-key"
    assert seen.headers["accept"] == "application/json"
    first, second = out.split("\n\n")
    # Brave's <strong> highlighting and HTML entities are cleaned; extra snippets and age kept.
    assert first == ("1. Apollo 11 - NASA (https://www.nasa.gov/apollo11) (July 20, 1969)\n"
                     "Apollo 11 landed on the Moon on July 20, 1969 & returned safely. "
                     "Armstrong and Aldrin walked on the surface. Collins stayed in orbit.")
    assert second.startswith("2. Moon facts (https://example.org/moon)\n")


def test_no_results_and_empty_query() -> None:
    with FakeBraveServer(pages=PAGES) as srv:
        c = client(srv)
        assert c.search("zebra") == "no results for 'zebra'"
        assert c.search("   ") == "error: the query is empty"
    assert len(srv.requests) == 1  # the empty query never went out


def test_rate_limit_is_retried_after_retry_after() -> None:
    with FakeBraveServer(pages=PAGES) as srv:
        srv.faults.extend([429, 503])
        srv.retry_after = "0.05"
        out = client(srv).search("mars")
    assert out.startswith("1. Mars rover")
    assert len(srv.requests) == 3


def test_persistent_faults_raise_provider_error() -> None:
    with FakeBraveServer(pages=PAGES) as srv:
        srv.faults.extend([500] * 10)
        with pytest.raises(ProviderError, match=r"brave search: HTTP 500: Internal error\. \(gave up after 4 attempts\)"):
            client(srv).search("mars")
    assert len(srv.requests) == 4


def test_refused_key_is_not_retried_and_names_the_variable() -> None:
    refused = r"HTTP 401: The provided subscription token is invalid. \(check BRAVE_API_KEY\)"
    with FakeBraveServer(pages=PAGES) as srv, pytest.raises(ProviderError, match=refused):
        client(srv, key="wrong").search("mars")
    assert len(srv.requests) == 1


def test_missing_key_is_an_input_error() -> None:
    with pytest.raises(InputError, match="BRAVE_API_KEY"):
        BraveSearch("  ")


def test_hostile_replies() -> None:
    with FakeBraveServer(pages=PAGES) as srv:
        c = client(srv)
        srv.raw_body = b"x" * (MAX_REPLY_BYTES + 10)
        with pytest.raises(ProviderError, match="reply larger than"):
            c.search("mars")
        srv.raw_body = b"<html>not json</html>"
        with pytest.raises(ProviderError, match="malformed reply"):
            c.search("mars")
        srv.raw_body = json.dumps({"web": {"results": ["junk", {"title": None, "url": 5}]}}).encode()
        assert c.search("mars") == "1. (untitled) (5)\n"


def test_format_results_caps_each_result() -> None:
    data = {"web": {"results": [{"title": "t", "url": "u", "description": "d" * 5000}]}}
    assert len(format_results("q", data, 5)) < 1600


def _task(**kw: object) -> Task:
    return Task.model_validate({"id": "t", "title": "t", "prompt": "p", **kw})


def test_which_runs_get_which_search(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A\nalpha")
    live, plain, with_corpus = _task(search="live"), _task(), _task(search="live", corpus=tmp_path)
    brave = BraveSearch("k", "http://127.0.0.1:9")
    assert offer_search(plain, "native", "model") == SearchOffer(native=True)
    assert offer_search(plain, "native", "script").label is None
    assert offer_search(plain, "brave", "script", brave).backend is brave
    assert offer_search(plain, "local", "model").label is None
    local = offer_search(with_corpus, "local", "script")
    assert isinstance(local.backend, CorpusSearch) and local.label == "local"
    assert search_skip_reason(live, "off", "model") is not None and "--search native" in str(
        search_skip_reason(live, "off", "model"))
    assert search_skip_reason(live, "native", "model") is None
    assert "script agent needs --search local or brave" in str(search_skip_reason(live, "native", "script"))
    assert "no local corpus" in str(search_skip_reason(live, "local", "model"))
    assert search_skip_reason(with_corpus, "local", "model") is None
    assert search_skip_reason(live, "brave", "script") is None
    assert search_skip_reason(live, "off", "noop") is None  # an agent that never searches needs none
    assert search_skip_reason(plain, "off", "model") is None
    brave.close()


def test_corpus_does_not_follow_links_out(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "ok.md").write_text("# Ok\nharmless text")
    secret = tmp_path / "secret.md"
    secret.write_text("# Secret\nhost password hunter2")
    (corpus / "leak.md").symlink_to(secret)
    (corpus / "dir").symlink_to(tmp_path)
    cs = CorpusSearch(corpus)
    assert [d[0] for d in cs.docs] == ["ok.md"]
    assert cs.search("password") == "no results for 'password'"
    link = tmp_path / "linked"
    link.symlink_to(corpus)
    with pytest.raises(ValueError, match="symlink"):
        CorpusSearch(link)
