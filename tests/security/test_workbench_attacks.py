"""The workbench's endpoints under attack (docs/web.md, "The workbench"), on the real
`assay serve` with real accounts, a real sandboxed run and a real SQLite store:

- path traversal, absolute paths and links out of the workspace in every path-like
  parameter (`tree?path=`, `open`'s `path`, the `path`/`cwd` of actions): refused by the
  run's tools, nothing outside the workspace is read or written;
- another account's session id: 404 on the workbench page, the tree and open;
- cross-origin, CSRF-less, `text/plain` and form posts to `open` and `action`: 403 / 415;
- an idle session ends by the task's time limit and is graded as it stands;
- `/healthz` is open, tells nothing else, and the request log holds no token or cookie.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import answer_task
from tests.security._support import bwrap_ok, reap, workdir
from tests.security.test_web_auth import TIMEOUT, add_user, bearer, hget, hpost, serve, sign_in

pytestmark = pytest.mark.skipif(not bwrap_ok(), reason="bubblewrap is not installed")

SECRET = "host-secret-7f3a"


@pytest.fixture(scope="module")
def site() -> Iterator[dict[str, Any]]:
    with workdir("workbench") as wd:
        answer_task(wd / "suite" / "answer", tools=["run_command", "list_files", "read_file", "write_file",
                                                      "edit_file"])
        answer_task(wd / "suite" / "quick", budget={"minutes": 0.05})
        (wd / "outside.txt").write_text(SECRET + "\n")
        store = f"sqlite:///{wd / 'store.db'}"
        tokens = {n: add_user(wd, store, n) for n in ("alice", "bob")}
        with serve(wd, store) as s:
            yield {**s, "wd": wd, "store": store, "tokens": tokens}
        reap(str(wd))


def _start(site: dict[str, Any], who: str, task: str = "answer") -> str:
    h = bearer(site["tokens"][who])
    r = hpost(site["base"] + "/api/play", json={"task_id": task, "campaign": "wb"}, headers=h, timeout=30)
    assert r.status_code == 200, r.text
    sid = str(r.json()["session"])
    deadline = time.monotonic() + 60
    while hget(f"{site['base']}/api/play/{sid}", headers=h).json()["state"] != "running":
        assert time.monotonic() < deadline, "the run did not start"
        time.sleep(0.1)
    return sid


@pytest.fixture(scope="module")
def alice_session(site: dict[str, Any]) -> str:
    return _start(site, "alice")


def _act(site: dict[str, Any], sid: str, tool: str, **args: Any) -> str:
    r = hpost(f"{site['base']}/api/play/{sid}/action", json={"tool": tool, "args": args},
              headers=bearer(site["tokens"]["alice"]), timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    return str(r.json()["output"])


def test_path_traversal_and_links_in_every_path_parameter(site: dict[str, Any], alice_session: str) -> None:
    base, sid, h = site["base"], alice_session, bearer(site["tokens"]["alice"])
    outside = str(site["wd"] / "outside.txt")
    # links out of the workspace, made from inside the sandbox (the agent controls the workspace)
    made = _act(site, sid, "run_command", command=f"ln -s {outside} out.txt && ln -s / root && ln -s .. up && "
                                                  "mkdir -p d && echo ok")
    assert "ok" in made, made
    tree = hget(f"{base}/api/play/{sid}/tree", headers=h).json()["entries"]
    assert {"path": "out.txt", "kind": "link", "target": outside} in tree and {"path": "d", "kind": "dir"} in tree
    assert not any(e["path"].startswith(("root/", "up/")) for e in tree)  # links are listed, never followed
    bad = ["..", "../..", "../outside.txt", "/etc", "/etc/passwd", outside, "root/etc", "up", "up/outside.txt",
           "d/../../outside.txt", "out.txt", "root"]
    for path in bad:
        r = hget(f"{base}/api/play/{sid}/tree", params={"path": path}, headers=h)
        assert r.status_code == 409 or path == "out.txt", (path, r.status_code, r.text)
        assert SECRET not in r.text and "passwd" not in r.text.replace(path, ""), (path, r.text)
        r = hpost(f"{base}/api/play/{sid}/open", json={"path": path}, headers=h, timeout=TIMEOUT)
        assert r.status_code == 200, (path, r.text)
        got = r.json()
        assert got["content"] is None and got["output"].startswith("error:"), (path, got)
        assert SECRET not in r.text and "root:x:0" not in r.text
        for tool in ("read_file", "list_files"):
            out = _act(site, sid, tool, path=path)
            assert out.startswith("error:") and SECRET not in out and "root:x:0" not in out, (tool, path, out)
        for tool, args in (("edit_file", {"path": path, "old_text": SECRET, "new_text": "pwned"}),
                           ("write_file", {"path": path, "content": "pwned"})):
            out = _act(site, sid, tool, **args)  # at most a workspace file is written (a link replaced)
            assert SECRET not in out, (tool, path, out)
            assert (site["wd"] / "outside.txt").read_text() == SECRET + "\n", (tool, path, out)
    # `cwd` of a command: outside the workspace is refused, nothing runs there
    for cwd in ("..", "/", "/etc", "up", "root"):
        out = _act(site, sid, "run_command", command="cat outside.txt; pwd", cwd=cwd)
        assert SECRET not in out, (cwd, out)
    assert (site["wd"] / "outside.txt").read_text() == SECRET + "\n"
    # a workspace file is still read and written normally
    assert _act(site, sid, "write_file", path="d/ok.txt", content="fine\n").startswith("wrote")
    r = hpost(f"{base}/api/play/{sid}/open", json={"path": "d/ok.txt"}, headers=h, timeout=TIMEOUT)
    assert r.json()["content"] == "fine\n" and r.json()["whole"] is True
    tree = hget(f"{base}/api/play/{sid}/tree", headers=h).json()["entries"]
    assert {"path": "d/ok.txt", "kind": "file", "size": 5} in tree
    for bad_body in ({}, {"path": ""}, {"path": 7}, {"path": ["a"]}):
        assert hpost(f"{base}/api/play/{sid}/open", json=bad_body, headers=h).status_code == 400, bad_body


def test_another_accounts_session_is_404_on_the_workbench(site: dict[str, Any], alice_session: str) -> None:
    base, sid = site["base"], alice_session
    bob = bearer(site["tokens"]["bob"])
    assert hget(f"{base}/play/{sid}/workbench", headers=bob).status_code == 404
    assert hget(f"{base}/api/play/{sid}/tree", headers=bob).status_code == 404
    r = hpost(f"{base}/api/play/{sid}/open", json={"path": "README.md"}, headers=bob)
    assert r.status_code == 404 and "hello" not in r.text
    assert hget(f"{base}/play/{sid}/workbench", headers=bearer(site["tokens"]["alice"])).status_code == 200
    for guess in ("x", "../" + sid, sid + "x", "%2e%2e"):
        assert hget(f"{base}/api/play/{guess}/tree", headers=bearer(site["tokens"]["alice"])).status_code == 404


def test_cross_origin_csrf_less_and_text_plain_posts_are_refused(site: dict[str, Any], alice_session: str) -> None:
    base, sid = site["base"], alice_session
    c: httpx.Client = sign_in(site, "alice")
    csrf = c.csrf  # type: ignore[attr-defined]
    own = {"Origin": base, "X-CSRF-Token": csrf}
    for path, body in ((f"/api/play/{sid}/open", {"path": "README.md"}),
                       (f"/api/play/{sid}/action", {"tool": "run_command", "args": {"command": "touch pwned"}})):
        r = c.post(path, json=body, headers={"Origin": "http://evil.example", "X-CSRF-Token": csrf})
        assert r.status_code == 403, (path, r.text)
        assert c.post(path, json=body, headers={"Origin": base}).status_code == 403  # no CSRF token
        assert c.post(path, json=body, headers={"X-CSRF-Token": csrf}).status_code == 403  # no Origin
        r = c.post(path, content=b'{"path": "README.md"}', headers={**own, "Content-Type": "text/plain"})
        assert r.status_code == 415, (path, r.text)
        r = c.post(path, data={"path": "README.md"}, headers=own)
        assert r.status_code == 415, (path, r.text)
    listing = c.get(f"/api/play/{sid}/tree").json()["entries"]
    assert not any(e["path"] == "pwned" for e in listing)
    r = c.post(f"/api/play/{sid}/open", json={"path": "README.md"}, headers=own)  # the page's own request works
    assert r.status_code == 200 and r.json()["content"] == "hello\n"
    c.close()


def test_an_idle_session_ends_by_the_time_limit_and_is_graded_as_it_stands(site: dict[str, Any]) -> None:
    base, h = site["base"], bearer(site["tokens"]["alice"])
    sid = _start(site, "alice", "quick")
    r = hpost(f"{base}/api/play/{sid}/action", json={"tool": "write_file", "args": {"path": "answer.txt",
                                                                                    "content": "42\n"}}, headers=h)
    assert r.status_code == 200, r.text
    deadline = time.monotonic() + 90
    while (state := hget(f"{base}/api/play/{sid}", headers=h).json())["state"] not in ("done", "error"):
        assert time.monotonic() < deadline, state
        time.sleep(0.2)
    run = state["run"]
    assert run["end_reason"] == "max_time" and run["passed"] and run["agent"] == "human:alice", run
    r = hpost(f"{base}/api/play/{sid}/action", json={"submit": "late"}, headers=h)
    assert r.status_code == 409


def test_health_is_open_and_the_log_keeps_no_secret(site: dict[str, Any]) -> None:
    r = hget(site["base"] + "/healthz")
    assert r.status_code == 200 and r.json()["status"] == "ok" and r.json()["store"] == "ok"
    assert set(r.json()) == {"status", "version", "store", "play_sessions"}
    assert hget(site["base"] + "/healthz", headers={"Host": "evil.example"}).status_code == 400
    c = sign_in(site, "bob")
    c.get("/api/tasks?token=" + site["tokens"]["bob"])
    c.close()
    # the server writes a request's line once its answer is sent: wait for the last one
    wanted = ("GET /healthz 200", "POST /signin 303", "GET /api/tasks 200")
    deadline = time.monotonic() + 20
    while True:
        text = "".join(p.read_text() for p in Path(site["wd"]).glob("serve-*.log"))
        if all(w in text for w in wanted) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert all(w in text for w in wanted), text[-2000:]
    for secret in site["tokens"].values():
        assert secret not in text
    assert "assay_session" not in text and "token=" not in text
