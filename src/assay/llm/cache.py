"""The opt-in response cache (`assay run --response-cache`): a model's reply kept under the
hash of the full request, so a re-run of an unchanged campaign (or of its void runs, or the
same work under another campaign name) makes no model call for a request already answered.

The key is the SHA-256 of the provider, the model, the endpoint, every field of the request
(messages, tools, limits, temperature, modes), the run's identity without its campaign (task
hash, agent, level, epoch, options: `RunKey.cache_salt`) and how many identical requests the
run made before. Epochs therefore stay independent samples, and a run asking the same thing
twice gets two answers, as it would from the provider. Entries live in the store's cache
table beside the judge's, under their own key space. Cached replies keep the usage they were
made with, so a run's tokens and cost read the same whichever way its replies came.

A cache is active for the agent's part of one run only (`activate`, a context variable set
by the runner), never for judges, which have their own cache, or for other runs.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["CacheBackend", "ResponseCache", "activate", "current"]

KEY_SPACE = "assay.response-cache/1"


class CacheBackend(Protocol):
    """Where entries live (the store: `Store.cache_get` / `Store.cache_put`)."""

    def cache_get(self, key: str) -> str | None: ...

    def cache_put(self, key: str, value: str) -> None: ...


@dataclass
class ResponseCache:
    """One run's view of the cache: the backend, the run's salt, the requests counted so far."""

    backend: CacheBackend
    salt: str
    hits: int = 0
    misses: int = 0
    _seen: dict[str, int] = field(default_factory=dict)

    def key(self, endpoint: str, request: dict[str, Any]) -> str:
        """The entry's key for the next request equal to `request` in this run."""
        body = json.dumps([KEY_SPACE, endpoint, self.salt, request], sort_keys=True, ensure_ascii=False,
                          separators=(",", ":"), default=str)
        base = hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()
        n = self._seen.get(base, 0)
        self._seen[base] = n + 1
        return hashlib.sha256(f"{base}#{n}".encode()).hexdigest()

    def get(self, key: str) -> str | None:
        value = self.backend.cache_get(key)
        if value is None:
            self.misses += 1
        else:
            self.hits += 1
        return value

    def put(self, key: str, value: str) -> None:
        self.backend.cache_put(key, value)


_CURRENT: contextvars.ContextVar[ResponseCache | None] = contextvars.ContextVar("assay_response_cache", default=None)


def current() -> ResponseCache | None:
    """The cache of the run whose agent is calling, if the campaign asked for one."""
    return _CURRENT.get()


@contextlib.contextmanager
def activate(cache: ResponseCache | None) -> Iterator[ResponseCache | None]:
    """Make `cache` the current one for the code inside (and the tasks it starts)."""
    token = _CURRENT.set(cache)
    try:
        yield cache
    finally:
        _CURRENT.reset(token)
