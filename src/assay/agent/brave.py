"""Live search: a `web_search` tool backed by the Brave Search API, as DareBench upstream uses.

`GET {base}/res/v1/web/search?q=...&count=N` with the key in `X-Subscription-Token`; the
reply's `web.results[]` (title, url, description, extra_snippets) become the tool's text.
429s, 5xx and connection faults are retried (honouring `Retry-After`, bounded); a fault that
persists, or a refused key, raises ProviderError: the run ends `api_error` (void, re-run on
resume), so a search outage never passes for an agent that could not find the answer.
"""

from __future__ import annotations

import html
import re
import threading
import time
from typing import Any

import httpx

from assay.errors import InputError, ProviderError

BRAVE_URL = "https://api.search.brave.com"
"""Brave's own API; `ASSAY_BRAVE_URL` points assay at another (a fake one in tests)."""
WEB_SEARCH_PATH = "/res/v1/web/search"
MAX_COUNT = 20  # the API's own cap on `count`
MAX_REPLY_BYTES = 4 * 1024**2
RETRIES = 3
MAX_RETRY_DELAY_S = 20.0
_TAGS = re.compile(r"</?(?:strong|b|em|i)>")


class BraveSearch:
    """One client per campaign (thread-safe: tool calls run in worker threads)."""

    label = "brave"

    def __init__(self, api_key: str, base_url: str = BRAVE_URL, *, timeout_s: float = 20.0,
                 retries: int = RETRIES, retry_base_delay: float = 1.0) -> None:
        if not api_key.strip():
            raise InputError(None, "BRAVE_API_KEY", "--search brave needs a Brave Search API key in BRAVE_API_KEY")
        self.url = base_url.rstrip("/") + WEB_SEARCH_PATH
        self.retries = retries
        self.retry_base_delay = retry_base_delay
        self._client = httpx.Client(timeout=timeout_s, follow_redirects=False, headers={
            "Accept": "application/json", "X-Subscription-Token": api_key.strip()})
        self._lock = threading.Lock()
        self.requests = 0

    def search(self, query: str, k: int = 5) -> str:
        query = query.strip()
        if not query:
            return "error: the query is empty"
        data = self._get({"q": query[:400], "count": max(1, min(k, MAX_COUNT))})
        return format_results(query, data, k)

    def _get(self, params: dict[str, Any]) -> dict[str, Any]:
        attempt = 0
        while True:
            with self._lock:
                self.requests += 1
            reason, retry_after = self._once(params)
            if isinstance(reason, dict):
                return reason
            if retry_after is None or attempt >= self.retries:
                raise ProviderError(f"brave search: {reason}" + (f" (gave up after {attempt + 1} attempts)"
                                                                 if attempt else ""))
            time.sleep(min(MAX_RETRY_DELAY_S, max(retry_after, self.retry_base_delay * 2**attempt)))
            attempt += 1

    def _once(self, params: dict[str, Any]) -> tuple[dict[str, Any] | str, float | None]:
        """The parsed reply, or (reason, seconds to wait before a retry or None if not retriable)."""
        try:
            with self._client.stream("GET", self.url, params=params) as r:
                body = b""
                for chunk in r.iter_bytes():
                    body += chunk
                    if len(body) > MAX_REPLY_BYTES:
                        return f"reply larger than {MAX_REPLY_BYTES} bytes", None
        except httpx.TimeoutException:
            return "request timed out", 0.0
        except httpx.HTTPError as e:
            return f"connection error: {e}", 0.0
        if r.status_code == 429 or r.status_code >= 500:
            return f"HTTP {r.status_code}: {_detail(body)}", _retry_after(r.headers.get("retry-after"))
        if r.status_code != 200:
            hint = " (check BRAVE_API_KEY)" if r.status_code in (401, 403) else ""
            return f"HTTP {r.status_code}: {_detail(body)}{hint}", None
        try:
            data = httpx.Response(200, content=body).json()
        except ValueError:
            return "malformed reply (not JSON)", 0.0
        if not isinstance(data, dict):
            return "malformed reply (not a JSON object)", 0.0
        return data, None

    def close(self) -> None:
        self._client.close()


def _retry_after(raw: str | None) -> float:
    try:
        return max(0.0, float(raw)) if raw else 0.0
    except ValueError:
        return 0.0


def _detail(body: bytes) -> str:
    """The error text of a Brave error reply (`{"error": {"detail": ...}}`), else the body's start."""
    try:
        data = httpx.Response(200, content=body).json()
        err = data.get("error") if isinstance(data, dict) else None
        if isinstance(err, dict) and err.get("detail"):
            return str(err["detail"])[:300]
    except ValueError:
        pass
    return body[:300].decode("utf-8", "replace").strip() or "(empty reply)"


def _clean(text: Any) -> str:
    return html.unescape(_TAGS.sub("", str(text or ""))).strip()


def format_results(query: str, data: dict[str, Any], k: int) -> str:
    """The tool's text: numbered results with title, URL and snippets (as the corpus search gives)."""
    web = data.get("web")
    results = web.get("results") if isinstance(web, dict) else None
    if not isinstance(results, list) or not results:
        return f"no results for {query!r}"
    parts = []
    for rank, r in enumerate([x for x in results if isinstance(x, dict)][:k], start=1):
        snippets = [_clean(r.get("description"))]
        extra = r.get("extra_snippets")
        if isinstance(extra, list):
            snippets += [_clean(s) for s in extra[:3]]
        age = f" ({_clean(r.get('age'))})" if r.get("age") else ""
        body = " ".join(s for s in snippets if s)
        parts.append(f"{rank}. {_clean(r.get('title')) or '(untitled)'} ({_clean(r.get('url'))}){age}\n{body[:1500]}")
    return "\n\n".join(parts) if parts else f"no results for {query!r}"
