"""The web app (`assay serve`): leaderboard, run viewer, JSON API, and human play.

Pages are server-rendered Jinja2 with autoescaping on (every string from a task, a model
or a person is escaped); the play page adds a little plain JavaScript that posts actions
and polls for results. The JSON API returns exactly what the command line prints:
`/api/report` is `assay report --json`, `/api/runs/{id}` is `assay show --json`.

Every request passes `assay.web.security.Guard` first (Host allow-list, body cap, sign-in,
CSRF and same-origin checks, JSON content type); routes read the caller from
`request.state.identity` (None without sign-in).
"""

from __future__ import annotations

import datetime
import json
import math
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import parse_qs, quote

import jinja2
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles

from assay.defaults import DEFAULTS
from assay.errors import InputError
from assay.record import KINDS, RunRecord, escape_page_text
from assay.report.build import run_row, stored_report
from assay.report.html import kind_sections
from assay.report.model import summary_model
from assay.store import Store
from assay.store.accounts import has_accounts
from assay.store.labels import MAX_NOTE_CHARS, ItemLabel, labels_of_run, save_labels, stored_labels
from assay.store.transcript import event_window, stored_event
from assay.task.discover import discover
from assay.task.model import Task
from assay.web.human import CAMPAIGN_RE, PlayError, PlayManager, playable
from assay.web.ops import HEALTH_PATH, RequestLog, health
from assay.web.play_session import PlaySession
from assay.web.runfilter import RunFilter
from assay.web.security import (
    COOKIE,
    LOOPBACK_NAMES,
    MAX_BODY_BYTES,
    MIN_SHARED_TOKEN,
    SESSION_HOURS,
    Guard,
    Identity,
    TooManyGuesses,
    WebAuth,
    check_allowed_host,
    client_address,
    is_loopback_host,
)
from assay.web.workbench import act, workbench_routes

HERE = Path(__file__).resolve().parent
SIBLINGS_SHOWN = 20  # other runs of the same task a run page offers to open side by side
# A run page shows a window of the transcript, read from the store as far as it shows it: at
# most TRANSCRIPT_EVENTS events and TRANSCRIPT_BYTES bytes of stored events, of each event its
# first EVENT_BYTES (a tool's whole output, TOOL_OUTPUT_LIMIT characters, mostly fits); a link
# leads to the next window, and one to each clipped event whole (as JSON).
TRANSCRIPT_EVENTS = 200
TRANSCRIPT_BYTES = 400_000
EVENT_BYTES = 32_000
CLIP_MARK = " [… clipped]"
MAX_SEQ = 2**31 - 1  # the largest sequence number a page or the API is asked for (the column's range)
SCENARIO_FIELDS = ("kpi", "kpi_baseline", "kpi_reference", "uplift", "uplift_adj", "incidents", "contact_cost",
                   "questions_asked", "asked_by_person", "off_limits_contacts", "key_fact_coverage", "solved")


def _num(x: Any, digits: int = 3) -> str:
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        if math.isnan(x):
            return "NaN"
        return f"{x:.{digits}f}"
    return str(x)


def _pct(x: Any) -> str:
    return "–" if x is None else f"{100 * float(x):.1f}%"


def _money(value: dict[str, float] | None) -> str:
    if not value:
        return "–"
    return ", ".join(f"{amount:,.0f} {cur}" for cur, amount in sorted(value.items()))


def _usd(x: float | None) -> str:
    return "unknown" if x is None else f"${x:,.4f}"


def _ci(ci: list[float] | None) -> str:
    return "–" if not ci else f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def _utc(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _tojson(x: Any) -> str:
    return json.dumps(x, ensure_ascii=False, indent=1, default=str)


def _compact(x: Any) -> str:
    return json.dumps(x, ensure_ascii=False, default=str)


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(HERE / "templates")), autoescape=True,
                             undefined=jinja2.ChainableUndefined, trim_blocks=True, lstrip_blocks=True,
                             finalize=escape_page_text)
    env.filters.update(num=_num, pct=_pct, money=_money, usd=_usd, ci=_ci, pretty=_tojson, compact=_compact, urlq=quote, utc=_utc)
    return env


def _run_json(store: Store, rec: RunRecord) -> Iterator[bytes]:
    """`assay show --json` of a run, as `/api/runs/{id}` sends it: the run's row, then its events
    read from the store a page at a time and sent one by one, so a long transcript is never
    held whole and other requests are served between its pieces."""
    def dump(obj: Any) -> bytes:
        return json.dumps(obj, ensure_ascii=False, default=str).encode()

    yield b'{"run": ' + dump(run_row(rec)) + b', "events": ['
    for i, e in enumerate(store.iter_events(rec.run_id)):
        yield (b", " if i else b"") + dump(e.wire())
    yield b"]}"


