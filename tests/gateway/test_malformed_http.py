"""A malformed HTTP request is one INFO line in the log; a route handler's bug keeps its ERROR
traceback (aiohttp logs both on ``aiohttp.server`` as "Error handling request")."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterator

import pytest
from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage
from aiohttp.test_utils import TestServer
from pytest_aiohttp import AiohttpServer

from webhook_bot_gateway.gateway._logging import REDACTION, configure_logging
from webhook_bot_gateway.gateway.config import LoggingConfig, Settings

from .logging_helpers import fresh_root_logging, redirect_root_handlers


@pytest.fixture
def logged() -> Iterator[io.StringIO]:
    """configure_logging() on a root logger of its own, its handler writing text lines to a
    buffer."""
    with fresh_root_logging():
        configure_logging(Settings(logging=LoggingConfig(format="text")))
        yield redirect_root_handlers()


async def boom(request: web.Request) -> web.Response:
    raise RuntimeError("a bug in a handler")


async def fine(request: web.Request) -> web.Response:
    return web.Response(text="fine")


async def upstream_garbage(request: web.Request) -> web.Response:
    # What aiohttp's client raises on a malformed answer: a bug of ours if a handler lets it out.
    raise BadHttpMessage("an upstream answer could not be parsed")


@pytest.fixture
async def server(aiohttp_server: AiohttpServer, logged: io.StringIO) -> TestServer:
    app = web.Application()
    app.router.add_get("/boom", boom)
    app.router.add_get("/fine", fine)
    app.router.add_get("/upstream", upstream_garbage)
    return await aiohttp_server(app, access_log=None)  # as gateway serve runs it


async def send_raw(server: TestServer, raw: bytes) -> bytes:
    assert server.port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(raw)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), timeout=10)
    finally:
        writer.close()


def server_lines(logged: io.StringIO) -> list[str]:
    """Everything logged, each line as printed."""
    return logged.getvalue().splitlines()


MALFORMED = {
    "extra words after the version": b"GET /fine HTTP/1.1 junk\r\nHost: x\r\n\r\n",
    "an unknown version": b"GET /fine HTTP/9.x\r\nHost: x\r\n\r\n",
    "a control character in the target": b"GET /\x01 HTTP/1.1\r\nHost: x\r\n\r\n",
    "a header line without a colon": b"GET /fine HTTP/1.1\r\nHost: x\r\nNo Colon Here\r\n\r\n",
    "a space in a header name": b"GET /fine HTTP/1.1\r\nHo st: x\r\n\r\n",
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
async def test_a_malformed_request_is_one_info_line(
    case: str, server: TestServer, logged: io.StringIO
) -> None:
    answer = await send_raw(server, MALFORMED[case])
    assert answer.startswith(b"HTTP/1.0 400 ") or answer.startswith(b"HTTP/1.1 400 ")
    lines = server_lines(logged)
    ours = [line for line in lines if " aiohttp.server " in line]
    assert len(lines) == 1, lines
    assert len(ours) == 1
    assert " INFO aiohttp.server malformed HTTP request from 127.0.0.1" in ours[0]
    assert "Traceback" not in "\n".join(lines)


async def test_a_handler_exception_is_still_an_error_with_its_traceback(
    server: TestServer, logged: io.StringIO
) -> None:
    answer = await send_raw(server, b"GET /boom HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 500 ")
    text = "\n".join(server_lines(logged))
    assert " ERROR aiohttp.server Error handling request from 127.0.0.1" in text
    assert "Traceback (most recent call last)" in text
    assert "RuntimeError: a bug in a handler" in text


async def test_a_parser_error_raised_in_a_handler_is_still_an_error_with_its_traceback(
    server: TestServer, logged: io.StringIO
) -> None:
    request = b"GET /upstream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    assert (await send_raw(server, request)).startswith(b"HTTP/1.1 500 ")
    text = "\n".join(server_lines(logged))
    assert " ERROR aiohttp.server Error handling request from 127.0.0.1" in text
    assert "Traceback (most recent call last)" in text
    assert "an upstream answer could not be parsed" in text
    assert "malformed HTTP request" not in text


async def test_a_secret_in_a_malformed_header_stays_out_of_the_line(
    server: TestServer, logged: io.StringIO
) -> None:
    REDACTION.use(["webhook-secret-in-a-bad-header"])
    raw = b"POST /fine HTTP/1.1\r\nHost: x\r\nX-Secret webhook-secret-in-a-bad-header\r\n\r\n"
    assert (await send_raw(server, raw)).startswith(b"HTTP/1.0 400 ")
    [line] = server_lines(logged)
    assert "malformed HTTP request" in line
    assert "webhook-secret-in-a-bad-header" not in line


async def test_a_wellformed_request_logs_nothing(server: TestServer, logged: io.StringIO) -> None:
    answer = await send_raw(server, b"GET /fine HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert server_lines(logged) == []
