"""What a request from anyone may cost the server: the webhooks refuse encoded bodies before
reading them, only so many bodies are read at once, a refused request's connection is closed
at once instead of drained, and a request header has a deadline.

The server options come from ``build_app`` (aiohttp's ``handler_args``), so these in-process
servers run with the options ``gateway serve`` runs with.
"""

from __future__ import annotations

import asyncio
import gzip
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from webhook_bot_gateway.gateway._keys import METRICS, STORE
from webhook_bot_gateway.gateway.app import build_app
from webhook_bot_gateway.gateway.config import ServerConfig

from .ingest_helpers import (
    AUTH,
    counts,
    grown,
    settings,
    tg_headers,
    tg_update,
    wa_delivery,
    wa_headers,
    wa_text,
)
from .raw_http import Raw, head

Client = TestClient[web.Request, web.Application]
TG = "/webhooks/telegram/support"
WA = "/webhooks/whatsapp"
MIB = 1024 * 1024
REJECTED = "gateway_webhooks_rejected_total"
RECEIVED = "gateway_webhooks_received_total"


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "gateway.db"


async def make_client(aiohttp_client: Any, db_path: Path, **server: Any) -> Client:
    app = build_app(settings(db_path, server=server), ingest_only=True)
    client: Client = await aiohttp_client(app)
    return client


@pytest.fixture
async def client(aiohttp_client: Any, db_path: Path) -> Client:
    return await make_client(aiohttp_client, db_path)


def port_of(client: Client) -> int:
    port = client.server.port
    assert port is not None
    return port


def rejected(client: Client, reason: str, channel: str = "telegram") -> float:
    return client.app[METRICS].value(REJECTED, channel=channel, reason=reason)


# Content-Encoding


@pytest.mark.parametrize(
    "encoding", ["gzip", "deflate", "br", "zstd", "x-gzip", "compress", "gzip, identity", "*"]
)
@pytest.mark.parametrize("path", [TG, WA])
async def test_a_webhook_with_a_content_encoding_gets_415_and_stores_nothing(
    client: Client, db_path: Path, path: str, encoding: str
) -> None:
    plain = tg_update(1) if path == TG else wa_delivery([wa_text("wamid.enc")])
    body = gzip.compress(plain)
    signed = tg_headers() if path == TG else wa_headers(body)
    before = counts(db_path)
    response = await client.post(path, data=body, headers={**signed, "Content-Encoding": encoding})
    assert response.status == 415
    error = (await response.json())["error"]
    assert error["code"] == "unsupported_encoding"
    assert "Content-Encoding" in error["message"]
    assert grown(before, counts(db_path)) == {}
    assert rejected(client, "unsupported_encoding", "telegram" if path == TG else "whatsapp") == 1


@pytest.mark.parametrize("encoding", ["identity", "Identity", "IDENTITY", ""])
async def test_a_webhook_marked_identity_is_accepted(client: Client, encoding: str) -> None:
    headers = {**tg_headers(), "Content-Encoding": encoding}
    response = await client.post(TG, data=tg_update(7), headers=headers)
    assert response.status == 200
    assert await response.json() == {"ok": True}


async def test_an_encoded_webhook_is_refused_before_its_body_is_read(client: Client) -> None:
    """The body never arrives: the refusal cannot have waited for it (read_timeout is 10 s)."""
    raw = await Raw.connect(port_of(client))
    headers = {**tg_headers(), "Content-Encoding": "gzip"}
    await raw.send(head("POST", TG, headers, length=4096) + b"\x1f\x8b")
    answer = await raw.response(seconds=3)
    assert answer.status == 415
    assert answer.error["code"] == "unsupported_encoding"
    await raw.closed_within(3)  # the unread body is not drained either
    raw.close()


async def test_a_gzip_bomb_is_never_inflated(client: Client) -> None:
    """4 KiB on the wire that inflate to 4 MiB: the server's memory must not grow by the 4 MiB
    (aiohttp inflated request bodies itself, before any handler ran)."""
    bomb = gzip.compress(b"\0" * 4 * MIB, compresslevel=9)
    assert len(bomb) < 8 * 1024
    headers = {**tg_headers(), "Content-Encoding": "gzip"}
    raw = await Raw.connect(port_of(client))
    tracemalloc.start()
    try:
        # Sent whole, with the headers: aiohttp would inflate it as it arrives.
        await raw.send(head("POST", TG, headers, length=len(bomb)) + bomb)
        answer = await raw.response()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        raw.close()
    assert peak < MIB, f"the server held {peak} bytes for a {len(bomb)}-byte request"
    assert answer.status == 415


async def test_an_encoded_admin_body_gets_415(client: Client) -> None:
    session = await client.app[STORE].create_session("telegram", "support", "1", "triage")
    body = gzip.compress(b'{"agent": "human"}')
    headers = {**AUTH, "Content-Encoding": "gzip", "Content-Type": "application/json"}
    path = f"/api/sessions/{session.session_id}/handoff"
    response = await client.post(path, data=body, headers=headers)
    assert response.status == 415
    assert (await response.json())["error"]["code"] == "unsupported_encoding"
    unchanged = await client.app[STORE].get_session(session.session_id)
    assert unchanged is not None
    assert unchanged.active_agent == "triage"


# Concurrent body reads


