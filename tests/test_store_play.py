"""Migration 0004 (play sessions, sign-ins) and `assay.store.play`, on SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from sqlalchemy import create_engine, inspect, text

from assay.store import open_store
from assay.store.accounts import find_by_token
from assay.store.play import (
    RecordedAction,
    StoredPlay,
    StoredSignin,
    add_play,
    append_action,
    delete_signin,
    end_play,
    live_plays,
    load_signin,
    play_epochs,
    save_signin,
)


def test_a_store_of_schema_0003_is_migrated_to_0004_with_its_accounts(store_url: str) -> None:
    from alembic import command
    from alembic.config import Config

    from assay.store.opening import MIGRATIONS_DIR, head_revision

    if store_url.startswith("sqlite:///"):
        Path(store_url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    eng = create_engine(store_url)
    digest = hashlib.sha256(b"tok").hexdigest()
    with eng.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0003")
        conn.execute(text("insert into users (name, token_sha256, role, created_at) values ('alice', :d, 'user', 0)"),
                     {"d": digest})
    with eng.connect() as conn:
        assert "play_sessions" not in inspect(conn).get_table_names()
    eng.dispose()
    with open_store(store_url) as s:
        acc = find_by_token(s, "tok")
        assert acc is not None and acc.name == "alice"
        assert live_plays(s) == []
        with s.engine.connect() as conn:
            assert conn.execute(text("select version_num from alembic_version")).scalar_one() == head_revision()
            assert {"play_sessions", "web_signins"} <= set(inspect(conn).get_table_names())


def test_play_sessions_keep_their_actions_in_order_until_they_end(store_url: str) -> None:
    now = time.time()
    with open_store(store_url) as s:
        play = StoredPlay(id="p1", owner="alice", name="alice", task_id="t/x", level="L3", campaign="human", epoch=2,
                          state="live", actions=[], created_at=now, updated_at=now)
        add_play(s, play)
        add_play(s, play.model_copy(update={"id": "p2", "level": None, "epoch": 1}))
        a1 = RecordedAction(kind="tool", tool="run_command", args={"command": "echo 'é'"}, at=1.5)
        a2 = RecordedAction(kind="submit", text="done", at=3.0)
        append_action(s, "p1", a1)
        append_action(s, "p1", a2)
        (p1, p2) = live_plays(s)
        assert p1.id == "p1" and p1.actions == [a1, a2] and p1.level == "L3" and p1.owner == "alice"
        assert p2.actions == [] and p2.level is None
        assert play_epochs(s, "human", "t/x", "alice", "L3") == [2]
        assert play_epochs(s, "human", "t/x", "alice", None) == [1]
        end_play(s, "p1", "done", "run123")
        append_action(s, "p1", a1)  # an ended session takes no more actions
        assert [p.id for p in live_plays(s)] == ["p2"]
        assert play_epochs(s, "human", "t/x", "alice", "L3") == []


def test_sign_ins_are_kept_by_the_hash_of_the_cookie_only(store_url: str) -> None:
    sid = "cookie-value-" + "x" * 30
    with open_store(store_url) as s:
        kept = StoredSignin(name="alice", role="expert", csrf="c" * 43, account=True, expires=time.time() + 60)
        save_signin(s, sid, kept)
        assert load_signin(s, sid) == kept
        assert load_signin(s, sid + "y") is None
        with s.engine.connect() as conn:
            rows = conn.execute(text("select sid_sha256 from web_signins")).scalars().all()
        assert rows == [hashlib.sha256(sid.encode()).hexdigest()] and sid not in rows
        delete_signin(s, sid)
        assert load_signin(s, sid) is None
        # an expired sign-in is cleared by the next one
        save_signin(s, "old", kept.model_copy(update={"expires": time.time() - 1}))
        save_signin(s, "new", kept)
        assert load_signin(s, "old") is None and load_signin(s, "new") == kept
