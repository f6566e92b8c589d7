"""/healthz, /readyz and /metrics as CONTRACT.md describes them."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from webhook_bot_gateway.gateway import app as app_module
from webhook_bot_gateway.gateway._keys import PIPELINE_TASKS, STORE
from webhook_bot_gateway.gateway.app import build_app

from .ingest_helpers import settings

Client = TestClient[web.Request, web.Application]


async def make_client(aiohttp_client: Any, tmp_path: Path) -> Client:
    client: Client = await aiohttp_client(
        build_app(settings(tmp_path / "gateway.db"), ingest_only=True)
    )
    return client


async def test_healthz_answers_ok_while_serving(aiohttp_client: Any, tmp_path: Path) -> None:
    client = await make_client(aiohttp_client, tmp_path)
    response = await client.get("/healthz")
    assert response.status == 200
    assert await response.json() == {"status": "ok"}


async def test_readyz_is_200_while_the_store_answers(aiohttp_client: Any, tmp_path: Path) -> None:
    client = await make_client(aiohttp_client, tmp_path)
    assert (await client.get("/readyz")).status == 200


async def test_readyz_is_503_with_a_json_error_when_the_store_is_down(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    client = await make_client(aiohttp_client, tmp_path)
    await client.app[STORE].aclose()
    response = await client.get("/readyz")
    assert response.status == 503
    assert (await response.json())["error"]["code"] == "store_unavailable"
    assert (await client.get("/healthz")).status == 200  # alive, just not ready


async def test_readyz_is_503_when_the_stores_read_does_not_come_back_in_time(
    aiohttp_client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reads queued behind writes that wait for another process's lock (the busy timeout):
    /readyz answered 200 after 4 s, past a balancer's probe timeout; it is 503 within the
    read's bound."""
    client = await make_client(aiohttp_client, tmp_path)
    stuck = asyncio.Event()

    async def waits(*args: Any) -> int:
        await stuck.wait()
        return 0

    monkeypatch.setattr(app_module, "READ_SECONDS", 0.05)
    monkeypatch.setattr(client.app[STORE], "backlog_count", waits)
    response = await asyncio.wait_for(client.get("/readyz"), 10)
    assert response.status == 503
    assert (await response.json())["error"]["code"] == "store_unavailable"


async def test_readyz_is_503_naming_a_pipeline_task_that_stopped(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    client: Client = await aiohttp_client(build_app(settings(tmp_path / "gateway.db")))
    assert (await client.get("/readyz")).status == 200
    sender = next(t for t in client.app[PIPELINE_TASKS] if t.get_name() == "sender")
    sender.cancel()
    await asyncio.gather(sender, return_exceptions=True)
    response = await client.get("/readyz")
    assert response.status == 503
    error = (await response.json())["error"]
    assert (error["code"], error["tasks"]) == ("pipeline_stopped", ["sender"])
    assert (await client.get("/healthz")).status == 200  # alive, just not ready


async def test_metrics_is_prometheus_text(aiohttp_client: Any, tmp_path: Path) -> None:
    client = await make_client(aiohttp_client, tmp_path)
    response = await client.get("/metrics")
    assert response.status == 200
    assert response.content_type == "text/plain"
    assert "# TYPE gateway_webhooks_received_total counter" in await response.text()


async def test_unknown_path_is_a_json_404(aiohttp_client: Any, tmp_path: Path) -> None:
    client = await make_client(aiohttp_client, tmp_path)
    response = await client.get("/webhooks/nowhere")
    assert response.status == 404
    assert (await response.json())["error"]["code"] == "not_found"


async def test_wrong_method_is_a_json_405(aiohttp_client: Any, tmp_path: Path) -> None:
    client = await make_client(aiohttp_client, tmp_path)
    response = await client.delete("/healthz")
    assert response.status == 405
    assert (await response.json())["error"]["code"] == "method_not_allowed"
    assert "GET" in response.headers["Allow"]


async def test_wrong_method_on_a_webhook_route_is_a_json_405(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    client = await make_client(aiohttp_client, tmp_path)
    response = await client.put("/webhooks/telegram/support")
    assert response.status == 405
    assert response.headers["Allow"] == "POST"
