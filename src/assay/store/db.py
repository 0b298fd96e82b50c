"""The run store: every run attempt, its transcript events, its grade, and the judge cache.

One `Store` wraps one SQLAlchemy engine (SQLite by default, PostgreSQL through
``postgresql+psycopg://``). It is composed of one part per job, each in its module:
opening and migrations (`assay.store.opening`), write transactions (`assay.store.transactions`),
saves (`assay.store.saves`: a run, its events and its grade in one transaction, so a crash
leaves the whole run or nothing; resume relies on that), leases and claims
(`assay.store.leases`: how several workers share one campaign), the judge cache
(`assay.store.cache`) and reads (`assay.store.reads`). Which attempts finish a key is
`assay.store.finished`'s; the current attempt of every key, kept at write time, is
`assay.store.current`'s.
"""

from __future__ import annotations

from assay.config import store_url
from assay.store.cache import JudgeCache
from assay.store.leases import Leases
from assay.store.opening import Opening
from assay.store.reads import Reads
from assay.store.saves import Saves

__all__ = ["Store", "open_store"]


class Store(Opening, Saves, Leases, JudgeCache, Reads):
    """A run store at a SQLAlchemy URL; see the module docstring."""

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.redacted_url!r})"


def open_store(url: str | None = None, *, create: bool = True) -> Store:
    """Open (creating and migrating if needed) the store at ``url`` or the default one; a
    SQLite file's missing folder is made unless `create` is false."""
    return Store(url or store_url(), create=create)
