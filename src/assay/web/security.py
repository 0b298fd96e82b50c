"""Who may use the web app, and the request checks every request passes first.

`Guard` is one ASGI middleware in front of every route. In order, for each HTTP request:

1. **Host**: the `Host` header must name this server: a loopback name (`127.0.0.1`,
   `localhost`, `[::1]`, any port), the address it listens on when that is a specific one,
   or an `--allowed-host`. Anything else is 400 (DNS rebinding: a foreign name resolving to
   this machine reaches the server with that name in `Host`).
2. **Body cap**: a body over `MAX_BODY_BYTES` (1 MiB) is 413, by its `Content-Length` before
   a byte is read, or while it streams in.
3. **Who**: `Authorization: Bearer TOKEN` (an account's token or the shared `--token`), else
   the sign-in session cookie. When sign-in is on (a shared token, any account in the store,
   or a non-loopback listen address) an unknown caller gets 401 JSON on `/api/...` and a
   redirect to `/signin` on pages; only `/signin` and `/static/...` are open.
4. **State-changing requests** (anything but GET/HEAD/OPTIONS), unless bearer-authenticated
   (a browser never attaches that header by itself): a same-origin `Origin` (or `Referer`
   when there is no `Origin`); with a session cookie both must be present and the session's
   CSRF token must come along too, as the `X-CSRF-Token` header or the `csrf_token` form
   field. Without sign-in (a local single user) a request carrying neither header is a
   non-browser client and passes; a cross-origin one is 403.
5. **JSON endpoints** (`/api/...`) take state-changing requests only as `application/json`
   (415 otherwise): a page elsewhere can post `text/plain` without a CORS preflight, never
   `application/json`.

Wrong tokens are rate-limited per client address (`SignInThrottle`): after `GUESSES` wrong
ones (through `/signin` or `Authorization: Bearer`), one more guess every `GUESS_EVERY_S`
seconds; beyond that the answer is 429 with `Retry-After`, the token not even compared. Every
answer carries `SECURITY_HEADERS`: no framing by another site (`X-Frame-Options: DENY`, CSP
`frame-ancestors 'none'`), `nosniff`, and no URL sent on in `Referer` to other sites.

Sign-ins last 12 hours and are kept in the store as the SHA-256 of the cookie value
(`assay.store.play`), so a server restart signs nobody out; the cookie value itself is
never stored. `/healthz` is open without sign-in (it tells only whether the server is up).
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response

from assay.errors import InputError
from assay.store import Store
from assay.store.accounts import find_by_token, get_account, has_accounts
from assay.store.play import StoredSignin, delete_signin, load_signin, save_signin

__all__ = ["COOKIE", "GUESSES", "GUESS_EVERY_S", "LOOPBACK_NAMES", "MAX_BODY_BYTES", "MIN_SHARED_TOKEN", "SECURITY_HEADERS", "SESSION_HOURS",
           "SHARED_TOKEN_NAME", "Guard", "Identity", "SignInThrottle", "TooManyGuesses", "WebAuth", "check_allowed_host",
           "client_address", "is_loopback_host", "too_many_guesses"]

MAX_BODY_BYTES = 1024 * 1024
SESSION_HOURS = 12
COOKIE = "assay_session"
#: the one identity of the shared `--token` / `ASSAY_TOKEN`: its plays are `human:admin`
SHARED_TOKEN_NAME = "admin"
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
OPEN_PATHS = ("/signin", "/healthz")
#: pages under /api/ (HTML for a person, so a caller without sign-in is sent to sign in)
API_PAGES = ("/api/docs",)
MIN_SHARED_TOKEN = 16
"""A shared `--token` (or ASSAY_TOKEN) shorter than this is refused (SPEC: exit 2)."""
GUESSES = 10
"""Wrong tokens a client address may send at once before it is slowed down."""
GUESS_EVERY_S = 6.0
"""After that, one more wrong token per this many seconds (10 a minute)."""
MAX_TRACKED = 4096
"""Client addresses whose guesses are remembered; the oldest forgotten first."""
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", b"frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
)
"""Added to every response that does not set them itself."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def is_loopback_host(host: str) -> bool:
    """A listen address or name that only this machine reaches (127.x, ::1, localhost)."""
    h = host.strip().strip("[]").lower()
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def check_allowed_host(name: str) -> str:
    """An `--allowed-host` value as the bare lower-case name the Host check compares."""
    h = name.strip().lower()
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    if not h or any(c in h for c in "/ \t@?#") or (":" in h and not _is_ip(h)):
        raise InputError(None, "--allowed-host", f"{name!r} is not a host name (give a name such as "
                                                 "assay.example.org or an address, without scheme or port)")
    return h


