"""What chatflow-agent needs to run offline: a scripted engine, and its sends routed to a fake.

Imported only in chatflow's server process (the ``bench`` extra installs chatflow-agent).
"""

from __future__ import annotations

import asyncio
import ssl
import types
from typing import Any

import httpx
from chatflow_agent import Agent, BaseEngine, Message
from chatflow_agent.core.engines.base import EngineTurnResult

from bench.compare import stream

GRAPH_HOST = "graph.facebook.com"  # fixed in WhatsAppChannel's send
# The fake is plain HTTP, so the detour needs no TLS; one context spares each client's detour
# the cost of building its own (the client's own transport still builds one, as it would).
_TLS = ssl.create_default_context()


class ScriptedEngine(BaseEngine):
    """Answers every message at once (or after ``delay`` seconds) with ``Got <text>, thanks.``,
    and counts the stream's messages that reached it."""

    def __init__(self, handled: list[int], delay: float = 0.0) -> None:
        self.handled = handled
        self.delay = delay

    async def generate_turn_async(self, agent: Agent, history: list[Message]) -> EngineTurnResult:
        text = history[-1].content or ""
        if "(m" in text:
            self.handled.append(stream.number_of(text))
        if self.delay:
            await asyncio.sleep(self.delay)
        return EngineTurnResult(text=f"Got {text}, thanks.")


class _ToFake(httpx.AsyncBaseTransport):
    """Sends each request to ``base`` instead of the host it names, path kept."""

    def __init__(self, base: str) -> None:
        self._base = httpx.URL(base)
        self._inner = httpx.AsyncHTTPTransport(verify=_TLS)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        request.url = request.url.copy_with(
            scheme=self._base.scheme, host=self._base.host, port=self._base.port
        )
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def route_sends(channel: Any, base: str) -> None:
    """Make the channel's own send code (a new ``httpx.AsyncClient`` per message) reach the
    fake Graph API at ``base``: its httpx module is swapped for one whose client mounts a
    transport for graph.facebook.com. Everything else it does is unchanged."""

    def client(**options: Any) -> httpx.AsyncClient:
        # a transport per client: closing a client closes its mounts
        return httpx.AsyncClient(mounts={f"all://{GRAPH_HOST}": _ToFake(base)}, **options)

    shim = types.SimpleNamespace(**vars(httpx))
    shim.AsyncClient = client
    channel._httpx = shim
