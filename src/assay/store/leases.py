"""Leases: which worker runs which run key, claimed, kept alive, given back and waited on.

Several workers (processes, machines) share one campaign through leases: a worker runs a key
only after `claim` gave it the key's lease (one transaction that refuses a finished key or a
live lease of another worker, takes over an expired one, and decides the attempt number);
`heartbeat` keeps a worker's leases alive and `release` gives them back. On PostgreSQL all of
them lock lease rows in one order (`LEASE_ORDER`), so workers never deadlock, and a
transaction the database rolls back to break a conflict all the same is run again
(`StoreBase.write`). A worker waiting on keys another holds is woken by `watch` when runs are
stored or leases given back (`assay.store.watch`), and reads where they stand with
`lease_states`.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Collection, Sequence
from typing import Any

from sqlalchemy import ColumnElement, Connection, bindparam, exc, func, literal, select, update

from assay.errors import InputError
from assay.store.finished import GRADED_KEYS, finished
from assay.store.models import leases_t, runs_t
from assay.store.transactions import NOTIFY_CHANNEL, StoreBase, db_reason, dialect_insert
from assay.store.watch import PostgresWatch, SqliteWatch, Watch

__all__ = ["LEASE_ORDER", "LeaseStates", "Leases"]

# One lock order for every statement that locks lease rows on PostgreSQL (claims, saves,
# heartbeats, releases): (campaign, key_digest) in the database's own order, locked by one
# `SELECT ... ORDER BY ... FOR UPDATE` before the rows are changed (PostgreSQL sorts, then
# locks the rows in that order). After every lock, a transaction writes its keys in one
# pass in that order (a claim's drops, take-overs and inserts alike) and changes only rows it
# locked or inserts new ones (a save releases only the lease rows it locked). Two
# transactions that lock in one order, then write in one order, never wait on each other in
# a cycle, so workers never deadlock; a deadlock or serialization failure all the same
# (another program on the database) is retried (`Store.write`).
_lk = leases_t.c
LEASE_ORDER = (_lk.campaign, _lk.key_digest)
_HOLDER_LOCK = select(_lk.key_digest).where(_lk.holder == bindparam("h")).order_by(*LEASE_ORDER).with_for_update()

# The claim's statements (`Store.claim_many`), built once: building an expression per call costs
# more CPU than SQLite takes to run it.
_CLAIM_LEASES = select(_lk.key_digest, _lk.holder, _lk.heartbeat_at, _lk.ttl_s, _lk.attempt).where(
    _lk.campaign == bindparam("c"), _lk.key_digest.in_(bindparam("ds", expanding=True))
).order_by(*LEASE_ORDER).with_for_update()
_CLAIM_DROP = leases_t.delete().where(_lk.campaign == bindparam("c"),
                                      _lk.key_digest.in_(bindparam("ds", expanding=True)))
_CLAIM_ATTEMPTS = select(runs_t.c.key_digest, func.max(runs_t.c.attempt)).where(
    runs_t.c.campaign == bindparam("c"), runs_t.c.key_digest.in_(bindparam("ds", expanding=True))
).group_by(runs_t.c.key_digest)
_CLAIM_TAKE_OVER = update(leases_t).where(_lk.campaign == bindparam("c"), _lk.key_digest == bindparam("d")).values(
    attempt=bindparam("a"), holder=bindparam("h"), heartbeat_at=bindparam("now"), ttl_s=bindparam("ttl"),
    claimed_at=bindparam("now"))


@functools.cache
def _claim_insert(backend: str) -> Any:
    """The claim's insert of new leases that skips keys another worker just took (None: a
    backend without ON CONFLICT), built once per backend."""
    ins = dialect_insert(backend)
    return None if ins is None else ins(leases_t).on_conflict_do_nothing(
        index_elements=["campaign", "key_digest"]).returning(_lk.key_digest)


def pg_now() -> ColumnElement[Any]:
    """PostgreSQL's wall clock as epoch seconds (``clock_timestamp()``: now, not the
    transaction's start)."""
    return func.extract("epoch", func.clock_timestamp())


class LeaseStates:
    """`Store.lease_states`: the finished keys among those asked about, and the leases of
    the others: key digest -> (holder, seconds until the lease lapses)."""

    __slots__ = ("finished", "leases")

    def __init__(self) -> None:
        self.finished: set[str] = set()
        self.leases: dict[str, tuple[str, float]] = {}