def _is_ip(h: str) -> bool:
    try:
        ipaddress.ip_address(h)
    except ValueError:
        return False
    return True


def _host_name(header: str | None) -> str | None:
    """The name part of a `Host` header (no port, no brackets), lower case; None if malformed."""
    if not header:
        return None
    h = header.strip().lower()
    if h.startswith("["):
        end = h.find("]")
        if end < 0 or (h[end + 1:] and not h[end + 1:].startswith(":")):
            return None
        return h[1:end]
    name, _, port = h.partition(":")
    if port and not port.isdigit():
        return None
    return name or None


@dataclass(frozen=True)
class Identity:
    """Who a request comes from: an account, or the shared token (`SHARED_TOKEN_NAME`, admin)."""

    name: str
    role: str

    @property
    def admin(self) -> bool:
        return self.role == "admin"


@dataclass
class _Session:
    identity: Identity
    csrf: str
    account: bool  # an account (re-checked on each request), not the shared token
    expires: float


@dataclass
class SignInThrottle:
    """Wrong tokens per client address, as a leaky bucket: `GUESSES` at once, then one per
    `GUESS_EVERY_S`. Only wrong tokens count, so a person who signs in is never slowed."""

    buckets: dict[str, tuple[float, float]] = field(default_factory=dict)  # address -> (guesses used, at)

    def _used(self, address: str, now: float) -> float:
        used, at = self.buckets.get(address, (0.0, now))
        return max(0.0, used - (now - at) / GUESS_EVERY_S)

    def wait(self, address: str) -> float:
        """Seconds before this address may try another token (0: now)."""
        used = self._used(address, time.monotonic())
        return 0.0 if used <= GUESSES - 1 else (used - (GUESSES - 1)) * GUESS_EVERY_S

    def failed(self, address: str) -> None:
        now = time.monotonic()
        used = self._used(address, now) + 1
        self.buckets.pop(address, None)  # put back last: the dict's order is the age of each last guess
        self.buckets[address] = (used, now)
        while len(self.buckets) > MAX_TRACKED:
            self.buckets.pop(next(iter(self.buckets)))


class TooManyGuesses(Exception):
    """This address sent too many wrong tokens: it may try again in `wait_s` seconds."""

    def __init__(self, wait_s: float) -> None:
        super().__init__(f"too many wrong tokens from this address; try again in {wait_s:.0f} s")
        self.wait_s = wait_s


def too_many_guesses(api: bool, wait_s: float) -> Response:
    """429 for an address that sent too many wrong tokens."""
    resp = _refuse(api, 429, str(TooManyGuesses(wait_s)))
    resp.headers["retry-after"] = str(max(1, round(wait_s)))
    return resp


