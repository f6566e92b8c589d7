"""Small HTTP helpers shared by the routes: JSON errors in the contract's one shape."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

log = logging.getLogger("gateway.http")

OK_BODY = b'{"ok":true}'


def json_error(status: int, code: str, message: str, **extra: str) -> web.Response:
    """``{"error": {"code": ..., "message": ...}}`` with ``status``."""
    return web.json_response({"error": {"code": code, "message": message, **extra}}, status=status)


def ok() -> web.Response:
    """The webhook acknowledgement: 200 ``{"ok": true}``."""
    return web.Response(body=OK_BODY, content_type="application/json")


@web.middleware
async def json_errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Routing errors (404, 405) and unexpected failures answer in the contract's JSON shape."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = _CODES.get(exc.status, "http_error")
        return json_error(exc.status, code, exc.reason)
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return json_error(500, "internal_error", "the gateway failed; the error is in its log")


_CODES = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}
