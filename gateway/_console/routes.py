"""The console's routes: its page and static files, ``GET /``, its API and its live feed."""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiohttp import web

from .._http import json_error, json_http_errors
from . import api
from .keys import TICKETS
from .live import live
from .tickets import Tickets

STATIC = Path(__file__).parent / "static"
NO_CACHE = {"Cache-Control": "no-cache"}  # a console open in a tab sees an upgrade on reload


async def index(request: web.Request) -> web.StreamResponse:
    """GET /console: the console's one page."""
    return web.FileResponse(STATIC / "index.html", headers=NO_CACHE)


async def static_file(request: web.Request) -> web.StreamResponse:
    """GET /console/static/{name}: a file of the console's folder, as aiohttp's add_static
    serves it (ETag, ranges); a missing file, a folder or a path out of it: a JSON 404."""
    found = await asyncio.to_thread(_static_file, request.match_info["name"])
    if found is None:
        return json_error(404, "not_found", f"no file {request.path}")
    return web.FileResponse(found)


def _static_file(name: str) -> Path | None:
    """The regular file ``name`` names inside STATIC, symlinks resolved; None for any other."""
    if Path(name).is_absolute():  # joined, it would replace the folder (or name a UNC share)
        return None
    root = STATIC.resolve()
    try:
        path = (root / name).resolve(strict=True)
    except (OSError, RuntimeError, ValueError):  # missing; a symlink loop; a NUL character
        return None
    return path if path.is_relative_to(root) and path.is_file() else None


async def home(request: web.Request) -> web.StreamResponse:
    """GET /: the console."""
    raise web.HTTPFound("/console")


def add_console_routes(app: web.Application) -> None:
    """Register the console (before the admin API's catch-all)."""
    app[TICKETS] = Tickets()
    router = app.router  # add_get answers HEAD too
    router.add_get("/", home)
    router.add_get("/console", index)
    # Not add_static: its refusals are plain text, and a missing file an empty 404.
    router.add_get(r"/console/static/{name:[\s\S]+}", static_file)
    # Not a WebSocket handshake (a HEAD never is): a JSON 400.
    router.add_get("/console/live", json_http_errors(live))
    router.add_get("/api/queue", api.human_queue)
    router.add_get("/api/agents", api.agents)
    router.add_post("/api/sessions/{id:[^/]*}/cancel", api.cancel_turn)
    router.add_post("/api/console/ticket", api.ticket)
    router.add_get("/api/console/config", api.console_config)