def _json_safe(obj: Any) -> Any:
    """The same JSON the command line writes (`default=str`), as plain data."""
    return json.loads(json.dumps(obj, ensure_ascii=False, default=str))


def create_app(store_url: str, suites: list[Path] | None = None, *, token: str | None = None,  # noqa: C901 (the app's routes, one small closure each over the same store)
               allowed_hosts: list[str] | None = None, listen_host: str = "127.0.0.1", allow_remote: bool = False,
               play_campaign: str = DEFAULTS.campaign, request_log: TextIO | None = None,
               create_store: bool = False) -> FastAPI:
    """The app over one store; `suites` are the task folders offered for human play;
    `create_store` makes a SQLite store's missing folder (`Store(create=)`); people's plays go
    into `play_campaign` unless they name another (by default `assay run`'s campaign, so they
    are ranked beside the models).

    `token` is a shared secret (one identity, `SHARED_TOKEN_NAME`); accounts come from the
    store (`assay users`). Listening on a non-loopback `listen_host` needs `allow_remote` (the
    operator says so in as many words: `--allow-remote`) and one or the other.
    Bad suites, URLs or host names are refused here (`assay.errors.InputError`), before the
    server starts. `request_log` gets one line per request (`assay.web.ops.RequestLog`).
    """
    if not (store_url.startswith("sqlite:") or store_url.startswith("postgresql")):
        raise InputError(None, "--store", f"unsupported store URL {store_url!r} "
                                          "(sqlite:///PATH or postgresql+psycopg://...)")
    if token is not None and not token.strip():
        raise InputError(None, "--token", "the token is empty")
    hosts = set(LOOPBACK_NAMES) | {check_allowed_host(h) for h in allowed_hosts or []}
    local = is_loopback_host(listen_host)
    if not local and not allow_remote:
        raise InputError(None, "--host", f"{listen_host} is reachable from other machines: pass --allow-remote to "
                                         "serve them (with accounts or --token), or listen on 127.0.0.1")
    if token is not None and len(token) < MIN_SHARED_TOKEN:
        raise InputError(None, "--token", f"shorter than {MIN_SHARED_TOKEN} characters: it could be guessed; make one "
                                          "with python3 -c 'import secrets; print(secrets.token_urlsafe(24))'")
    if listen_host.strip("[]") not in ("0.0.0.0", "::", ""):  # a specific address is a name of this server
        hosts.add(check_allowed_host(listen_host))
    if not CAMPAIGN_RE.match(play_campaign):
        raise InputError(None, "--campaign", f"{play_campaign!r}: use letters, digits, '.', '_' or '-', starting with "
                                             "a letter or digit")
    tasks: list[Task] = discover(list(suites)) if suites else []
    if not local and token is None and _no_store_yet(store_url):  # no accounts, and nothing written
        raise InputError(None, "--host", f"{listen_host} is reachable from other machines, and this server has no "
                                         "sign-in: add accounts (assay users add NAME) or pass --token TOKEN "
                                         "(or ASSAY_TOKEN); without either, listen on 127.0.0.1")
    store = Store(store_url, create=create_store)
    if not local and token is None and not has_accounts(store):
        store.close()
        raise InputError(None, "--host", f"{listen_host} is reachable from other machines, and this server has no "
                                         "sign-in: add accounts (assay users add NAME) or pass --token TOKEN "
                                         "(or ASSAY_TOKEN); without either, listen on 127.0.0.1")
    auth = WebAuth(store=store, token=token, always=not local, allowed_hosts=frozenset(hosts))
    play = PlayManager(store, tasks, play_campaign)
    templates = _env()

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        for note in play.resume():  # sessions of an earlier server process, picked up again
            sys.stderr.write(f"assay serve: {note}\n")
        yield
        await play.aclose()  # runs in flight stop; their sessions stay live in the store (resumed at start)
        store.close()

    # FastAPI's /docs and /redoc load their scripts from a CDN (blank offline): /api/docs is local.
    app = FastAPI(title="assay", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url="/api/openapi.json")
    app.state.store = store
    app.state.play = play
    app.state.on_stop = play.aclose  # a stop ends the play workers before waiting on requests (assay.web.ops)
    app.state.auth = auth
    app.add_middleware(Guard, auth=auth)
    if request_log is not None:
        app.add_middleware(RequestLog, stream=request_log)  # outermost: refusals of the Guard are logged too
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")

    def me(request: Request) -> Identity | None:
        who: Identity | None = request.state.identity
        return who

    def owner(request: Request) -> tuple[str | None, bool]:
        who = me(request)
        return (None, False) if who is None else (who.name, who.admin)

    def page(request: Request, name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        ctx.update(me=me(request), csrf=request.state.csrf, auth_required=request.state.auth_required)
        return HTMLResponse(templates.get_template(name).render(**ctx), status_code=status)

    def not_found(request: Request, what: str) -> HTMLResponse:
        return page(request, "error.html", status=404, title="not found", message=what)

    def expert_labels() -> list[dict[str, Any]] | None:
        return stored_labels(store) or None

    def campaign_blocks(names: list[str], whole: bool = False) -> list[dict[str, Any]]:
        """Each campaign's report; `whole`: with the per-run rows (reads every record whole)."""
        blocks = []
        labels = expert_labels()
        for name in names:
            rep = stored_report(store, name, labels=labels, details=whole, tasks=whole)
            blocks.append({"name": name, "report": rep,
                           "kinds": [k for k in KINDS if any(k in a for a in rep["agents"])]})
        return blocks

    # ---------------------------------------------------------------- sign-in

    @app.get("/signin", response_class=HTMLResponse)
    def signin_page(request: Request, next: str = "/") -> HTMLResponse:  # noqa: A002 (the query parameter's name)
        return page(request, "signin.html", title="sign in", next=_local_path(next), error=None)

    @app.post("/signin")
    async def signin(request: Request) -> Any:
        form = await _form(request)
        target = _local_path(form.get("next", "/"))
        try:
            made = auth.sign_in(form.get("token", ""), client_address(request.scope))
        except TooManyGuesses as e:
            return page(request, "signin.html", status=429, title="sign in", next=target, error=str(e))
        if made is None:
            return page(request, "signin.html", status=401, title="sign in", next=target,
                        error="that token is not valid")
        sid, _session = made
        resp = RedirectResponse(target, status_code=303)
        resp.set_cookie(COOKIE, sid, max_age=SESSION_HOURS * 3600, path="/", httponly=True, samesite="strict",
                        secure=bool(request.state.secure))
        return resp

    @app.post("/signout")
    def signout(request: Request) -> RedirectResponse:
        auth.sign_out(request.state.cookie_session)
        resp = RedirectResponse("/signin", status_code=303)
        resp.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict", secure=bool(request.state.secure))
        return resp

    # ---------------------------------------------------------------- pages

    @app.get("/", response_class=HTMLResponse)
    def index(request: Request) -> HTMLResponse:
        names = store.campaigns()
        return page(request, "index.html", title="leaderboard", campaigns=campaign_blocks(names),
                    playable=bool(tasks))

    @app.get("/campaigns/{name}", response_class=HTMLResponse)
    def campaign(request: Request, name: str) -> HTMLResponse:
        if name not in store.campaigns():
            return not_found(request, f"no campaign named {name!r}")
        block = campaign_blocks([name], whole=True)[0]
        try:
            wanted = RunFilter.from_query(request.query_params)
        except ValueError as e:
            return page(request, "error.html", status=400, title="bad filter", message=str(e))
        every = block["report"]["runs"]
        return page(request, "campaign.html", title=f"campaign {name}", c=block, runs=wanted.apply(every),
                    n_runs=len(every), f=wanted, agents=sorted({r["agent"] for r in every}),
                    sections=kind_sections(summary_model(block["report"])))

    def run_view(rec: RunRecord, start: int = 0) -> dict[str, Any]:
        """What the run page and the side-by-side page show of one run: its transcript's window
        from event `start` on (read as far as it is shown), its final answer clipped alike."""
        row = run_row(rec)
        g = row["grade"]
        window = event_window(store, rec.run_id, start, max_events=TRANSCRIPT_EVENTS, max_bytes=TRANSCRIPT_BYTES,
                              head_bytes=EVENT_BYTES, mark=CLIP_MARK)
        events = [{**e.event.wire(), "clipped": e.clipped, "size": e.size, "more": e.size - e.read}
                  for e in window.events]
        final = rec.final_message.encode()
        return {"run": row, "rec": rec, "grade": g, "rubric_items": g.get("items") or [],
                "scenario": {k: g[k] for k in SCENARIO_FIELDS if k in g},
                "events": events, "window": window,
                "final": final[:EVENT_BYTES].decode(errors="ignore") + CLIP_MARK if len(final) > EVENT_BYTES
                else rec.final_message,
                "final_more": max(0, len(final) - EVENT_BYTES)}

    @app.get("/compare", response_class=HTMLResponse)
    def compare_page(request: Request) -> HTMLResponse:
        """Two runs of one task side by side: facts, grades and transcripts."""
        ids = request.query_params.getlist("run")
        if len(ids) != 2:
            return page(request, "error.html", status=400, title="pick two runs",
                        message=f"run: choose exactly two runs of one task to compare (got {len(ids)})")
        pair = []
        for rid in ids:
            try:
                rec = store.get_run(rid)
            except ValueError as e:
                return page(request, "error.html", status=400, title="ambiguous run id", message=str(e))
            if rec is None:
                return not_found(request, f"no run {rid!r}")
            pair.append(run_view(rec))
        if pair[0]["rec"].key.task_id != pair[1]["rec"].key.task_id:
            return page(request, "error.html", status=400, title="not the same task",
                        message=f"run: {pair[0]['rec'].run_id} is of task {pair[0]['rec'].key.task_id!r} and "
                                f"{pair[1]['rec'].run_id} of {pair[1]['rec'].key.task_id!r}: side by side "
                                "compares two runs of one task")
        return page(request, "compare.html", title=f"task {pair[0]['rec'].key.task_id}: two runs", pair=pair)

    @app.get("/runs/{run_id}", response_class=HTMLResponse)
    def run_page(request: Request, run_id: str) -> HTMLResponse:
        """One run; its transcript from event `?from=SEQ` on (default the first), a window of it."""
        start = _seq(request.query_params.get("from", "0"))
        if start is None:
            return page(request, "error.html", status=400, title="bad event number",
                        message=f"from: an event's sequence number, 0 to {MAX_SEQ}")
        try:
            rec = store.get_run(run_id)
        except ValueError as e:
            return page(request, "error.html", status=400, title="ambiguous run id", message=str(e))
        if rec is None:
            return not_found(request, f"no run {run_id!r}")
        view = run_view(rec, start)
        who = me(request)
        labels = labels_of_run(store, rec.run_id)
        mine = {lab.item_id: lab for lab in labels if who is not None and lab.labeller == who.name}
        siblings = [o for o in store.runs(rec.key.campaign)
                    if o.key.task_id == rec.key.task_id and o.run_id != rec.run_id][:SIBLINGS_SHOWN]
        return page(request, "run.html", title=f"run {rec.run_id}", **view,
                    siblings=[{"run_id": o.run_id, "agent": o.key.agent, "epoch": o.key.epoch, "level": o.key.level,
                               "score": o.score} for o in siblings],
                    labels=labels, my_labels=mine,
                    labellable=_labellable(rec) if who is not None and who.role == "expert" else [])

    def api_run_of(run_id: str) -> RunRecord:
        """The run a JSON route names (a unique id prefix too): 400 when the prefix is
        ambiguous, 404 when there is no such run."""
        try:
            rec = store.get_run(run_id)
        except ValueError as e:
            raise HTTPException(400, str(e)) from None
        if rec is None:
            raise HTTPException(404, f"no run {run_id!r}")
        return rec

    def label_run(request: Request, run_id: str, entries: list[Any]) -> RunRecord:
        """Store the signed-in expert's labels of the run's judged rubric items."""
        who = me(request)
        if who is None or who.role != "expert":
            raise HTTPException(403, "only an account with the expert role labels rubric items "
                                     "(assay users add NAME --role expert)")
        rec = api_run_of(run_id)
        allowed = set(_labellable(rec))
        if not allowed:
            raise HTTPException(409, f"run {rec.run_id} has no judge-graded rubric item to label")
        items: list[ItemLabel] = []
        for i, e in enumerate(entries):
            if not isinstance(e, dict):
                raise HTTPException(400, f"labels[{i}]: must be an object")
            item_id, met, note = e.get("item_id"), e.get("met"), e.get("note", "")
            if not isinstance(item_id, str) or item_id not in allowed:
                raise HTTPException(400, f"labels[{i}].item_id: {item_id!r} is not a judge-graded item of this run "
                                         f"(items: {', '.join(sorted(allowed))})")
            if not isinstance(met, bool):
                raise HTTPException(400, f"labels[{i}].met: must be true or false")
            if not isinstance(note, str) or len(note) > MAX_NOTE_CHARS:
                raise HTTPException(400, f"labels[{i}].note: text of at most {MAX_NOTE_CHARS} characters")
            items.append(ItemLabel(item_id=item_id, met=met, note=note))
        if not items:
            raise HTTPException(400, "no label given")
        save_labels(store, rec.run_id, rec.key.task_id, who.name, items)
        return rec

    @app.post("/runs/{run_id}/labels")
    async def run_labels_form(request: Request, run_id: str) -> RedirectResponse:
        form = await _form(request)
        entries: list[Any] = []
        for key, value in form.items():
            if key.startswith("item_") and form.get(f"met_{key[5:]}") in ("met", "not"):
                n = key[5:]
                entries.append({"item_id": value, "met": form[f"met_{n}"] == "met", "note": form.get(f"note_{n}", "")})
        rec = label_run(request, run_id, entries)
        return RedirectResponse(f"/runs/{quote(rec.run_id)}#labels", status_code=303)

    @app.post("/api/runs/{run_id}/labels")
    async def api_run_labels(request: Request, run_id: str) -> JSONResponse:
        body = await _json_body(request)
        given = body.get("labels")
        rec = label_run(request, run_id, given if isinstance(given, list) else [])
        return JSONResponse({"run_id": rec.run_id,
                             "labels": [lab.model_dump() for lab in labels_of_run(store, rec.run_id)]})

    @app.get(HEALTH_PATH)
    def healthz() -> JSONResponse:
        return health(store, len(play.live()))

    @app.get("/api/docs", response_class=HTMLResponse)
    def api_docs(request: Request) -> HTMLResponse:
        spec = app.openapi()
        routes = [{"method": m.upper(), "path": p, "summary": op.get("summary", "")}
                  for p, ops in spec.get("paths", {}).items() for m, op in ops.items()]
        return page(request, "api_docs.html", title="API", routes=routes, max_body=MAX_BODY_BYTES)

    # ---------------------------------------------------------------- JSON API

    @app.get("/api/campaigns")
    def api_campaigns() -> dict[str, Any]:
        return {"campaigns": store.campaigns()}

    @app.get("/api/report")
    def api_report(campaign: str | None = None) -> JSONResponse:
        if campaign is not None and campaign not in store.campaigns():
            raise HTTPException(404, f"no campaign named {campaign!r}")
        return JSONResponse(_json_safe(stored_report(store, campaign, labels=expert_labels(), details=True,
                                                     tasks=True)))

    @app.get("/api/runs/{run_id}")
    def api_run(run_id: str) -> StreamingResponse:
        rec = api_run_of(run_id)
        return StreamingResponse(_run_json(store, rec), media_type="application/json")

    @app.get("/api/runs/{run_id}/events/{seq}")
    def api_run_event(run_id: str, seq: str) -> JSONResponse:
        """One event of a run's transcript, whole (`{seq, t, kind, data}`, as in `/api/runs/{id}`):
        where a run page's clipped event leads."""
        number = _seq(seq)
        if number is None:
            raise HTTPException(400, f"seq: an event's sequence number, 0 to {MAX_SEQ}")
        rec = api_run_of(run_id)
        event = stored_event(store, rec.run_id, number)
        if event is None:
            raise HTTPException(404, f"run {rec.run_id} has no event {number}")
        return JSONResponse(_json_safe(event.wire()))

    @app.get("/api/tasks")
    def api_tasks() -> dict[str, Any]:
        return {"tasks": [_task_row(t) for t in tasks]}

    @app.get("/api/me")
    def api_me(request: Request) -> dict[str, Any]:
        who = me(request)
        return {"name": None if who is None else who.name, "role": None if who is None else who.role,
                "agent": None if who is None else f"human:{who.name}"}

    # ---------------------------------------------------------------- human play

    def play_index_page(request: Request, status: int = 200, error: str | None = None) -> HTMLResponse:
        viewer, admin = owner(request)
        return page(request, "play_index.html", status=status, title="play", tasks=[_task_row(t) for t in tasks],
                    default_campaign=play.campaign, error=error, sessions=play.visible(viewer, admin))

    def start(request: Request, fields: dict[str, Any]) -> PlaySession:
        """A session of the signed-in account (its name, never one typed in), else of the name given."""
        viewer, _admin = owner(request)
        name = viewer if viewer is not None else str(fields.get("name", ""))
        return play.start(str(fields.get("task_id", "")), name, str(fields.get("campaign") or "") or None,
                          fields.get("level") or None, owner=viewer)

    @app.get("/play", response_class=HTMLResponse)
    def play_index(request: Request, error: str | None = None) -> HTMLResponse:
        return play_index_page(request, error=error)

    @app.post("/play")
    async def play_start_form(request: Request) -> Any:
        try:
            s = start(request, await _form(request))
        except PlayError as e:
            return play_index_page(request, status=400, error=str(e))
        # a person works a session in the workbench; the forms view stays linked from it
        return RedirectResponse(f"/play/{s.id}/workbench", status_code=303)

    @app.get("/play/{session_id}", response_class=HTMLResponse)
    def play_page(request: Request, session_id: str) -> HTMLResponse:
        try:
            s = play.get(session_id, *owner(request))
        except KeyError:
            return not_found(request, "no such play session")
        return page(request, "play.html", title=f"play {s.task.id}", s=s)

    @app.post("/api/play")
    async def api_play_start(request: Request) -> JSONResponse:
        body = await _json_body(request)
        try:
            s = start(request, body)
        except PlayError as e:
            raise HTTPException(400, str(e)) from None
        return JSONResponse({"session": s.id, "url": f"/play/{s.id}", "agent": s.spec})

    @app.get("/api/play/{session_id}")
    async def api_play_state(request: Request, session_id: str, since: int = 0) -> JSONResponse:
        try:
            s = play.get(session_id, *owner(request))
        except KeyError:
            raise HTTPException(404, "no such play session") from None
        return JSONResponse(_json_safe(await play.view(s, max(0, since))))

    @app.post("/api/play/{session_id}/action")
    async def api_play_action(request: Request, session_id: str) -> JSONResponse:
        output = await act(play, session_id, await _json_body(request), owner(request)[0])
        return JSONResponse({"output": output})

    app.include_router(workbench_routes(play, page, owner, _json_body))
    return app


def _labellable(rec: RunRecord) -> list[str]:
    """Ids of the run's rubric items an LLM judge graded (what judge-human agreement compares)."""
    if rec.status != "done" or rec.grade.rubric is None:
        return []
    return [it.id for it in rec.grade.rubric.items if not it.check and not it.na and it.hit is not None]


def _seq(text: str) -> int | None:
    """An event's sequence number from a URL (decimal digits, 0 to `MAX_SEQ`), else None."""
    if not (text.isascii() and text.isdigit()) or len(text) > 10 or int(text) > MAX_SEQ:
        return None
    return int(text)


FORM_BYTES = 256 * 1024
"""The largest form body taken (sign-in, labels, a play's start); a longer one is answered 413."""
FORM_FIELDS = 2000


async def _form(request: Request) -> dict[str, str]:
    """A posted form's fields (the last value of each), bounded before it is parsed: 16 posts of
    1 MiB of `a=%41&` took the event loop 0.75 s each, and every user's requests waited."""
    body = await request.body()
    if len(body) > FORM_BYTES:
        raise HTTPException(413, f"the form is larger than {FORM_BYTES // 1024} KiB")
    try:
        fields = parse_qs(body.decode("utf-8", "replace"), max_num_fields=FORM_FIELDS)
    except ValueError:
        raise HTTPException(400, f"the form has more than {FORM_FIELDS} fields") from None
    return {k: v[-1] for k, v in fields.items()}


def _local_path(target: str) -> str:
    """A redirect target on this server only (`/x`, never `//evil.example` or `https://...`)."""
    if not target.startswith("/") or target.startswith("//") or "\\" in target or any(ord(c) < 32 for c in target):
        return "/"
    return target


def _no_store_yet(url: str) -> bool:
    """A SQLite store file that does not exist yet (so it holds no accounts)."""
    return url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists()


async def _json_body(request: Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.body() or b"{}")
    except (ValueError, RecursionError):  # bad JSON, bad UTF-8, a number too long, nesting too deep
        raise HTTPException(400, "the body is not JSON") from None
    if not isinstance(body, dict):
        raise HTTPException(400, "the body must be a JSON object")
    return body


def _task_row(t: Task) -> dict[str, Any]:
    return {"id": t.id, "title": t.title, "kinds": t.kinds, "domain": t.domain, "levels": t.levels,
            "tools": t.tools, "default_level": "L3" if "L3" in t.levels else (t.levels[-1] if t.levels else None),
            "unplayable": playable(t), "source": t.source}
