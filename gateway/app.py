"""The aiohttp application: one cleanup context per owned resource, torn down in reverse."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from aiohttp import web

from store import open_store

from ._keys import INTAKE_WAKE, METRICS, SENDER_WAKE, SETTINGS, STOPPING, STORE
from ._metrics import Metrics
from .config import Settings

log = logging.getLogger("gateway")


async def _store_ctx(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    store = await open_store(settings.store.url, dedup_ttl_hours=settings.dedup.ttl_hours)
    interrupted = await store.interrupt_running()
    if interrupted:
        log.warning("marked %d session(s) interrupted after an unclean stop", len(interrupted))
    app[STORE] = store
    yield
    await store.aclose()


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    try:
        await request.app[STORE].ping()
    except Exception as exc:  # any failure to answer means "not ready"
        log.warning("readiness check failed: %s", type(exc).__name__)
        return web.json_response(
            {"error": {"code": "store_unavailable", "message": "the store does not answer"}},
            status=503,
        )
    return web.json_response({"status": "ready"})


async def metrics(request: web.Request) -> web.Response:
    return web.Response(text=request.app[METRICS].render(), content_type="text/plain")


def build_app(settings: Settings) -> web.Application:
    app = web.Application()
    app[SETTINGS] = settings
    app[METRICS] = Metrics()
    app[STOPPING] = asyncio.Event()
    app[INTAKE_WAKE] = asyncio.Event()
    app[SENDER_WAKE] = asyncio.Event()
    app.cleanup_ctx.append(_store_ctx)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    return app


def serve(settings: Settings) -> None:
    """Serve until SIGINT/SIGTERM, then shut down cleanly."""
    web.run_app(
        build_app(settings),
        host=settings.server.host,
        port=settings.server.port,
        print=lambda text: log.info("%s", text.strip()),
    )
