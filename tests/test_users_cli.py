"""`assay users add|list|remove` on a real SQLite file and a real PostgreSQL server."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from assay.store import open_store
from assay.store.accounts import find_by_token
from tests.helpers import assay


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.slow)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/.assay/assay.db"
    return str(request.getfixturevalue("pg_url"))


def test_add_list_remove(url: str, tmp_path: Path) -> None:
    r = assay("users", "add", "alice", "--store", url, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    token = r.stdout.strip()
    assert len(token) >= 40 and "\n" not in token and "shown only now" in r.stderr
    r = assay("users", "add", "eve", "--role", "expert", "--store", url, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    eve = r.stdout.strip()
    assert eve != token
    listed = assay("users", "list", "--store", url, "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)["users"]
    assert [(u["name"], u["role"]) for u in rows] == [("alice", "user"), ("eve", "expert")]
    assert token not in listed.stdout and eve not in listed.stdout
    # stored as its SHA-256 only, and found by it
    engine = create_engine(url)
    with engine.connect() as c:
        stored: dict[str, str] = {str(n): str(h) for n, h in c.execute(text("select name, token_sha256 from users"))}
    engine.dispose()
    assert stored == {"alice": hashlib.sha256(token.encode()).hexdigest(),
                      "eve": hashlib.sha256(eve.encode()).hexdigest()}
    if url.startswith("sqlite:///"):
        assert token.encode() not in Path(url.removeprefix("sqlite:///")).read_bytes()
    st = open_store(url)
    try:
        found = find_by_token(st, token)
        assert found is not None and found.name == "alice"
        assert find_by_token(st, token[:-1] + ("A" if token[-1] != "A" else "B")) is None
        assert find_by_token(st, "") is None
    finally:
        st.close()
    r = assay("users", "remove", "alice", "--store", url, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    listed = assay("users", "list", "--store", url, cwd=tmp_path)
    assert [ln.split("\t")[:2] for ln in listed.stdout.splitlines()] == [["eve", "expert"]]


def test_bad_names_duplicates_and_unknown_names_exit_2(url: str, tmp_path: Path) -> None:
    assert assay("users", "add", "bob", "--store", url, cwd=tmp_path).returncode == 0
    cases = [
        (("users", "add", "bob"), "already exists"),
        (("users", "add", "no spaces"), "not a valid account name"),
        (("users", "add", "../x"), "not a valid account name"),
        (("users", "add", "-x"), ""),
        (("users", "add", "x" * 65), "not a valid account name"),
        (("users", "add", "carol", "--role", "root"), "--role"),
        (("users", "remove", "nobody"), "no account named 'nobody'"),
    ]
    for args, words in cases:
        r = assay(*args, "--store", url, cwd=tmp_path)
        assert r.returncode == 2, (args, r.returncode, r.stdout, r.stderr)
        assert words in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
        assert r.stdout.strip() == "", (args, r.stdout)  # no token printed for a refused add
    listed = assay("users", "list", "--store", url, "--json", cwd=tmp_path)
    assert [u["name"] for u in json.loads(listed.stdout)["users"]] == ["bob"]


def test_list_of_a_missing_store_exits_2(tmp_path: Path) -> None:
    for args in (("users", "list"), ("users", "remove", "x")):
        r = assay(*args, "--store", f"sqlite:///{tmp_path}/none.db", cwd=tmp_path)
        assert r.returncode == 2 and "no store here yet" in r.stderr, r.stderr
        assert not (tmp_path / "none.db").exists()
