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
