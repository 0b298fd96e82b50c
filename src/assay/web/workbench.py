"""The workbench's routes (`/play/{session}/workbench` and its JSON endpoints).

The page is server-rendered with a small plain script (`static/workbench.js`). Everything
it does goes through the session's run: commands and saving a file are actions
(`POST /api/play/{session}/action`, the run's `run_command` / `write_file`), opening a
file is a `read_file` action (`POST /api/play/{session}/open`, which also returns the text
for the editor), the file tree is the run's `list_files` tool (`GET .../tree`, not a turn).
Paths the browser sends reach only those tools, which resolve them inside the workspace
without following links (`assay.fs`); the server never opens a workspace file itself.
The Guard's rules apply as to every route; another account's session is 404.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse

from assay.web.human import EDITOR_LINES, PlayBusy, PlayError, PlayManager, PlayTimeout
from assay.web.tool_output import editor_text

__all__ = ["act", "workbench_routes"]

Page = Callable[..., HTMLResponse]
Owner = Callable[[Request], tuple[str | None, bool]]
JsonBody = Callable[[Request], Any]


async def act(play: PlayManager, session_id: str, action: dict[str, Any], owner: str | None) -> str:
    """One person's action in their session, its refusals as HTTP answers (404, 409, 503, 504)."""
    try:
        return await play.act(session_id, action, owner)
    except KeyError:
        raise HTTPException(404, "no such play session") from None
    except PlayError as e:
        raise HTTPException(409, str(e)) from None
    except PlayTimeout as e:
        raise HTTPException(504, str(e)) from None
    except TimeoutError:
        raise HTTPException(503, "the run did not start in time") from None


def workbench_routes(play: PlayManager, page: Page, owner: Owner, json_body: JsonBody) -> APIRouter:
    router = APIRouter()

    @router.get("/play/{session_id}/workbench", response_class=HTMLResponse)
    def workbench_page(request: Request, session_id: str) -> HTMLResponse:
        try:
            s = play.get(session_id, *owner(request))
        except KeyError:
            return page(request, "error.html", status=404, title="not found", message="no such play session")
        return page(request, "workbench.html", title=f"workbench {s.task.id}", s=s)

    @router.get("/api/play/{session_id}/tree")
    async def api_tree(request: Request, session_id: str, path: str = ".") -> JSONResponse:
        """The workspace's files below `path` (the run's `list_files`; not a turn)."""
        try:
            return JSONResponse(await play.tree(session_id, path, *owner(request)))
        except KeyError:
            raise HTTPException(404, "no such play session") from None
        except PlayError as e:
            raise HTTPException(409, str(e)) from None
        except PlayBusy as e:
            raise HTTPException(503, str(e)) from None

    @router.post("/api/play/{session_id}/open")
    async def api_open(request: Request, session_id: str) -> JSONResponse:
        """Open a file in the editor: one `read_file` turn; `content` is None when it cannot be
        edited as text, `whole` False when only part of it was shown."""
        body = await json_body(request)
        path = body.get("path")
        if not isinstance(path, str) or not path:
            raise HTTPException(400, "path: the file to open, relative to the workspace")
        output = await act(play, session_id, {"tool": "read_file", "args": {"path": path, "limit": EDITOR_LINES}},
                           owner(request)[0])
        content, whole = editor_text(output)
        return JSONResponse({"path": path, "output": output, "content": content, "whole": whole})

    return router
