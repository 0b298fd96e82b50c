"""The web app's guard against framing and token guessing (`assay.web.security`): the real app
over a real SQLite store, called in-process through Starlette's test client from chosen
client addresses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from starlette.testclient import TestClient

from assay.errors import InputError
from assay.web.app import create_app
from assay.web.security import GUESS_EVERY_S, GUESSES, SECURITY_HEADERS
from tests.helpers import answer_task, assay

TOKEN = "a-shared-token-long-enough"


@pytest.fixture
def app(tmp_path: Path) -> Iterator[FastAPI]:
    web = create_app(f"sqlite:///{tmp_path / 'assay.db'}", token=TOKEN, create_store=True)
    yield web
    web.state.store.close()


def client(app: FastAPI, address: str) -> TestClient:
    return TestClient(app, base_url="http://127.0.0.1", client=(address, 50000))


def test_every_answer_forbids_framing_and_sniffing(app: FastAPI) -> None:
    c = client(app, "10.0.0.1")
    answers = [c.get("/healthz"), c.get("/api/campaigns"), c.get("/", follow_redirects=False),
               c.get("/signin"), c.get("/static/none.js"), c.get("/api/campaigns", headers={"Host": "evil.example"})]
    for r in answers:
        for name, value in SECURITY_HEADERS:
            assert r.headers.get(name.decode()) == value.decode(), (r.request.url, r.status_code, dict(r.headers))
    assert {r.status_code for r in answers} == {200, 401, 303, 404, 400}


def test_wrong_bearer_tokens_are_slowed_per_address(app: FastAPI) -> None:
    guesser, other = client(app, "10.0.0.1"), client(app, "10.0.0.2")
    for i in range(GUESSES):
        assert guesser.get("/api/campaigns", headers={"Authorization": f"Bearer guess{i}"}).status_code == 401
    r = guesser.get("/api/campaigns", headers={"Authorization": "Bearer guess-more"})
    assert r.status_code == 429 and "too many wrong tokens" in r.json()["detail"]
    assert 1 <= int(r.headers["retry-after"]) <= GUESS_EVERY_S + 1
    # while slowed, even the right token is not compared from that address...
    assert guesser.get("/api/campaigns", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 429
    # ...and another address is not slowed at all
    assert other.get("/api/campaigns", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_the_right_token_is_never_counted(app: FastAPI) -> None:
    c = client(app, "10.0.0.3")
    for _ in range(3 * GUESSES):
        assert c.get("/api/campaigns", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_wrong_tokens_at_the_sign_in_form_are_slowed(app: FastAPI) -> None:
    c = client(app, "10.0.0.4")
    for i in range(GUESSES):
        r = c.post("/signin", data={"token": f"guess{i}"}, headers={"Origin": "http://127.0.0.1"})
        assert r.status_code == 401 and "set-cookie" not in r.headers
    r = c.post("/signin", data={"token": TOKEN}, headers={"Origin": "http://127.0.0.1"}, follow_redirects=False)
    assert r.status_code == 429 and "too many wrong tokens" in r.text and "set-cookie" not in r.headers
    r = client(app, "10.0.0.5").post("/signin", data={"token": TOKEN, "next": "/"},
                                     headers={"Origin": "http://127.0.0.1"}, follow_redirects=False)
    assert r.status_code == 303 and "assay_session" in r.headers["set-cookie"]


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0", "::", "192.0.2.7"])
def test_a_short_token_is_refused(tmp_path: Path, host: str) -> None:
    with pytest.raises(InputError) as e:
        create_app(f"sqlite:///{tmp_path / 'assay.db'}", token="x" * 15, listen_host=host, allow_remote=True,
                   create_store=True)
    assert e.value.field == "--token" and "shorter than 16 characters" in e.value.reason
    assert not (tmp_path / "assay.db").exists()  # refused before the store was made


def test_a_short_token_is_exit_2_from_assay_serve(tmp_path: Path) -> None:
    r = assay("serve", "--token", "abc", "--store", f"sqlite:///{tmp_path / 'assay.db'}", "--create", cwd=tmp_path)
    assert r.returncode == 2 and "--token" in r.stderr and "shorter than 16" in r.stderr, r.stderr


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.7"])
def test_a_non_loopback_bind_needs_allow_remote_even_with_a_token(tmp_path: Path, host: str) -> None:
    r = assay("serve", "--host", host, "--token", TOKEN, "--store", f"sqlite:///{tmp_path / 'assay.db'}", "--create",
              cwd=tmp_path)
    assert r.returncode == 2 and "--host" in r.stderr and "--allow-remote" in r.stderr, r.stderr
    assert not (tmp_path / "assay.db").exists()  # refused before the store was made


def test_plays_join_the_models_campaign_unless_the_server_names_another(tmp_path: Path) -> None:
    """People's plays go where `assay run` puts models (`default`), so they are ranked beside
    them; `assay serve --campaign C` names another; a bad name is exit 2 before anything is written."""
    store = f"sqlite:///{tmp_path / 'assay.db'}"
    suite = [answer_task(tmp_path / "suite" / "answer")]
    for named, expected in ((None, "default"), ("expert-baseline", "expert-baseline")):
        kwargs = {} if named is None else {"play_campaign": named}
        with TestClient(create_app(store, suite, create_store=True, **kwargs), base_url="http://127.0.0.1") as c:
            page = c.get("/play")
            assert page.status_code == 200
            assert f'name="campaign" value="{expected}"' in page.text
    r = assay("serve", "--campaign", "../x", "--store", f"sqlite:///{tmp_path / 'other.db'}", "--create", cwd=tmp_path)
    assert r.returncode == 2 and "--campaign" in r.stderr, r.stderr
    assert not (tmp_path / "other.db").exists()
