"""The sandbox's simulator in-process: a webhook route it cannot reach is a JSON 502, no 500."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.channels import whatsapp_fakes as wa
from tests.e2e.gateway_proc import free_port
from webhook_bot_gateway.channels import OutboundMessage, OutboundTemplate
from webhook_bot_gateway.channels.whatsapp import build_payloads
from webhook_bot_gateway.gateway._sandbox import simulate as simulate_module
from webhook_bot_gateway.gateway.app import build_app

from .ingest_helpers import AUTH, settings
from .raw_http import Raw, head

Client = TestClient[web.Request, web.Application]


async def test_simulate_answers_502_when_its_webhook_route_is_unreachable(
    aiohttp_client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = build_app(settings(tmp_path / "gateway.db", sandbox={"enabled": True}), ingest_only=True)
    client: Client = await aiohttp_client(app)
    closed = f"http://127.0.0.1:{free_port()}"  # nobody listens there
    monkeypatch.setattr(simulate_module, "_own_url", lambda request: closed)
    body = {"channel": "telegram", "chat_id": "42", "text": "hello"}
    response = await client.post("/sandbox/api/simulate", json=body, headers=AUTH)
    assert response.status == 502
    assert (await response.json())["error"]["code"] == "webhook_unreachable"


async def test_sandbox_routes_do_not_exist_when_it_is_disabled(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    app = build_app(settings(tmp_path / "gateway.db"), ingest_only=True)
    client: Client = await aiohttp_client(app)
    for method, path in (
        ("POST", "/sandbox/api/simulate"),
        ("GET", "/sandbox/api/sent"),
        ("POST", "/sandbox/telegram/bot1:x/sendMessage"),
        ("GET", "/sandbox/graph/v21.0/123"),
    ):
        response = await client.request(method, path, headers=AUTH)
        assert response.status == 404, path
        assert (await response.json())["error"]["code"] == "not_found"


async def test_the_fake_graph_api_answers_undecodable_credentials_with_401_not_500(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    path = "/sandbox/graph/v21.0/100000000000001/messages"
    app = build_app(settings(tmp_path / "gateway.db", sandbox={"enabled": True}), ingest_only=True)
    client: Client = await aiohttp_client(app)
    raw = await Raw.connect(client.port)
    headers = {"Authorization": b"Bearer \xff", "Connection": "close"}
    await raw.send(head("POST", path, headers, length=2) + b"{}")
    answer = await raw.response()
    raw.close()
    assert answer.status == 401, answer


async def test_the_fake_graph_api_shows_a_template_by_name_and_parameters(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    app = build_app(settings(tmp_path / "gateway.db", sandbox={"enabled": True}), ingest_only=True)
    client: Client = await aiohttp_client(app)
    template = OutboundTemplate(name="follow_up", language="en_US", parameters=("Bob",))
    message = OutboundMessage(
        channel="whatsapp", account=wa.NUMBER_A, chat_id="15550001111", template=template
    )
    [payload] = build_payloads(message)
    path = f"/sandbox/graph/v21.0/{wa.NUMBER_A}/messages"
    bearer = {"Authorization": f"Bearer {wa.TOKEN_A}"}
    response = await client.post(path, json=payload, headers=bearer)
    assert response.status == 200, await response.text()
    sent = await client.get("/sandbox/api/sent?channel=whatsapp&chat_id=15550001111", headers=AUTH)
    [item] = (await sent.json())["sent"]
    assert item["text"] == "[template follow_up (en_US): Bob]"
