"""Web (`assay serve`): accounts, sign-in, and the request checks (docs/web.md, SECURITY.md G6).

Each test is an attack on the real `assay serve` in a subprocess on a free 127.0.0.1 port,
with accounts made by the real `assay users add` in a real SQLite store:

- a caller with no token, or a wrong one, gets 401 (API) or the sign-in page (pages);
- another account's play session is 404 everywhere (state, actions, page, the /play list);
- a foreign `Host` (DNS rebinding) is 400;
- `text/plain` (or form) posts to a JSON endpoint are 415;
- a signed-in browser's post without the CSRF token, or from another origin, is 403;
- a body over 1 MiB is 413;
- a non-loopback listen address without accounts or a token exits 2 (even with --allow-remote);
- the token is shown once and the store holds only its SHA-256.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import answer_task, assay, assay_process, free_port, served
from tests.security._support import bwrap_ok, reap, workdir

pytestmark = pytest.mark.skipif(not bwrap_ok(), reason="bubblewrap is not installed")

MiB = 1024 * 1024
TIMEOUT = 60.0  # the machine may be busy: a slow answer is not a refusal


def hget(url: str, **kw: Any) -> httpx.Response:
    kw.setdefault("timeout", TIMEOUT)
    return httpx.get(url, **kw)


def hpost(url: str, **kw: Any) -> httpx.Response:
    kw.setdefault("timeout", TIMEOUT)
    return httpx.post(url, **kw)


def add_user(cwd: Path, store: str, name: str, role: str = "user") -> str:
    r = assay("users", "add", name, "--role", role, "--store", store, cwd=cwd)
    assert r.returncode == 0, r.stderr
    token = r.stdout.strip()
    assert re.fullmatch(r"[A-Za-z0-9_\-]{40,}", token), r.stdout
    return token


@contextlib.contextmanager
def serve(wd: Path, store: str, *extra: str) -> Iterator[dict[str, Any]]:
    with served(wd, "--store", store, "--suite", str(wd / "suite"), *extra,
                log_name=f"serve-{len(list(wd.glob('serve-*.log')))}.log") as (base, port, proc):
        yield {"base": base, "port": port, "proc": proc}


@pytest.fixture(scope="module")
def site() -> Iterator[dict[str, Any]]:
    with workdir("web-auth") as wd:
        answer_task(wd / "suite" / "answer")
        store = f"sqlite:///{wd / 'store.db'}"
        tokens = {n: add_user(wd, store, n, role) for n, role in
                  (("alice", "user"), ("bob", "user"), ("root", "admin"), ("gone", "user"))}
        with serve(wd, store, "--allowed-host", "assay.test") as s:
            yield {**s, "wd": wd, "store": store, "tokens": tokens}
        reap(str(wd))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def start_play(site: dict[str, Any], who: str, name: str = "") -> str:
    r = hpost(site["base"] + "/api/play", json={"task_id": "answer", "name": name, "campaign": "web"},
                   headers=bearer(site["tokens"][who]), timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["agent"] == f"human:{who}"
    return str(r.json()["session"])


def submit_and_wait(site: dict[str, Any], who: str, sid: str) -> dict[str, Any]:
    h = bearer(site["tokens"][who])
    deadline = time.monotonic() + 60
    while hget(f"{site['base']}/api/play/{sid}", headers=h).json()["state"] == "starting":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    r = hpost(f"{site['base']}/api/play/{sid}/action", json={"submit": "done"}, headers=h, timeout=60)
    assert r.status_code == 200, r.text
    while True:
        state: dict[str, Any] = hget(f"{site['base']}/api/play/{sid}", headers=h).json()
        if state["state"] in ("done", "error"):
            return state
        assert time.monotonic() < deadline, state
        time.sleep(0.2)


def sign_in(site: dict[str, Any], who: str, **headers: str) -> httpx.Client:
    """A browser-like client signed in through the sign-in form, with its CSRF token as `.csrf`."""
    c = httpx.Client(base_url=site["base"], timeout=TIMEOUT)
    r = c.post("/signin", data={"token": site["tokens"][who], "next": "/play"},
               headers={"Origin": site["base"], **headers})
    assert r.status_code == 303 and r.headers["location"] == "/play", (r.status_code, r.text)
    page = c.get("/play")
    assert page.status_code == 200
    m = re.search(r'<meta name="csrf-token" content="([^"]+)">', page.text)
    assert m, page.text[:500]
    c.csrf = m.group(1)  # type: ignore[attr-defined]
    return c


def test_no_token_or_a_wrong_one_is_refused(site: dict[str, Any]) -> None:
    base = site["base"]
    for path in ("/api/campaigns", "/api/report", "/api/tasks", "/api/play/x", "/api/openapi.json"):
        r = hget(base + path)
        assert r.status_code == 401 and "detail" in r.json(), (path, r.status_code)
    assert hget(base + "/api/campaigns", headers=bearer("not-a-token")).status_code == 401
    assert hget(base + "/api/campaigns", headers={"Authorization": "Basic YWxpY2U6eA=="}).status_code == 401
    r = hpost(base + "/api/play", json={"task_id": "answer", "name": "x"})
    assert r.status_code == 401
    for path in ("/", "/play", "/runs/abc", "/campaigns/default", "/api/docs"):
        r = hget(base + path)
        assert r.status_code == 303 and r.headers["location"].startswith("/signin?next="), (path, r.status_code)
    # a page post without a session is refused too
    assert hpost(base + "/play", data={"task_id": "answer", "name": "x"}).status_code == 401
    # a wrong token at the sign-in page sets no cookie
    r = hpost(base + "/signin", data={"token": "guess"})
    assert r.status_code == 401 and "set-cookie" not in r.headers
    assert hget(base + "/api/campaigns", headers=bearer(site["tokens"]["alice"])).status_code == 200


def test_a_removed_account_is_refused_at_once(site: dict[str, Any]) -> None:
    c = sign_in(site, "gone")
    assert c.get("/api/campaigns").status_code == 200
    r = assay("users", "remove", "gone", "--store", site["store"], cwd=site["wd"])
    assert r.returncode == 0, r.stderr
    assert hget(site["base"] + "/api/campaigns", headers=bearer(site["tokens"]["gone"])).status_code == 401
    assert c.get("/api/campaigns").status_code == 401
    c.close()


def test_another_accounts_session_is_404(site: dict[str, Any]) -> None:
    base = site["base"]
    sid = start_play(site, "alice", name="mallory")  # a typed name is ignored: the account plays
    alice, bob, root = (bearer(site["tokens"][n]) for n in ("alice", "bob", "root"))
    assert hget(f"{base}/api/play/{sid}", headers=alice).status_code == 200
    assert hget(f"{base}/api/play/{sid}", headers=bob).status_code == 404
    r = hpost(f"{base}/api/play/{sid}/action", json={"tool": "run_command", "args": {"command": "id"}},
                   headers=bob, timeout=30)
    assert r.status_code == 404, r.text
    assert hpost(f"{base}/api/play/{sid}/action", json={"submit": "bob's"}, headers=bob).status_code == 404
    assert hget(f"{base}/play/{sid}", headers=bob).status_code == 404
    assert sid not in hget(f"{base}/play", headers=bob).text
    assert sid in hget(f"{base}/play", headers=alice).text
    # an admin may view it, not act in it
    assert hget(f"{base}/api/play/{sid}", headers=root).status_code == 200
    assert sid in hget(f"{base}/play", headers=root).text
    assert hpost(f"{base}/api/play/{sid}/action", json={"submit": "x"}, headers=root).status_code == 404
    state = submit_and_wait(site, "alice", sid)
    assert state["state"] == "done" and state["run"]["agent"] == "human:alice", state
    rep = hget(f"{base}/api/report?campaign=web", headers=alice).json()
    assert {a["agent"] for a in rep["agents"]} == {"human:alice"}


def test_foreign_host_is_refused(site: dict[str, Any]) -> None:
    base, port = site["base"], site["port"]
    h = bearer(site["tokens"]["alice"])
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example", "assay.test.evil", "", "[::1"):
        r = hget(base + "/api/campaigns", headers={**h, "Host": host})
        assert r.status_code == 400, (host, r.status_code)
    # unauthenticated too: the Host check comes first, before anything else is said
    assert hget(base + "/signin", headers={"Host": "evil.example"}).status_code == 400
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"[::1]:{port}", "assay.test",
                 f"ASSAY.test:{port}"):
        r = hget(base + "/api/campaigns", headers={**h, "Host": host})
        assert r.status_code == 200, (host, r.status_code)


def test_json_endpoints_take_only_json(site: dict[str, Any]) -> None:
    base = site["base"]
    h = bearer(site["tokens"]["alice"])
    body = b'{"task_id": "answer", "name": "x"}'
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None):
        headers = {**h, **({"Content-Type": ctype} if ctype else {})}
        r = hpost(base + "/api/play", content=body, headers=headers)
        assert r.status_code == 415, (ctype, r.status_code, r.text)


def test_signed_in_posts_need_the_csrf_token_and_the_same_origin(site: dict[str, Any]) -> None:
    base = site["base"]
    c = sign_in(site, "bob")
    csrf: str = c.csrf  # type: ignore[attr-defined]
    play = {"task_id": "answer", "campaign": "csrf"}
    same = {"Origin": base}
    assert c.post("/api/play", json=play, headers=same).status_code == 403  # no CSRF token
    assert c.post("/api/play", json=play, headers={**same, "X-CSRF-Token": "x" * 43}).status_code == 403
    for bad in ({"Origin": "http://evil.example"}, {"Origin": "null"}, {"Referer": "http://evil.example/x"},
                {"Origin": f"https://127.0.0.1:{site['port']}"}, {}):
        r = c.post("/api/play", json=play, headers={**bad, "X-CSRF-Token": csrf})
        assert r.status_code == 403, (bad, r.status_code)
    # a form post needs its hidden field, from this origin
    assert c.post("/play", data=play, headers=same).status_code == 403
    assert c.post("/play", data={**play, "csrf_token": csrf}, headers={"Origin": "http://evil.example"}).status_code == 403
    r = c.post("/play", data={**play, "csrf_token": csrf}, headers={"Referer": base + "/play"})
    assert r.status_code == 303 and r.headers["location"].startswith("/play/") and r.headers["location"].endswith("/workbench"), r.text
    sid = r.headers["location"].split("/")[2]  # /play/{sid}/workbench
    r = c.post(f"/api/play/{sid}/action", json={"submit": "done"}, headers={**same, "X-CSRF-Token": csrf})
    assert r.status_code == 200, r.text
    # another session's CSRF token does not do
    other = sign_in(site, "bob")
    assert c.post("/api/play", json=play, headers={**same, "X-CSRF-Token": other.csrf}).status_code == 403  # type: ignore[attr-defined]
    # signing out ends the session
    assert c.post("/signout", data={"csrf_token": csrf}, headers=same).status_code == 303
    assert c.get("/api/campaigns").status_code == 401
    other.close()
    c.close()


def test_the_session_cookie_is_httponly_strict_and_secure_behind_tls(site: dict[str, Any]) -> None:
    base = site["base"]
    for proto, secure in (("http", False), ("https", True)):
        r = hpost(base + "/signin", data={"token": site["tokens"]["alice"]},
                       headers={"X-Forwarded-Proto": proto, "Origin": f"{proto}://127.0.0.1:{site['port']}"})
        assert r.status_code == 303, r.text
        cookie = r.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie, cookie
        assert ("; secure" in cookie) is secure, cookie
    # a sign-in form posted from another site is refused; a redirect target elsewhere is not followed
    assert hpost(base + "/signin", data={"token": site["tokens"]["alice"]},
                      headers={"Origin": "http://evil.example"}).status_code == 403
    for target in ("//evil.example/x", "https://evil.example/", "/\\evil.example"):
        r = hpost(base + "/signin", data={"token": site["tokens"]["alice"], "next": target})
        assert r.status_code == 303 and r.headers["location"] == "/", (target, r.headers["location"])


def test_oversized_bodies_are_413(site: dict[str, Any]) -> None:
    base = site["base"]
    h = {**bearer(site["tokens"]["alice"]), "Content-Type": "application/json"}
    big = b'{"task_id": "' + b"a" * (MiB + 10) + b'"}'
    assert hpost(base + "/api/play", content=big, headers=h).status_code == 413

    def chunks() -> Iterator[bytes]:  # no Content-Length: the cap applies while the body streams in
        yield b'{"task_id": "'
        for _ in range(20):
            yield b"a" * (128 * 1024)
        yield b'"}'

    r = hpost(base + "/api/play", content=chunks(), headers=h)
    assert r.status_code == 413, r.text
    c = sign_in(site, "alice")
    r = c.post("/play", content=b"csrf_token=x&task_id=" + b"a" * (MiB + 10),
               headers={"Origin": base, "Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 413
    c.close()
    # just under the cap is an ordinary (refused) play request
    ok = b'{"task_id": "' + b"a" * (MiB - 100) + b'"}'
    assert hpost(base + "/api/play", content=ok, headers=h).status_code == 400
    assert hget(base + "/api/campaigns", headers=h).status_code == 200


def test_deep_or_huge_json_is_400_not_500(site: dict[str, Any]) -> None:
    h = {**bearer(site["tokens"]["alice"]), "Content-Type": "application/json"}
    for body in (b"[" * 100_000 + b"]" * 100_000, b'{"task_id": ' + b"9" * 5000 + b"}", b"\xff\xfe"):
        r = hpost(site["base"] + "/api/play", content=body, headers=h)
        assert r.status_code == 400, (body[:20], r.status_code)


def test_api_docs_are_served_without_any_network(site: dict[str, Any]) -> None:
    h = bearer(site["tokens"]["alice"])
    r = hget(site["base"] + "/api/docs", headers=h)
    assert r.status_code == 200 and "/api/play" in r.text
    assert not re.search(r"(src|href)=\"(https?:)?//", r.text), "a page of the docs loads something from elsewhere"
    assert hget(site["base"] + "/api/openapi.json", headers=h).json()["paths"]
    for path in ("/docs", "/redoc"):
        assert hget(site["base"] + path, headers=h).status_code == 404


def test_the_token_is_shown_once_and_stored_hashed(site: dict[str, Any]) -> None:
    db = (Path(site["wd"]) / "store.db").read_bytes()
    for name, token in site["tokens"].items():
        assert token.encode() not in db, f"{name}'s token is in the database file in clear"
    listed = assay("users", "list", "--store", site["store"], cwd=site["wd"])
    assert listed.returncode == 0, listed.stderr
    # "gone" is there or not depending on whether the removal test ran first in this process
    rows = [ln.split("\t")[:2] for ln in listed.stdout.splitlines()]
    assert [r for r in rows if r[0] != "gone"] == [["alice", "user"], ["bob", "user"], ["root", "admin"]]
    for token in site["tokens"].values():
        assert token not in listed.stdout
    alice = site["tokens"]["alice"]
    import sqlite3

    with contextlib.closing(sqlite3.connect(Path(site["wd"]) / "store.db")) as conn:
        stored = conn.execute("select token_sha256 from users where name = 'alice'").fetchone()[0]
    assert stored == hashlib.sha256(alice.encode()).hexdigest()


def test_without_sign_in_the_local_server_still_refuses_cross_site_posts() -> None:
    """No accounts, no token, loopback: a local single user, but a page elsewhere still cannot act."""
    with workdir("web-open") as wd:
        answer_task(wd / "suite" / "answer")
        with serve(wd, f"sqlite:///{wd / 'store.db'}") as s:
            base = s["base"]
            assert hget(base + "/api/campaigns").status_code == 200
            form = {"task_id": "answer", "name": "ada"}
            r = hpost(base + "/play", data=form, headers={"Origin": "http://evil.example"})
            assert r.status_code == 403, r.text
            r = hpost(base + "/play", data=form, headers={"Referer": "http://evil.example/page"})
            assert r.status_code == 403, r.text
            r = hpost(base + "/api/play", content=b'{"task_id": "answer", "name": "ada"}',
                           headers={"Content-Type": "text/plain", "Origin": "http://evil.example"})
            assert r.status_code in (403, 415), r.text
            r = hpost(base + "/api/play", content=b'{"task_id": "answer", "name": "ada"}',
                           headers={"Content-Type": "text/plain"})
            assert r.status_code == 415, r.text
            assert hget(base + "/api/campaigns", headers={"Host": "rebind.evil.example"}).status_code == 400
            assert hpost(base + "/api/play", content=b"{" + b" " * (2 * MiB) + b"}",
                              headers={"Content-Type": "application/json"}).status_code == 413
            # the same-origin form and a plain JSON client work as before
            r = hpost(base + "/play", data=form, headers={"Origin": base})
            assert r.status_code == 303, r.text
            sid = r.headers["location"].split("/")[2]  # /play/{sid}/workbench
            r = hpost(f"{base}/api/play/{sid}/action", json={"submit": ""}, timeout=60)
            assert r.status_code == 200, r.text
        reap(str(wd))


def test_a_shared_token_signs_in_as_admin(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o711)
    answer_task(tmp_path / "suite" / "answer")
    shared = "a-shared-secret-of-some-length"
    with serve(tmp_path, f"sqlite:///{tmp_path / 'store.db'}", "--token", shared) as s:
        assert hget(s["base"] + "/api/campaigns").status_code == 401
        assert hget(s["base"] + "/api/me", headers=bearer(shared)).json() == {
            "name": "admin", "role": "admin", "agent": "human:admin"}
        r = hpost(s["base"] + "/api/play", json={"task_id": "answer", "name": "zed"}, headers=bearer(shared))
        assert r.status_code == 200 and r.json()["agent"] == "human:admin", r.text
        sid = r.json()["session"]
        assert hpost(f"{s['base']}/api/play/{sid}/action", json={"submit": ""}, headers=bearer(shared),
                          timeout=60).status_code == 200


def test_non_loopback_bind_without_sign_in_exits_2(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'store.db'}"
    for host in ("0.0.0.0", "::", "192.0.2.1"):
        r = assay_process("serve", "--host", host, "--allow-remote", "--port", str(free_port()), "--store", store,
                          cwd=tmp_path, timeout=60)
        assert r.returncode == 2, (host, r.returncode, r.stderr)
        assert "--host" in r.stderr and "assay users add" in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert not (tmp_path / "store.db").exists()  # refused before anything is written
    r = assay_process("serve", "--allowed-host", "http://x/", "--store", store, cwd=tmp_path, timeout=60)
    assert r.returncode == 2 and "--allowed-host" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_port_in_use_exits_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = assay_process("serve", "--port", str(port), "--store", f"sqlite:///{tmp_path / 'store.db'}",
                          cwd=tmp_path, timeout=60)
    assert r.returncode == 2 and "--port" in r.stderr and "Traceback" not in r.stderr, r.stderr