@dataclass
class WebAuth:
    """The sign-in rules of one server: see the module docstring."""

    store: Store
    token: str | None = None
    #: sign-in required even with no account and no token (a non-loopback listen address)
    always: bool = False
    allowed_hosts: frozenset[str] = LOOPBACK_NAMES
    sessions: dict[str, _Session] = field(default_factory=dict)
    guesses: SignInThrottle = field(default_factory=SignInThrottle)

    def required(self) -> bool:
        return self.token is not None or self.always or has_accounts(self.store)

    def by_token(self, token: str) -> tuple[Identity, bool] | None:
        """(identity, is an account) of a secret token, or None."""
        if self.token is not None and hmac.compare_digest(token.encode(), self.token.encode()):
            return Identity(SHARED_TOKEN_NAME, "admin"), False
        acc = find_by_token(self.store, token)
        return None if acc is None else (Identity(acc.name, acc.role), True)

    def guess(self, address: str, token: str) -> tuple[Identity, bool] | None:
        """`by_token` counted against the caller's address: TooManyGuesses while it is slowed
        down (the token is then not even compared); a wrong or empty token counts."""
        wait_s = self.guesses.wait(address)
        if wait_s > 0:
            raise TooManyGuesses(wait_s)
        who = self.by_token(token) if token else None
        if who is None:
            self.guesses.failed(address)
        return who

    def sign_in(self, token: str, address: str) -> tuple[str, _Session] | None:
        """A new session for a valid token: (cookie value, session); TooManyGuesses as `guess`."""
        who = self.guess(address, token.strip())
        if who is None:
            return None
        self._expire()
        sid = secrets.token_urlsafe(32)
        session = _Session(identity=who[0], csrf=secrets.token_urlsafe(32), account=who[1],
                           expires=time.time() + SESSION_HOURS * 3600)
        self.sessions[sid] = session
        save_signin(self.store, sid, StoredSignin(name=who[0].name, role=who[0].role, csrf=session.csrf,
                                                  account=who[1], expires=session.expires))
        return sid, session

    def sign_out(self, sid: str | None) -> None:
        if sid:
            self.sessions.pop(sid, None)
            delete_signin(self.store, sid)

    def session(self, sid: str | None) -> _Session | None:
        s = self.sessions.get(sid or "")
        if s is None and sid:
            s = self._stored(sid)
        if s is None:
            return None
        if s.expires < time.time():
            self.sessions.pop(sid or "", None)
            return None
        if s.account:  # a removed account signs out at once; a changed role applies at once
            acc = get_account(self.store, s.identity.name)
            if acc is None:
                self.sessions.pop(sid or "", None)
                return None
            if acc.role != s.identity.role:
                s.identity = Identity(acc.name, acc.role)
        return s

    def _stored(self, sid: str) -> _Session | None:
        """A sign-in of an earlier server process (the store has its cookie's hash)."""
        if len(sid) > 128:
            return None
        kept = load_signin(self.store, sid)
        if kept is None:
            return None
        if not kept.account and self.token is None:  # the shared token it came from is gone
            return None
        s = _Session(identity=Identity(kept.name, kept.role), csrf=kept.csrf, account=kept.account,
                     expires=kept.expires)
        self.sessions[sid] = s
        return s

    def _expire(self) -> None:
        now = time.time()
        for sid in [k for k, s in self.sessions.items() if s.expires < now]:
            del self.sessions[sid]


def request_scheme(headers: Headers, scope: Scope) -> str:
    fwd = headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    return fwd if fwd in ("http", "https") else str(scope.get("scheme") or "http")


def _origin_of(url: str) -> str | None:
    try:
        u = urlsplit(url)
    except ValueError:
        return None
    if not u.scheme or not u.netloc:
        return None
    return f"{u.scheme.lower()}://{u.netloc.lower()}"


