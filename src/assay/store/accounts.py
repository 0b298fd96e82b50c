"""Accounts of the web app (`assay users`): a name, a role, and a secret token stored hashed.

A token is `secrets.token_urlsafe(32)` (256 random bits); the store keeps only its SHA-256
(hex), so a copy of the database does not let anyone sign in. A high-entropy token needs no
slow password hash: nobody can guess one to match a leaked digest. Looking a token up hashes
it, reads the row holding that digest, and compares the digests in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from typing import Literal

from pydantic import BaseModel
from sqlalchemy import select

from assay.errors import InputError
from assay.store.db import Store
from assay.store.models import users_t

__all__ = ["ACCOUNT_NAME_RE", "ROLES", "Account", "Role", "accounts", "add_account", "find_by_token", "get_account",
           "has_accounts", "hash_token", "remove_account"]

Role = Literal["user", "expert", "admin"]
ROLES: tuple[Role, ...] = ("user", "expert", "admin")
#: the same names `human:NAME` play accepts (an agent spec stays one plain word)
ACCOUNT_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")


class Account(BaseModel):
    name: str
    role: Role
    created_at: float


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def _check_name(name: str) -> None:
    if not ACCOUNT_NAME_RE.match(name):
        raise InputError(None, "NAME", f"{name!r} is not a valid account name: use 1-64 letters, digits, "
                                       "'.', '_' or '-', starting with a letter or digit")


def add_account(store: Store, name: str, role: str = "user") -> str:
    """Create an account; returns its new secret token (shown once, stored only hashed)."""
    _check_name(name)
    if role not in ROLES:
        raise InputError(None, "--role", f"{role!r} is not one of {', '.join(ROLES)}")
    token = secrets.token_urlsafe(32)
    with store.transaction() as conn:
        if conn.execute(select(users_t.c.name).where(users_t.c.name == name)).first() is not None:
            raise InputError(None, "NAME", f"an account named {name!r} already exists in {store.url}")
        conn.execute(users_t.insert().values(name=name, token_sha256=hash_token(token), role=role,
                                             created_at=time.time()))
    return token


def remove_account(store: Store, name: str) -> None:
    with store.transaction() as conn:
        gone = conn.execute(users_t.delete().where(users_t.c.name == name)).rowcount
    if not gone:
        raise InputError(None, "NAME", f"no account named {name!r} in {store.url}")


def accounts(store: Store) -> list[Account]:
    with store.engine.connect() as conn:
        rows = conn.execute(select(users_t.c.name, users_t.c.role, users_t.c.created_at)
                            .order_by(users_t.c.created_at, users_t.c.name)).all()
    return [Account(name=n, role=r, created_at=t) for n, r, t in rows]


def has_accounts(store: Store) -> bool:
    with store.engine.connect() as conn:
        return conn.execute(select(users_t.c.name).limit(1)).first() is not None


def get_account(store: Store, name: str) -> Account | None:
    with store.engine.connect() as conn:
        row = conn.execute(select(users_t.c.name, users_t.c.role, users_t.c.created_at)
                           .where(users_t.c.name == name)).first()
    return None if row is None else Account(name=row[0], role=row[1], created_at=row[2])


def find_by_token(store: Store, token: str) -> Account | None:
    """The account whose token this is, or None."""
    if not token:
        return None
    digest = hash_token(token)
    with store.engine.connect() as conn:
        row = conn.execute(select(users_t.c.name, users_t.c.role, users_t.c.created_at, users_t.c.token_sha256)
                           .where(users_t.c.token_sha256 == digest)).first()
    if row is None or not hmac.compare_digest(str(row[3]), digest):
        return None
    return Account(name=row[0], role=row[1], created_at=row[2])
