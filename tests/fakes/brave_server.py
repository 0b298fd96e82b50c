"""Fake Brave Search API on 127.0.0.1: `GET /res/v1/web/search` in Brave's real response shape.

Checks the `X-Subscription-Token` header (401 with Brave's `ErrorResponse` body otherwise),
requires `q` (422 otherwise), serves `pages` whose text contains a query word, and can be
scripted to fail first (`faults`: status codes, 429s carry `Retry-After` and Brave's
`X-RateLimit-*` headers).
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

SEARCH_PATH = "/res/v1/web/search"


@dataclass
class Page:
    title: str
    url: str
    description: str
    extra_snippets: tuple[str, ...] = ()
    age: str | None = None


@dataclass
class Seen:
    path: str
    params: dict[str, str]
    headers: dict[str, str]


def _error(status: int, code: str, detail: str) -> dict[str, Any]:
    return {"type": "ErrorResponse", "error": {"id": "6c0f2d4e-0000-4000-8000-000000000000", "status": status,
                                               "code": code, "detail": detail, "meta": {}}, "time": 1733011200}


class FakeBraveServer:
    def __init__(self, key: str = "brave-test-key", pages: list[Page] | None = None) -> None:
        self.key = key
        self.pages = list(pages or [])
        self.faults: deque[int] = deque()
        self.retry_after = "0"
        self.raw_body: bytes | None = None  # served instead of a result, once set
        self.requests: list[Seen] = []
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> FakeBraveServer:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
                pass

            def do_GET(self) -> None:  # noqa: N802 - stdlib name
                fake._serve(self)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._httpd is not None
        self._httpd.shutdown()
        self._httpd.server_close()

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(h.path)
        params = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        with self._lock:
            self.requests.append(Seen(parts.path, params, {k.lower(): v for k, v in h.headers.items()}))
            fault = self.faults.popleft() if self.faults else None
        if parts.path != SEARCH_PATH:
            return self._send(h, 404, _error(404, "NOT_FOUND", f"no route {parts.path}"))
        if h.headers.get("X-Subscription-Token") != self.key:
            return self._send(h, 401, _error(401, "SUBSCRIPTION_TOKEN_INVALID",
                                             "The provided subscription token is invalid."))
        if fault is not None:
            headers = {"Retry-After": self.retry_after, "X-RateLimit-Limit": "1, 15000",
                       "X-RateLimit-Remaining": "0, 14000", "X-RateLimit-Reset": "1, 1000000"} if fault == 429 else {}
            code = "RATE_LIMITED" if fault == 429 else "INTERNAL"
            return self._send(h, fault, _error(fault, code, "Request rate limit exceeded for plan."
                                               if fault == 429 else "Internal error."), headers)
        q = params.get("q", "").strip()
        if not q:
            return self._send(h, 422, _error(422, "VALIDATION", "Unable to validate request parameter(s)."))
        if self.raw_body is not None:
            return self._send_bytes(h, 200, self.raw_body)
        count = int(params.get("count", "20"))
        words = {w.lower() for w in q.split()}
        hits = [p for p in self.pages if any(w in (p.title + " " + p.description).lower() for w in words)][:count]
        return self._send(h, 200, {
            "query": {"original": q, "show_strict_warning": False, "is_navigational": False, "spellcheck_off": True,
                      "country": "us", "bad_results": False, "should_fallback": False, "more_results_available": False},
            "mixed": {"type": "mixed", "main": [{"type": "web", "index": i, "all": False} for i in range(len(hits))],
                      "top": [], "side": []},
            "type": "search",
            "web": {"type": "search", "family_friendly": True, "results": [self._result(p) for p in hits]},
        })

    @staticmethod
    def _result(p: Page) -> dict[str, Any]:
        host = urlsplit(p.url).hostname or ""
        out: dict[str, Any] = {
            "title": p.title, "url": p.url, "is_source_local": False, "is_source_both": False,
            "description": p.description, "profile": {"name": host, "url": p.url, "long_name": host, "img": ""},
            "language": "en", "family_friendly": True, "type": "search_result", "subtype": "generic", "is_live": False,
            "meta_url": {"scheme": "https", "netloc": host, "hostname": host, "favicon": "", "path": ""},
        }
        if p.age:
            out["age"] = p.age
        if p.extra_snippets:
            out["extra_snippets"] = list(p.extra_snippets)
        return out

    def _send(self, h: BaseHTTPRequestHandler, status: int, body: dict[str, Any],
              headers: dict[str, str] | None = None) -> None:
        self._send_bytes(h, status, json.dumps(body).encode(), headers)

    @staticmethod
    def _send_bytes(h: BaseHTTPRequestHandler, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)
