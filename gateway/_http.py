"""Small HTTP helpers shared by the routes: JSON errors in the contract's one shape, the
request-body checks every route that reads a body makes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import wraps
from http import HTTPStatus

from aiohttp import hdrs, web

OK_BODY = b'{"ok":true}'
UNSUPPORTED_ENCODING = "unsupported_encoding"
# The codes of aiohttp's own refusals where the gateway says it otherwise; else the reason
# phrase in snake case ("Bad Request": bad_request).
HTTP_ERROR_CODES = {413: "body_too_large"}
BODY_HEADERS = frozenset({hdrs.CONTENT_TYPE, hdrs.CONTENT_LENGTH})
NO_HANDSHAKE = "a HEAD request is no WebSocket handshake: send a GET with Upgrade: websocket"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def json_error(status: int, code: str, message: str, **extra: str) -> web.Response:
    """``{"error": {"code": ..., "message": ...}}`` with ``status``."""
    return web.json_response({"error": {"code": code, "message": message, **extra}}, status=status)


def http_error(exc: web.HTTPException) -> web.Response:
    """One of aiohttp's refusals (a ``text/plain`` body) as the JSON error: same status, same
    headers (``Allow`` of a 405), aiohttp's text as the message."""
    status = HTTPStatus(exc.status)
    code = HTTP_ERROR_CODES.get(exc.status) or status.phrase.lower().replace(" ", "_")
    default = f"{exc.status}: {exc.reason}"  # what aiohttp writes when it has nothing to say
    message = exc.text if exc.text and exc.text != default else status.description
    response = json_error(exc.status, code, " ".join(message.split()))
    for name, value in exc.headers.items():
        if name not in BODY_HEADERS:
            response.headers[name] = value
    return response


def json_http_errors(handler: Handler) -> Handler:
    """``handler`` with the HTTP errors aiohttp raises in it answered as JSON (``http_error``).

    For handlers whose aiohttp calls refuse before they answer: a WebSocket handshake that is
    not one (400). A HEAD is never one (RFC 6455: the handshake is a GET), but aiohttp would
    switch protocols for a HEAD with the handshake's headers: it gets the 400 without
    ``handler`` running. The webhooks and the admin API answer their own errors: no middleware
    does this for every route, so the webhook hot path pays nothing for it (docs/benchmarks.md).
    """

    @wraps(handler)
    async def answered(request: web.Request) -> web.StreamResponse:
        try:
            if request.method == hdrs.METH_HEAD:
                raise web.HTTPBadRequest(text=NO_HANDSHAKE)
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return http_error(exc)

    return answered


def body_encoding(request: web.Request) -> str | None:
    """The request's ``Content-Encoding`` unless it is absent or ``identity``.

    The server never inflates a body (``auto_decompress=False``: ``app.server_options``), so
    an encoded one is refused with 415 before it is read: a few KiB of gzip would otherwise
    count against a size limit as themselves and then inflate a thousandfold.
    """
    value = request.headers.get(hdrs.CONTENT_ENCODING)
    if value is None:
        return None
    codings = [coding.strip().lower() for coding in value.split(",")]
    return None if all(coding in ("", "identity") for coding in codings) else value


def encoding_message(encoding: str) -> str:
    return f"Content-Encoding {encoding!r} is not accepted: send the body as it is (identity)"


class ReadSlots:
    """A bound on the request bodies read at once: ``take`` refuses rather than queues."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.in_use = 0

    def take(self) -> bool:
        if self.in_use >= self.size:
            return False
        self.in_use += 1
        return True

    def give_back(self) -> None:
        self.in_use -= 1


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
