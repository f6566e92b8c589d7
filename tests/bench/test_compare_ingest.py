"""The gateway side of the ingest comparison: the stream's bodies pass its checks, and what
reached its handler is counted from its store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from bench.compare import ingest, servers, stream
from tests.channels.telegram_fakes import FakeBotApi
from webhook_bot_gateway.gateway.app import build_app


def split(raw: bytes) -> tuple[str, dict[str, str], bytes]:
    """Path, headers (but Host and Content-Length) and body of a built request."""
    head, body = raw.split(b"\r\n\r\n", 1)
    first, *lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines)
    for name in ("Host", "Content-Length"):
        headers.pop(name)
    return first.split()[1], headers, body


async def test_the_gateway_takes_the_stream_and_stores_each_update_once(
    tmp_path: Path, aiohttp_server: Any, aiohttp_client: Any
) -> None:
    fake: TestServer = await aiohttp_server(FakeBotApi().app())  # getMe at start
    settings = servers.gateway_settings(tmp_path, str(fake.make_url("")).rstrip("/"))
    client: TestClient = await aiohttp_client(build_app(settings, ingest_only=True))
    numbers = stream.originals(60, seed=3)
    for platform in ("telegram", "whatsapp"):
        for raw in stream.requests(platform, numbers, first=0):
            path, headers, body = split(raw)
            response = await client.post(path, data=body, headers=headers)
            assert response.status == 200, await response.text()

    handled = ingest.gateway_handled(tmp_path)

    assert len(handled) == 2 * len(set(numbers))
    assert stream.duplicates(handled) == 0


def loads(duplicates_sent: int) -> dict[str, Any]:
    return {
        "rate": 100.0,
        "p50_ms": 1.0,
        "p99_ms": 2.0,
        "statuses": {"200": 5},
        "duplicates_sent": duplicates_sent,
        "target": 50.0,
    }


def test_summarize_counts_the_duplicates_a_handler_saw() -> None:
    result = {"closed": loads(3), "open": loads(1), "handled": [5, 6, 5, 7, 6, 5]}
    figures = ingest.summarize(result)
    assert figures["duplicates_sent"] == 4
    assert figures["handled"] == 6
    assert figures["duplicates_through"] == 3


def test_summarize_of_a_side_without_a_handler_counts_nothing() -> None:
    figures = ingest.summarize({"closed": loads(3), "open": loads(1)})
    assert figures["handled"] is None
    assert figures["duplicates_through"] is None


def test_sides_take_turns_going_first() -> None:
    sides = ("bare", "ptb", "gateway")
    assert [ingest.rotated(sides, i)[0] for i in range(4)] == ["bare", "ptb", "gateway", "bare"]
