"""Small HTTP helpers shared by the routes: JSON errors in the contract's one shape."""

from __future__ import annotations

from aiohttp import web

OK_BODY = b'{"ok":true}'


def json_error(status: int, code: str, message: str, **extra: str) -> web.Response:
    """``{"error": {"code": ..., "message": ...}}`` with ``status``."""
    return web.json_response({"error": {"code": code, "message": message, **extra}}, status=status)


def ok() -> web.Response:
    """The webhook acknowledgement: 200 ``{"ok": true}``."""
    return web.Response(body=OK_BODY, content_type="application/json")


async def unmatched(request: web.Request) -> web.Response:
    """The last route: a JSON 404, or 405 when another route has the path with other methods.

    A route rather than a middleware, so the webhook hot path pays nothing for it.
    """
    allowed: set[str] = set()
    for resource in request.app.router.resources():
        if resource is not request.match_info.route.resource:
            allowed |= (await resource.resolve(request))[1]
    if allowed:
        headers = {"Allow": ",".join(sorted(allowed))}
        message = f"{request.method} is not allowed here; use {', '.join(sorted(allowed))}"
        response = json_error(405, "method_not_allowed", message)
        response.headers.update(headers)
        return response
    return json_error(404, "not_found", f"no route {request.path}")
