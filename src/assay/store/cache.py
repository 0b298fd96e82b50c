"""The judge cache: a judge's reply kept under its key (the full prompt), read before asking again."""

from __future__ import annotations

import time

from sqlalchemy import Connection, select

from assay.store.models import judge_cache_t
from assay.store.transactions import StoreBase

__all__ = ["JudgeCache"]


class JudgeCache(StoreBase):
    """A store's judge cache (a part of `Store`)."""

    def cache_put(self, key: str, value: str) -> None:
        """Insert or replace a judge-cache entry."""
        now = time.time()
        ins = self._insert(judge_cache_t)

        def work(conn: Connection) -> None:
            if ins is not None:
                stmt = ins.values(key=key, value=value, created_at=now)
                conn.execute(
                    stmt.on_conflict_do_update(
                        index_elements=["key"],
                        set_={"value": stmt.excluded.value, "created_at": stmt.excluded.created_at},
                    )
                )
            else:
                conn.execute(judge_cache_t.delete().where(judge_cache_t.c.key == key))
                conn.execute(judge_cache_t.insert().values(key=key, value=value, created_at=now))

        self.write(work)

    def cache_add(self, key: str, value: str) -> str:
        """Keep `value` under `key` unless an entry is there already; the entry kept (the first
        one written wins, whichever worker wrote it: a verdict every worker shares)."""
        now = time.time()
        ins = self._insert(judge_cache_t)
        there = select(judge_cache_t.c.value).where(judge_cache_t.c.key == key)

        def work(conn: Connection) -> str:
            if ins is not None:
                conn.execute(ins.values(key=key, value=value, created_at=now).on_conflict_do_nothing(
                    index_elements=["key"]))
            elif conn.execute(there).first() is None:
                conn.execute(judge_cache_t.insert().values(key=key, value=value, created_at=now))
            return str(conn.execute(there).scalar_one())

        return self.write(work)

    def cache_get(self, key: str) -> str | None:
        with self.engine.connect() as conn:
            return conn.execute(
                select(judge_cache_t.c.value).where(judge_cache_t.c.key == key)
            ).scalar_one_or_none()