class Guard:
    """The ASGI middleware applying `WebAuth` and the request checks (module docstring)."""

    def __init__(self, app: ASGIApp, auth: WebAuth) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = _with_security_headers(send)
        refusal, receive = await self._check(scope, receive)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, _capped(receive), send)

    async def _check(self, scope: Scope, receive: Receive) -> tuple[Response | None, Receive]:  # noqa: C901 (the rules, in order)
        headers = Headers(scope=scope)
        path: str = scope["path"]
        method: str = scope["method"].upper()
        api = path.startswith("/api/") and path not in API_PAGES
        host = _host_name(headers.get("host"))
        if host is None or host not in self.auth.allowed_hosts:
            return PlainTextResponse(f"400: the Host {headers.get('host')!r} is not a name of this server "
                                     "(assay serve --allowed-host NAME adds one)", status_code=400), receive
        length = headers.get("content-length")
        if length is not None:
            if not length.isdigit():
                return _refuse(api, 400, "a bad Content-Length"), receive
            if int(length) > MAX_BODY_BYTES:
                return _refuse(api, 413, f"the request body is over {MAX_BODY_BYTES:,} bytes"), receive
        # who
        identity: Identity | None = None
        via: str | None = None
        session: _Session | None = None
        auth_header = headers.get("authorization")
        if auth_header is not None:
            kind, _, value = auth_header.partition(" ")
            try:
                who = self.auth.guess(client_address(scope), value.strip() if kind.lower() == "bearer" else "")
            except TooManyGuesses as e:
                return too_many_guesses(True, e.wait_s), receive
            if who is None:
                return _refuse(True, 401, "the bearer token is not valid"), receive
            identity, via = who[0], "bearer"
        else:
            session = self.auth.session(_cookie(headers, COOKIE))
            if session is not None:
                identity, via = session.identity, "cookie"
        state = scope.setdefault("state", {})
        state["identity"] = identity
        state["csrf"] = session.csrf if session is not None else ""
        state["cookie_session"] = _cookie(headers, COOKIE) if session is not None else None
        state["auth_required"] = required = self.auth.required()
        state["secure"] = request_scheme(headers, scope) == "https"
        if required and identity is None and not path.startswith("/static/") and path not in OPEN_PATHS:
            if api or method not in ("GET", "HEAD"):
                return _refuse(True, 401, "sign in: send Authorization: Bearer TOKEN (assay users add NAME "
                                          "prints one)"), receive
            target = path + ("?" + scope["query_string"].decode("latin-1") if scope.get("query_string") else "")
            return RedirectResponse("/signin?next=" + quote(target, safe=""), status_code=303), receive
        if method in SAFE_METHODS or via == "bearer":
            if method not in SAFE_METHODS and api and not _is_json(headers):
                return _refuse(True, 415, "send the body as Content-Type: application/json"), receive
            return None, receive
        # a state-changing request from a browser, or from a client without credentials
        own = f"{request_scheme(headers, scope)}://{(headers.get('host') or '').strip().lower()}"
        origin = headers.get("origin")
        source = origin if origin is not None else headers.get("referer")
        source_origin = None if source is None else _origin_of(source)
        if source is not None and source_origin != own:
            return _refuse(api, 403, f"a cross-origin request ({'Origin' if origin is not None else 'Referer'} "
                                     f"{source!r} is not {own})"), receive
        if via == "cookie" and source is None:
            return _refuse(api, 403, "a signed-in browser request must carry its Origin (or Referer)"), receive
        if api and not _is_json(headers):
            return _refuse(True, 415, "send the body as Content-Type: application/json"), receive
        if via == "cookie" and session is not None:
            sent = headers.get("x-csrf-token")
            if sent is None and _is_form(headers):
                body = await _read_body(receive)
                if body is None:
                    return _refuse(api, 413, f"the request body is over {MAX_BODY_BYTES:,} bytes"), receive
                fields = parse_qs(body.decode("utf-8", "replace")).get("csrf_token") or []
                sent = fields[-1] if fields else None
                receive = _replay(body, receive)
            if not sent or not hmac.compare_digest(sent.encode(), session.csrf.encode()):
                return _refuse(api, 403, "the CSRF token is missing or wrong (reload the page)"), receive
        return None, receive


def client_address(scope: Scope) -> str:
    """The peer's address (what guesses are counted by); "" when the server does not know it."""
    client = scope.get("client")
    return str(client[0]) if client else ""


def _with_security_headers(send: Send) -> Send:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", []))
            present = {bytes(k).lower() for k, _ in headers}
            headers += [(k, v) for k, v in SECURITY_HEADERS if k not in present]
            message = {**message, "headers": headers}
        await send(message)

    return sending


def _refuse(api: bool, status: int, why: str) -> Response:
    if api:
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        return JSONResponse({"detail": why}, status_code=status, headers=headers)
    return PlainTextResponse(f"{status}: {why}", status_code=status)


def _cookie(headers: Headers, name: str) -> str | None:
    for part in headers.get("cookie", "").split(";"):
        k, _, v = part.strip().partition("=")
        if k == name and v:
            return v
    return None


def _is_json(headers: Headers) -> bool:
    return headers.get("content-type", "").split(";")[0].strip().lower() == "application/json"


def _is_form(headers: Headers) -> bool:
    return headers.get("content-type", "").split(";")[0].strip().lower() == "application/x-www-form-urlencoded"


async def _read_body(receive: Receive) -> bytes | None:
    """The whole body (None when over the cap); ClientDisconnect when the client goes (or is
    cut off by the body timeout) before it is all here, so half a form is never acted on."""
    chunks: list[bytes] = []
    size = 0
    while True:
        msg = await receive()
        if msg["type"] != "http.request":
            raise ClientDisconnect()
        chunk = msg.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
        if not msg.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, then: Receive) -> Receive:
    """The body already read, once; afterwards the connection's own messages (a disconnect)."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return await then()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


def _capped(receive: Receive) -> Receive:
    """`receive` that ends the request with 413 once the body passes the cap (chunked bodies)."""
    size = 0

    async def capped() -> Message:
        nonlocal size
        msg = await receive()
        if msg["type"] == "http.request":
            size += len(msg.get("body", b""))
            if size > MAX_BODY_BYTES:
                raise HTTPException(413, f"the request body is over {MAX_BODY_BYTES:,} bytes")
        return msg

    return capped
