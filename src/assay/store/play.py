"""Human play sessions and browser sign-ins of the web app, kept in the store so that both
survive a server restart (`assay.web.human`, `assay.web.security`).

A play session row holds who started what (owner, agent name, task, level, campaign, epoch),
its state (`live` until its run is stored, then `done`; `ended` when it could not be picked
up again) and every action taken so far, as JSON, in order. A sign-in row holds the SHA-256
of the cookie value (never the value), the identity and the CSRF token of that sign-in.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any, Literal

from pydantic import BaseModel, Field
from sqlalchemy import select

from assay.store.db import Store
from assay.store.models import play_sessions_t, web_signins_t

__all__ = ["PlayState", "RecordedAction", "StoredPlay", "StoredSignin", "add_play", "append_action", "delete_signin",
           "end_play", "live_plays", "load_signin", "play_epochs", "save_signin"]

PlayState = Literal["live", "done", "ended"]


class RecordedAction(BaseModel):
    """One action a person took, as the browser sent it (after checking)."""

    version: int = 1
    kind: Literal["tool", "submit"]
    tool: str = ""
    args: dict[str, Any] = Field(default_factory=dict)
    text: str = ""
    at: float = 0.0  # wall-clock seconds since the session started


class StoredPlay(BaseModel):
    version: int = 1
    id: str
    owner: str | None
    name: str
    task_id: str
    level: str | None
    campaign: str
    epoch: int
    state: PlayState
    actions: list[RecordedAction]
    run_id: str | None = None
    created_at: float
    updated_at: float


class StoredSignin(BaseModel):
    name: str
    role: str
    csrf: str
    account: bool
    expires: float


def add_play(store: Store, play: StoredPlay) -> None:
    with store.transaction() as conn:
        conn.execute(play_sessions_t.insert().values(
            id=play.id, owner=play.owner, name=play.name, task_id=play.task_id, level=play.level,
            campaign=play.campaign, epoch=play.epoch, state=play.state,
            actions=json.dumps([a.model_dump() for a in play.actions], ensure_ascii=False),
            run_id=play.run_id, created_at=play.created_at, updated_at=play.updated_at))


def append_action(store: Store, play_id: str, action: RecordedAction) -> None:
    """Add one action to a live session (read and written in one transaction)."""
    t = play_sessions_t
    with store.transaction() as conn:
        raw = conn.execute(select(t.c.actions).where(t.c.id == play_id, t.c.state == "live")).scalar_one_or_none()
        if raw is None:
            return
        actions = json.loads(raw)
        actions.append(action.model_dump())
        conn.execute(t.update().where(t.c.id == play_id).values(actions=json.dumps(actions, ensure_ascii=False),
                                                                updated_at=time.time()))


def end_play(store: Store, play_id: str, state: PlayState, run_id: str | None = None) -> None:
    t = play_sessions_t
    with store.transaction() as conn:
        conn.execute(t.update().where(t.c.id == play_id).values(state=state, run_id=run_id, updated_at=time.time()))


def live_plays(store: Store) -> list[StoredPlay]:
    """Sessions whose run is not stored yet, oldest first."""
    t = play_sessions_t
    with store.engine.connect() as conn:
        rows = conn.execute(select(t).where(t.c.state == "live").order_by(t.c.created_at)).mappings().all()
    return [StoredPlay.model_validate({**row, "actions": json.loads(row["actions"])}) for row in rows]


def play_epochs(store: Store, campaign: str, task_id: str, name: str, level: str | None) -> list[int]:
    """Epochs taken by live sessions of (campaign, task, person, level)."""
    t = play_sessions_t
    q = select(t.c.epoch).where(t.c.campaign == campaign, t.c.task_id == task_id, t.c.name == name,
                                t.c.state == "live")
    q = q.where(t.c.level.is_(None)) if level is None else q.where(t.c.level == level)
    with store.engine.connect() as conn:
        return list(conn.execute(q).scalars())


def _sid_hash(sid: str) -> str:
    return hashlib.sha256(sid.encode("utf-8", "surrogatepass")).hexdigest()


def save_signin(store: Store, sid: str, signin: StoredSignin) -> None:
    now = time.time()
    with store.transaction() as conn:
        conn.execute(web_signins_t.delete().where(web_signins_t.c.expires < now))
        conn.execute(web_signins_t.insert().values(sid_sha256=_sid_hash(sid), **signin.model_dump()))


def load_signin(store: Store, sid: str) -> StoredSignin | None:
    t = web_signins_t
    with store.engine.connect() as conn:
        row = conn.execute(select(t).where(t.c.sid_sha256 == _sid_hash(sid))).mappings().first()
    if row is None:
        return None
    return StoredSignin.model_validate({k: row[k] for k in ("name", "role", "csrf", "account", "expires")})


def delete_signin(store: Store, sid: str) -> None:
    with store.transaction() as conn:
        conn.execute(web_signins_t.delete().where(web_signins_t.c.sid_sha256 == _sid_hash(sid)))