class Leases(StoreBase):
    """A store's leases (a part of `Store`)."""

    def _clock(self, conn: Connection) -> float:
        """The store's clock: the database server's on PostgreSQL, so workers on several
        machines compare heartbeats on one clock; this machine's for a SQLite file."""
        if self._backend == "postgresql":
            return float(conn.execute(select(pg_now())).scalar_one())
        return time.time()

    def claim(self, campaign: str, digest: str, holder: str, ttl_s: float,
              dead_holders: Collection[str] = ()) -> int | None:
        """Claim run key `digest` of `campaign` for `holder`: `claim_many` of one key."""
        return self.claim_many(campaign, [digest], holder, ttl_s, dead_holders).get(digest)

    def claim_many(self, campaign: str, digests: Sequence[str], holder: str, ttl_s: float,
                   dead_holders: Collection[str] = ()) -> dict[str, int]:
        """Claim run keys `digests` of `campaign` for `holder`, in one transaction; the keys won,
        each with the attempt number to run. A key is not won when it is finished (a ``done``
        run is stored) or another holder's lease on it is live. An expired lease (no heartbeat
        for its TTL) is taken over, and so is one of `dead_holders` (workers known to be gone,
        e.g. a process of this machine that died).

        On SQLite the writer's ``BEGIN IMMEDIATE`` serialises it against every other writer; on
        PostgreSQL the existing lease rows are locked (``SELECT ... FOR UPDATE``) and new ones
        inserted with ``ON CONFLICT DO NOTHING``, so of two workers racing for a key exactly one
        wins. The attempt number is one past both the highest stored attempt and the lease's
        last one, so two attempts of a key never share a number. A campaign's worker claims a
        few keys at a time (one transaction for them all: the store's cost per run stays small)."""
        if not digests:
            return {}
        keys = list(dict.fromkeys(digests))
        return self.write(lambda conn: self._claim(conn, campaign, keys, holder, ttl_s, dead_holders))

    def _claim(self, conn: Connection, campaign: str, keys: list[str], holder: str, ttl_s: float,
               dead_holders: Collection[str]) -> dict[str, int]:
        now = self._clock(conn)
        at = {"c": campaign, "ds": keys}
        leases = {r.key_digest: r for r in conn.execute(_CLAIM_LEASES, at)}
        free = [d for d in keys if (lease := leases.get(d)) is None or lease.holder == holder
                or lease.holder in dead_holders or lease.heartbeat_at + lease.ttl_s <= now]
        if not free:
            return {}
        done = {d for (d,) in conn.execute(GRADED_KEYS, {"c": campaign, "ds": free})}
        free = [d for d in free if d not in done]
        stored = dict(conn.execute(_CLAIM_ATTEMPTS, {"c": campaign, "ds": free}).all()) if free else {}
        won: dict[str, int] = {}
        for d in free:
            lease = leases.get(d)
            won[d] = max(int(stored.get(d) or 0), lease.attempt if lease is not None else 0) + 1
        # The writes, in one pass over the keys in sorted order: the leases of finished keys
        # dropped (their holder died after saving), expired leases taken over, new ones
        # inserted. A claim that waits on another's write of a key has written only smaller
        # keys, so two claims that read the table at different moments (one sees a lease the
        # other does not) never wait on each other in a cycle.
        ops = sorted([(d, "drop") for d in done if d in leases]
                     + [(d, "take" if d in leases else "new") for d in free])
        inserted: set[str] = set()
        for op, group in itertools.groupby(ops, key=lambda o: o[1]):
            ds = [d for d, _ in group]
            if op == "drop":
                conn.execute(_CLAIM_DROP, {"c": campaign, "ds": ds})
            elif op == "take":
                conn.execute(_CLAIM_TAKE_OVER, [{"c": campaign, "d": d, "a": won[d], "h": holder, "now": now,
                                                 "ttl": ttl_s} for d in ds])
            else:
                inserted.update(self._insert_leases(conn, [
                    {"campaign": campaign, "key_digest": d, "attempt": won[d], "holder": holder,
                     "heartbeat_at": now, "ttl_s": ttl_s, "claimed_at": now} for d in ds]))
        # not inserted: another worker inserted that lease after our read (PostgreSQL); theirs stands
        for d in [d for d in won if d not in leases and d not in inserted]:
            del won[d]
        return won

    def _insert_leases(self, conn: Connection, rows: list[dict[str, Any]]) -> set[str]:
        """Insert new lease rows in their order; the key digests inserted (on PostgreSQL, one
        another worker inserted since this claim read the table is skipped: theirs stands)."""
        ins = _claim_insert(self._backend)
        if ins is None:
            conn.execute(leases_t.insert(), rows)
            return {r["key_digest"] for r in rows}
        return {r[0] for r in conn.execute(ins, rows)}

    def heartbeat(self, holder: str) -> int:
        """Renew every lease of `holder` in one statement; how many it still holds. On
        PostgreSQL its rows are locked first in the one lock order (`LEASE_ORDER`): another
        worker's claim locks some of them too, to see whether they expired."""
        now: ColumnElement[Any] = pg_now() if self._backend == "postgresql" else literal(time.time())
        stmt = update(leases_t).where(leases_t.c.holder == holder).values(heartbeat_at=now)

        def work(conn: Connection) -> int:
            if self._backend == "postgresql":
                conn.execute(_HOLDER_LOCK, {"h": holder})
            return int(conn.execute(stmt).rowcount)

        return self.write(work)

    def release(self, holder: str, campaign: str | None = None, digests: Sequence[str] | None = None) -> None:
        """Give back `holder`'s leases: those on `digests` of `campaign`, or all of them. The
        workers waiting on them are woken (`watch`)."""
        where = [leases_t.c.holder == holder]
        if campaign is not None:
            where.append(leases_t.c.campaign == campaign)
        if digests is not None:
            if not digests:
                return
            where.append(leases_t.c.key_digest.in_(sorted(set(digests))))
        lock = select(_lk.campaign).where(*where).order_by(*LEASE_ORDER).with_for_update()
        stmt = leases_t.delete().where(*where)

        def work(conn: Connection) -> None:
            if self._backend != "postgresql":
                conn.execute(stmt)
                return
            names = {name for (name,) in conn.execute(lock)}  # the one lock order, before the delete
            if names:
                conn.execute(stmt)
                self._notify(conn, names)

        self.write(work)

    def leases(self, campaign: str) -> dict[str, tuple[str, int]]:
        """The campaign's leases: key digest -> (holder, attempt)."""
        lk = leases_t.c
        with self.engine.connect() as conn:
            rows = conn.execute(select(lk.key_digest, lk.holder, lk.attempt).where(lk.campaign == campaign))
            return {d: (h, int(a)) for d, h, a in rows}

    def lease_states(self, campaign: str, digests: Collection[str], *,
                     retry_void: bool = False) -> LeaseStates:
        """Where run keys `digests` of `campaign` stand, read in one snapshot: the finished
        ones (as `finished_digests`) and the leases of the others, each with its holder and
        the seconds until it lapses (the store's clock: negative when it has). What a worker
        waiting on other workers' keys reads each time it wakes (`watch`)."""
        ds = sorted(set(digests))
        out = LeaseStates()
        lk = leases_t.c
        with self.engine.connect() as conn:
            now = self._clock(conn)
            for i in range(0, len(ds), 500):
                part = ds[i:i + 500]
                out.finished.update(d for (d,) in conn.execute(
                    select(runs_t.c.key_digest).distinct()
                    .where(runs_t.c.campaign == campaign, runs_t.c.key_digest.in_(part), finished(retry_void))))
                for d, holder, beat, ttl in conn.execute(
                        select(lk.key_digest, lk.holder, lk.heartbeat_at, lk.ttl_s)
                        .where(lk.campaign == campaign, lk.key_digest.in_(part))):
                    if d not in out.finished:
                        out.leases[d] = (holder, float(beat) + float(ttl) - now)
        return out

    def watch(self, campaign: str) -> Watch:
        """A `Watch` that wakes a worker waiting on `campaign`'s keys when another worker
        stores runs or releases leases (`assay.store.watch`); close it when done. Make it
        before reading the state it waits on (`lease_states`). A store that cannot be reached
        is InputError (exit 2), as for a write."""
        try:
            if self._backend == "postgresql":
                return PostgresWatch(self.engine, NOTIFY_CHANNEL, campaign)
            if self._backend == "sqlite" and not self._memory:
                return SqliteWatch(self.engine)
        except exc.OperationalError as e:
            raise InputError(None, "--store", f"cannot reach the store {self.redacted_url}: {db_reason(e)}; "
                             "every finished run is kept: run the same command again to resume") from None
        return Watch()
