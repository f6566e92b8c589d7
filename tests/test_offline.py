"""The guard behind CONTRACT.md's "tests never reach the internet" (tests/offline.py) is on in
every test: a public name does not resolve and a public address is not connected to, while
loopback works as before."""

from __future__ import annotations

import asyncio
import socket

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer


def test_a_public_name_does_not_resolve() -> None:
    with pytest.raises(socket.gaierror, match="tests never reach the internet"):
        socket.getaddrinfo("api.telegram.org", 443)


@pytest.mark.parametrize("address", [("149.154.167.220", 443), ("2001:4860:4860::8888", 443)])
def test_a_public_address_is_not_connected_to(address: tuple[str, int]) -> None:
    family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        with pytest.raises(OSError, match="tests never reach the internet"):
            sock.connect(address)
        with pytest.raises(OSError, match="tests never reach the internet"):
            sock.connect_ex(address)


async def test_an_http_client_is_refused_the_internet_and_reaches_loopback() -> None:
    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="here")

    app = web.Application()
    app.router.add_get("/", hello)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://localhost:{server.port}/") as answer:
                assert await answer.text() == "here"
            for url in ("https://graph.facebook.com/v21.0/me", "http://8.8.8.8/"):
                with pytest.raises(aiohttp.ClientConnectorError) as refused:
                    await asyncio.wait_for(http.get(url), 5)
                assert "tests never reach the internet" in repr(refused.value), url
    finally:
        await server.close()
