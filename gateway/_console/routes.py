"""The console's routes: its page and static files, ``GET /``, its API and its live feed."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from . import api
from .keys import TICKETS
from .live import live
from .tickets import Tickets

STATIC = Path(__file__).parent / "static"
NO_CACHE = {"Cache-Control": "no-cache"}  # a console open in a tab sees an upgrade on reload


async def index(request: web.Request) -> web.StreamResponse:
    """GET /console: the console's one page."""
    return web.FileResponse(STATIC / "index.html", headers=NO_CACHE)


async def home(request: web.Request) -> web.StreamResponse:
    """GET /: the console."""
    raise web.HTTPFound("/console")


def add_console_routes(app: web.Application) -> None:
    """Register the console (before the admin API's catch-all)."""
    app[TICKETS] = Tickets()
    add = app.router.add_route
    add("GET", "/", home)
    add("GET", "/console", index)
    app.router.add_static("/console/static", STATIC, append_version=False)
    add("GET", "/console/live", live)
    add("GET", "/api/queue", api.human_queue)
    add("GET", "/api/agents", api.agents)
    add("POST", "/api/sessions/{id:[^/]*}/cancel", api.cancel_turn)
    add("POST", "/api/console/ticket", api.ticket)
    add("GET", "/api/console/config", api.console_config)
