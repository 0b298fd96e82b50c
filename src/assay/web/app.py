"""The web app (`assay serve`): leaderboard, run viewer, JSON API, and human play.

Pages are server-rendered Jinja2 with autoescaping on (every string from a task, a model
or a person is escaped); the play page adds a little plain JavaScript that posts actions
and polls for results. The JSON API returns exactly what the command line prints:
`/api/report` is `assay report --json`, `/api/runs/{id}` is `assay show --json`.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote

import jinja2
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

from assay.errors import InputError
from assay.report.build import build_report, run_row
from assay.store import Store
from assay.task.discover import discover
from assay.task.model import Task
from assay.web.human import DEFAULT_CAMPAIGN, PlayError, PlayManager, playable

HERE = Path(__file__).resolve().parent
KINDS = ("rubric", "scenario", "contract")
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


def _tojson(x: Any) -> str:
    return json.dumps(x, ensure_ascii=False, indent=1, default=str)


def _compact(x: Any) -> str:
    return json.dumps(x, ensure_ascii=False, default=str)


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(HERE / "templates")), autoescape=True,
                             undefined=jinja2.ChainableUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(num=_num, pct=_pct, money=_money, usd=_usd, ci=_ci, pretty=_tojson, compact=_compact, urlq=quote)
    return env


def _json_safe(obj: Any) -> Any:
    """The same JSON the command line writes (`default=str`), as plain data."""
    return json.loads(json.dumps(obj, ensure_ascii=False, default=str))


def create_app(store_url: str, suites: list[Path] | None = None) -> FastAPI:  # noqa: C901 (the app's routes, one small closure each over the same store)
    """The app over one store; `suites` are the task folders offered for human play.

    Bad suites are refused here (`assay.errors.InputError`), before the server starts.
    """
    if not (store_url.startswith("sqlite:") or store_url.startswith("postgresql")):
        raise InputError(None, "--store", f"unsupported store URL {store_url!r} "
                                          "(sqlite:///PATH or postgresql+psycopg://...)")
    tasks: list[Task] = discover(list(suites)) if suites else []
    store = Store(store_url)
    play = PlayManager(store, tasks)
    templates = _env()

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        await play.aclose()
        store.close()

    app = FastAPI(title="assay", lifespan=lifespan, docs_url="/api/docs", redoc_url=None)
    app.state.store = store
    app.state.play = play
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")

    def page(name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        return HTMLResponse(templates.get_template(name).render(**ctx), status_code=status)

    def not_found(what: str) -> HTMLResponse:
        return page("error.html", status=404, title="not found", message=what)

    def campaign_blocks(names: list[str]) -> list[dict[str, Any]]:
        blocks = []
        for name in names:
            rep = build_report(name, store.runs(name))
            blocks.append({"name": name, "report": rep,
                           "kinds": [k for k in KINDS if any(k in a for a in rep["agents"])]})
        return blocks

    # ---------------------------------------------------------------- pages

    @app.get("/", response_class=HTMLResponse)
    def index() -> HTMLResponse:
        names = store.campaigns()
        return page("index.html", title="leaderboard", campaigns=campaign_blocks(names),
                    playable=bool(tasks))

    @app.get("/campaigns/{name}", response_class=HTMLResponse)
    def campaign(name: str) -> HTMLResponse:
        if name not in store.campaigns():
            return not_found(f"no campaign named {name!r}")
        block = campaign_blocks([name])[0]
        return page("campaign.html", title=f"campaign {name}", c=block, runs=block["report"]["runs"])

    @app.get("/runs/{run_id}", response_class=HTMLResponse)
    def run_page(run_id: str) -> HTMLResponse:
        try:
            rec = store.get_run(run_id)
        except ValueError as e:
            return page("error.html", status=400, title="ambiguous run id", message=str(e))
        if rec is None:
            return not_found(f"no run {run_id!r}")
        row = run_row(rec)
        g = row["grade"]
        scenario = {k: g[k] for k in SCENARIO_FIELDS if k in g}
        return page("run.html", title=f"run {rec.run_id}", run=row, rec=rec, grade=g, scenario=scenario,
                    rubric_items=g.get("items") or [],
                    events=[e.wire() for e in store.events(rec.run_id)])

    # ---------------------------------------------------------------- JSON API

    @app.get("/api/campaigns")
    def api_campaigns() -> dict[str, Any]:
        return {"campaigns": store.campaigns()}

    @app.get("/api/report")
    def api_report(campaign: str | None = None) -> JSONResponse:
        if campaign is not None and campaign not in store.campaigns():
            raise HTTPException(404, f"no campaign named {campaign!r}")
        return JSONResponse(_json_safe(build_report(campaign, store.runs(campaign))))

    @app.get("/api/runs/{run_id}")
    def api_run(run_id: str) -> JSONResponse:
        try:
            rec = store.get_run(run_id)
        except ValueError as e:
            raise HTTPException(400, str(e)) from None
        if rec is None:
            raise HTTPException(404, f"no run {run_id!r}")
        events = store.events(rec.run_id)
        return JSONResponse(_json_safe({"run": run_row(rec), "events": [e.wire() for e in events]}))

    @app.get("/api/tasks")
    def api_tasks() -> dict[str, Any]:
        return {"tasks": [_task_row(t) for t in tasks]}

    # ---------------------------------------------------------------- human play

    @app.get("/play", response_class=HTMLResponse)
    def play_index(error: str | None = None) -> HTMLResponse:
        return page("play_index.html", title="play", tasks=[_task_row(t) for t in tasks],
                    default_campaign=DEFAULT_CAMPAIGN, error=error,
                    sessions=sorted(play.sessions.values(), key=lambda s: -s.created))

    @app.post("/play")
    async def play_start_form(request: Request) -> Any:
        form = {k: v[-1] for k, v in parse_qs((await request.body()).decode("utf-8", "replace")).items()}
        try:
            s = play.start(form.get("task_id", ""), form.get("name", ""), form.get("campaign", DEFAULT_CAMPAIGN),
                           form.get("level") or None)
        except PlayError as e:
            return page("play_index.html", status=400, title="play", tasks=[_task_row(t) for t in tasks],
                        default_campaign=DEFAULT_CAMPAIGN, error=str(e),
                        sessions=sorted(play.sessions.values(), key=lambda s: -s.created))
        return RedirectResponse(f"/play/{s.id}", status_code=303)

    @app.get("/play/{session_id}", response_class=HTMLResponse)
    def play_page(session_id: str) -> HTMLResponse:
        s = play.sessions.get(session_id)
        if s is None:
            return not_found("no such play session (sessions live in the server process: a restart ends them; "
                             "finished runs are in the store)")
        return page("play.html", title=f"play {s.task.id}", s=s)

    @app.post("/api/play")
    async def api_play_start(request: Request) -> JSONResponse:
        body = await _json_body(request)
        try:
            s = play.start(str(body.get("task_id", "")), str(body.get("name", "")),
                           str(body.get("campaign") or DEFAULT_CAMPAIGN), body.get("level") or None)
        except PlayError as e:
            raise HTTPException(400, str(e)) from None
        return JSONResponse({"session": s.id, "url": f"/play/{s.id}"})

    @app.get("/api/play/{session_id}")
    async def api_play_state(session_id: str, since: int = 0) -> JSONResponse:
        try:
            s = play.get(session_id)
        except KeyError:
            raise HTTPException(404, "no such play session") from None
        return JSONResponse(_json_safe(s.view(max(0, since))))

    @app.post("/api/play/{session_id}/action")
    async def api_play_action(session_id: str, request: Request) -> JSONResponse:
        body = await _json_body(request)
        try:
            output = await play.act(session_id, body)
        except KeyError:
            raise HTTPException(404, "no such play session") from None
        except PlayError as e:
            raise HTTPException(409, str(e)) from None
        except TimeoutError:
            raise HTTPException(503, "the run did not start in time") from None
        return JSONResponse({"output": output})

    return app


async def _json_body(request: Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.body() or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise HTTPException(400, "the body is not JSON") from None
    if not isinstance(body, dict):
        raise HTTPException(400, "the body must be a JSON object")
    return body


def _task_row(t: Task) -> dict[str, Any]:
    return {"id": t.id, "title": t.title, "kinds": t.kinds, "domain": t.domain, "levels": t.levels,
            "tools": t.tools, "default_level": "L3" if "L3" in t.levels else (t.levels[-1] if t.levels else None),
            "unplayable": playable(t), "source": t.source}
