"""Promises of CONTRACT.md's "HTTP" section that no other test held, in-process on a real
SQLite file: the template route's refusals, 400 invalid_session_id on every session route, the
roles and null texts of /messages, and 503 for a WhatsApp delivery while the store is down."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.e2e.ws_client import WebClient, is_turn_end
from webhook_bot_gateway.gateway._keys import METRICS, STORE
from webhook_bot_gateway.gateway.app import build_app
from webhook_bot_gateway.store import ROLES, Role, Store

from .ingest_helpers import AUTH, NUMBER, settings, wa_delivery, wa_headers, wa_text
from .test_admin import error_of

Client = TestClient[web.Request, web.Application]
WA_SID = f"whatsapp-{NUMBER}-972987654321"
TEMPLATE = {"name": "follow_up", "language": "en_US", "parameters": ["Ann"]}
TEMPLATES = {"templates": [{"name": "follow_up", "language": "en_US", "parameters": ["x"]}]}
INVOICE = "Invoice INV-1001: 49.00 EUR, paid, due 2024-05-01."


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "gateway.db"


@pytest.fixture
async def client(aiohttp_client: Any, db_path: Path) -> Client:
    """The HTTP side alone, one declared template, one WhatsApp session."""
    app = build_app(settings(db_path, whatsapp=TEMPLATES), ingest_only=True)
    made: Client = await aiohttp_client(app)
    await made.app[STORE].create_session("whatsapp", NUMBER, "972987654321", "triage")
    return made


def store_of(client: Client) -> Store:
    return client.app[STORE]


def template(client: Client, sid: str = WA_SID, headers: dict[str, str] = AUTH) -> Any:
    return client.post(f"/api/sessions/{sid}/template", headers=headers, json=TEMPLATE)


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer wrong"}], ids=["no-token", "wrong-token"]
)
async def test_template_without_the_admin_token_is_401_and_queues_nothing(
    client: Client, headers: dict[str, str]
) -> None:
    response = await template(client, headers=headers)
    assert (await error_of(response, 401))["code"] == "unauthorized"
    assert await store_of(client).list_outbox(WA_SID) == []


async def test_template_to_an_unknown_session_is_404_unknown_session(client: Client) -> None:
    response = await template(client, sid=f"whatsapp-{NUMBER}-404")
    assert (await error_of(response, 404))["code"] == "unknown_session"


def mark_running(db_path: Path, sid: str) -> None:
    """Another process's turn on ``sid``, as the store sees it."""
    conn = sqlite3.connect(db_path)
    try:
        conn.execute("UPDATE sessions SET status = 'running' WHERE session_id = ?", (sid,))
        conn.commit()
    finally:
        conn.close()


async def test_template_while_a_turn_runs_is_409_run_active(client: Client, db_path: Path) -> None:
    async with store_of(client).turn(WA_SID):  # a turn open in this process
        assert (await error_of(await template(client), 409))["code"] == "run_active"
    assert await store_of(client).list_outbox(WA_SID) == []
    assert (await template(client)).status == 202  # the same send, once no turn runs
    mark_running(db_path, WA_SID)  # and a turn of another process
    assert (await error_of(await template(client), 409))["code"] == "run_active"
    assert len(await store_of(client).list_outbox(WA_SID)) == 1


SESSION_ROUTES = [
    ("GET", "", None),
    ("GET", "/messages", None),
    ("GET", "/events", None),
    ("DELETE", "", None),
    ("POST", "/reply", {"text": "x"}),
    ("POST", "/handoff", {"agent": "human"}),
    ("POST", "/rewind", {"message_id": 1}),
    ("POST", "/template", TEMPLATE),
    ("GET", "/export", None),
    ("GET", "/attachments/" + "0" * 32, None),
]


@pytest.mark.parametrize(
    ("method", "suffix", "body"), SESSION_ROUTES, ids=[f"{m} {s}" for m, s, _ in SESSION_ROUTES]
)
@pytest.mark.parametrize("bad_id", ["bad.id", "bad id", "a" * 129], ids=["dot", "space", "129"])
async def test_every_session_route_refuses_a_malformed_id_with_400(
    client: Client, method: str, suffix: str, body: object, bad_id: str
) -> None:
    path = f"/api/sessions/{bad_id}{suffix}"
    response = await client.request(method, path, headers=AUTH, json=body)
    error = await error_of(response, 400)
    assert error["code"] == "invalid_session_id"
    assert error["message"]


@pytest.mark.parametrize("role", ROLES)
async def test_messages_show_each_stored_role_and_a_missing_text_as_null(
    client: Client, role: Role
) -> None:
    await store_of(client).append_message(WA_SID, role, "words")
    await store_of(client).append_message(WA_SID, role, None)
    answer = await (await client.get(f"/api/sessions/{WA_SID}/messages", headers=AUTH)).json()
    assert [(m["role"], m["text"]) for m in answer["messages"]] == [(role, "words"), (role, None)]


@pytest.fixture
async def pipeline(aiohttp_client: Any, tmp_path: Path) -> Client:
    """The whole gateway: pipeline and the demo agents of config.example.toml."""
    app = build_app(settings(tmp_path / "gateway.db", media={"root": str(tmp_path / "media")}))
    made: Client = await aiohttp_client(app)
    return made


async def web_chat(client: Client, *texts: str) -> str:
    """A web session that said each of ``texts`` and got its answers; its id."""
    async with client.ws_connect("/ws") as ws:
        socket = WebClient(ws)
        await socket.next()
        for n, text in enumerate(texts):
            await socket.say(text, f"c{n}")
            await socket.until(is_turn_end, "turn end")
        return socket.session_id


async def test_messages_show_the_billing_tool_call_with_null_text_and_its_tool_result(
    pipeline: Client,
) -> None:
    sid = await web_chat(pipeline, "my invoice please", "INV-1001")
    answer = await (await pipeline.get(f"/api/sessions/{sid}/messages", headers=AUTH)).json()
    lookup = answer["messages"][-3:]  # the call, its result, the reply
    assert [(m["role"], m["text"], m["agent"]) for m in lookup] == [
        ("assistant", None, "billing"),
        ("tool", INVOICE, "billing"),
        ("assistant", INVOICE, "billing"),
    ]
    assert "text" in lookup[0]  # present, as null
    [call] = lookup[0]["data"]["tool_calls"]
    assert call["name"] == "lookup_invoice"
    assert lookup[1]["data"]["tool_call_id"] == call["id"]


async def test_a_whatsapp_delivery_while_the_store_is_down_is_503_so_meta_retries(
    client: Client,
) -> None:
    await store_of(client).aclose()
    body = wa_delivery([wa_text("wamid.down")])
    response = await client.post("/webhooks/whatsapp", data=body, headers=wa_headers(body))
    assert (await error_of(response, 503))["code"] == "store_unavailable"
    rejected = "gateway_webhooks_rejected_total"
    labels = {"channel": "whatsapp", "reason": "store_unavailable"}
    assert client.app[METRICS].value(rejected, **labels) == 1
