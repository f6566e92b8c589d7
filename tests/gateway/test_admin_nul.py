"""A NUL character (U+0000) in what the admin API reads: a query's value or a body's string is
refused with 400 invalid_field naming it, before any store query, on SQLite and PostgreSQL alike
(PostgreSQL's text cannot hold one: a 500 before; SQLite's LIKE ended its pattern at it:
``q=%00`` matched every session). Path parameters refuse it as any other malformed id."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from yarl import URL

from webhook_bot_gateway.gateway._keys import STORE
from webhook_bot_gateway.gateway.app import build_app
from webhook_bot_gateway.store import Store

from .ingest_helpers import AUTH, NUMBER, settings

Client = TestClient[web.Request, web.Application]
SID = "telegram-support-42"
WA_SID = f"whatsapp-{NUMBER}-972987654321"
TEMPLATES = {"templates": [{"name": "follow_up", "language": "en_US", "parameters": ["x"]}]}
# (query, the field named): every string field of a query, a NUL alone and within text.
QUERIES = [
    ("/api/sessions?q=%00", "q"),
    ("/api/sessions?q=42%00", "q"),
    ("/api/sessions?agent=%00", "agent"),
    ("/api/sessions?agent=triage%00", "agent"),
    ("/api/sessions?channel=telegram%00", "channel"),
    ("/api/sessions?status=idle%00", "status"),
    ("/api/sessions?limit=5%00", "limit"),
    ("/api/deadletters?offset=%00", "offset"),
    ("/api/quarantine?limit=%00", "limit"),
    (f"/api/sessions/{SID}/events?after=1%00", "after"),
    (f"/api/sessions/{SID}/export?files=zip%00", "files"),
]
TEMPLATE = {"name": "follow_up", "language": "en_US", "parameters": ["Ann"]}
# (route of the WhatsApp session, body, the field named)
BODIES = [
    ("reply", {"text": "hi\x00"}, "text"),
    ("reply", {"text": "hi", "operator": "Ann\x00"}, "operator"),
    ("template", {**TEMPLATE, "parameters": ["A\x00nn"]}, "parameters.0"),
    ("template", {**TEMPLATE, "parameters": ["Ann", "B\x00"]}, "parameters.1"),
    ("template", {**TEMPLATE, "operator": "\x00"}, "operator"),
    ("template", {**TEMPLATE, "name": "follow_up\x00"}, "name"),
    ("template", {**TEMPLATE, "language": "en_US\x00"}, "language"),
    ("handoff", {"agent": "human\x00"}, "agent"),
]
# Path parameters: (path, status, code): malformed, as any id with another forbidden character.
PATHS = [
    ("/api/sessions/telegram-support-42%00", 400, "invalid_session_id"),
    ("/api/sessions/%00/messages", 400, "invalid_session_id"),
    (f"/api/sessions/{SID}/attachments/{'0' * 31}%00", 404, "unknown_attachment"),
    ("/api/quarantine/1%00", 400, "invalid_field"),
    ("/console/static/app.js%00", 404, "not_found"),
]


@pytest.fixture
async def client(store_url: str, aiohttp_client: Any, tmp_path: Path) -> Client:
    # store_url first: set up before the app and torn down after it.
    config = settings(tmp_path / "unused.db", store={"url": store_url}, whatsapp=TEMPLATES)
    made: Client = await aiohttp_client(build_app(config, ingest_only=True))
    store = made.app[STORE]
    await store.create_session("telegram", "support", "42", "triage")
    await store.create_session("whatsapp", NUMBER, "972987654321", "triage")
    return made


def store_of(client: Client) -> Store:
    return client.app[STORE]


async def error_of(response: Any, status: int) -> dict[str, Any]:
    assert response.status == status, await response.text()
    assert response.content_type == "application/json"
    error: dict[str, Any] = (await response.json())["error"]
    return error


@pytest.mark.parametrize(("path", "field"), QUERIES, ids=[p for p, _ in QUERIES])
async def test_a_nul_in_a_query_value_is_a_400_naming_the_field(
    client: Client, path: str, field: str
) -> None:
    response = await client.get(URL(path, encoded=True), headers=AUTH)
    error = await error_of(response, 400)
    assert (error["code"], error["field"]) == ("invalid_field", field)
    assert error["message"] == f"{field}: must not hold a NUL character"


async def test_the_listing_still_searches_and_filters_without_a_nul(client: Client) -> None:
    found = await (await client.get("/api/sessions?q=42&agent=triage", headers=AUTH)).json()
    assert [s["session_id"] for s in found["sessions"]] == [SID]
    none = await (await client.get("/api/sessions?q=%01", headers=AUTH)).json()
    assert none == {"sessions": [], "total": 0}


@pytest.mark.parametrize(("route", "body", "field"), BODIES, ids=[f for _, _, f in BODIES])
async def test_a_nul_in_a_body_string_is_a_400_naming_the_field_and_stores_nothing(
    client: Client, route: str, body: dict[str, Any], field: str
) -> None:
    path = f"/api/sessions/{WA_SID}/{route}"
    error = await error_of(await client.post(path, headers=AUTH, json=body), 400)
    assert (error["code"], error["field"]) == ("invalid_field", field)
    assert "must not hold a NUL character" in error["message"]
    assert await store_of(client).get_branch(WA_SID) == []
    assert await store_of(client).list_outbox(WA_SID) == []
    session = await store_of(client).get_session(WA_SID)
    assert session is not None
    assert session.active_agent == "triage"


@pytest.mark.parametrize(("path", "status", "code"), PATHS, ids=[p for p, _, _ in PATHS])
async def test_a_nul_in_a_path_parameter_is_refused_in_json(
    client: Client, path: str, status: int, code: str
) -> None:
    response = await client.get(URL(path, encoded=True), headers=AUTH)
    assert (await error_of(response, status))["code"] == code