async def test_body_reads_past_the_bound_get_503_busy_until_a_read_ends(
    aiohttp_client: Any, db_path: Path
) -> None:
    client = await make_client(aiohttp_client, db_path, max_concurrent_reads=2)
    port, metrics = port_of(client), client.app[METRICS]
    bodies = [tg_update(n) for n in (1, 2, 3, 4)]
    slow = [await Raw.connect(port) for _ in range(2)]
    for raw, body in zip(slow, bodies, strict=False):  # the body stops after 10 bytes
        await raw.send(head("POST", TG, tg_headers(), length=len(body)) + body[:10])
    for _ in range(200):
        if metrics.value(RECEIVED, channel="telegram") == 2:
            break
        await asyncio.sleep(0.01)
    assert metrics.value(RECEIVED, channel="telegram") == 2

    third = await Raw.connect(port)
    await third.send(head("POST", TG, tg_headers(), length=len(bodies[2])) + bodies[2][:10])
    busy = await third.response(seconds=3)
    assert busy.status == 503
    assert busy.error["code"] == "busy"
    assert rejected(client, "busy") == 1
    await third.closed_within(3)
    third.close()

    # A body that came whole with its headers needs no read slot: it is never refused busy.
    whole = await client.post(TG, data=tg_update(9), headers=tg_headers())
    assert whole.status == 200

    for raw, body in zip(slow, bodies, strict=False):
        await raw.send(body[10:])
        assert (await raw.response()).status == 200
        raw.close()
    fourth = await Raw.connect(port)
    await fourth.send(head("POST", TG, tg_headers(), length=len(bodies[3])) + bodies[3][:10])
    await asyncio.sleep(0.05)
    await fourth.send(bodies[3][10:])
    assert (await fourth.response()).status == 200
    fourth.close()


async def test_a_read_slot_is_given_back_after_408_and_413(
    aiohttp_client: Any, db_path: Path
) -> None:
    # The chunked body's second chunk follows 0.05 s after the first: a read_timeout of 1 s
    # leaves a loaded machine room, where 0.2 s could answer it 408 instead of 413.
    client = await make_client(
        aiohttp_client, db_path, max_concurrent_reads=1, read_timeout=1.0, max_body_telegram=100
    )
    port = port_of(client)
    for length, status in ((50, 408), (None, 413), (50, 408)):
        raw = await Raw.connect(port)
        if length is None:  # chunked: no length announced, refused once past the limit
            headers = {**tg_headers(), "Transfer-Encoding": "chunked"}
            await raw.send(head("POST", TG, headers) + b"10\r\n" + b"x" * 16 + b"\r\n")
            await asyncio.sleep(0.05)
            await raw.send(b"100\r\n" + b"x" * 256 + b"\r\n")
        else:
            await raw.send(head("POST", TG, tg_headers(), length=length) + b"{")
        assert (await raw.response()).status == status
        raw.close()
    assert rejected(client, "busy") == 0


def test_max_concurrent_reads_defaults_to_256_and_must_be_positive() -> None:
    assert ServerConfig().max_concurrent_reads == 256
    with pytest.raises(ValueError):
        ServerConfig(max_concurrent_reads=0)


# Closing after a refusal: no lingering


async def test_after_413_the_connection_closes_at_once(client: Client) -> None:
    """aiohttp's lingering close kept reading the unread body for 10 s after the answer."""
    raw = await Raw.connect(port_of(client))
    await raw.send(head("POST", TG, tg_headers(), length=10 * MIB) + b"x" * 1000)
    answer = await raw.response()
    assert answer.status == 413
    assert answer.error["code"] == "body_too_large"
    await raw.closed_within(2)
    raw.close()


async def test_after_408_the_connection_closes_at_once(aiohttp_client: Any, db_path: Path) -> None:
    client = await make_client(aiohttp_client, db_path, read_timeout=0.2)
    raw = await Raw.connect(port_of(client))
    await raw.send(head("POST", TG, tg_headers(), length=1000) + b"{")
    answer = await raw.response()
    assert answer.status == 408
    assert answer.error["code"] == "request_timeout"
    await raw.closed_within(2)
    raw.close()


async def test_a_refused_admin_body_is_not_drained_either(client: Client) -> None:
    raw = await Raw.connect(port_of(client))
    headers = {"Authorization": "Bearer wrong"}
    await raw.send(head("POST", "/api/sessions/x/reply", headers, length=MIB) + b"{")
    assert (await raw.response()).status == 401
    await raw.closed_within(2)
    raw.close()


# The header deadline (aiohttp's keep-alive timer: idle time and header time are one deadline)


async def test_a_trickled_header_is_cut_off_at_the_keepalive_timeout(
    aiohttp_client: Any, db_path: Path
) -> None:
    client = await make_client(aiohttp_client, db_path, keepalive_timeout=0.5)
    raw = await Raw.connect(port_of(client))
    await raw.send(b"POST " + TG.encode() + b" HTTP/1.1\r\n")

    async def trickle() -> None:
        for n in range(100):  # a header line every 50 ms: 5 s in all, unless cut off
            await raw.send(b"X-Slow-%d: 1\r\n" % n)
            await asyncio.sleep(0.05)

    sender = asyncio.create_task(trickle())
    try:
        waited = await raw.closed_within(3)
    finally:
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
        raw.close()
    assert waited < 2


async def test_an_idle_connection_is_closed_at_the_keepalive_timeout(
    aiohttp_client: Any, db_path: Path
) -> None:
    client = await make_client(aiohttp_client, db_path, keepalive_timeout=0.5)
    raw = await Raw.connect(port_of(client))
    await raw.send(head("GET", "/healthz"))
    assert (await raw.response()).status == 200
    assert await raw.closed_within(3) < 2
    raw.close()


def test_keepalive_timeout_defaults_to_15_s_and_must_be_positive() -> None:
    assert ServerConfig().keepalive_timeout == 15
    with pytest.raises(ValueError):
        ServerConfig(keepalive_timeout=0)
