"""The admin API's inputs: a JSON body's values keep their JSON type while a query's numbers are
read from their text, and the closed sets of a query (``status``, ``channel``) refuse others."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from pydantic import BaseModel, ValidationError

from webhook_bot_gateway.channels import ADAPTERS
from webhook_bot_gateway.gateway._admin._api_models import SessionsQuery
from webhook_bot_gateway.gateway._admin._export import ExportQuery
from webhook_bot_gateway.gateway._admin._openapi import OPERATIONS
from webhook_bot_gateway.gateway._keys import STORE
from webhook_bot_gateway.gateway._sandbox.simulate import SimulateBody
from webhook_bot_gateway.gateway.app import build_app

from .ingest_helpers import AUTH, settings

Client = TestClient[web.Request, web.Application]
SID = "telegram-support-42"
# Every model a route reads a JSON body into (json_body): the admin API's and the sandbox's.
JSON_BODIES: list[type[BaseModel]] = [
    *(op.body for op in OPERATIONS if op.body is not None),
    SimulateBody,
]
# Every integer field of those bodies ("Model.field"), with the route of SID that reads it.
INTEGER_FIELDS = {"RewindBody.message_id": "rewind"}
# Python's JSON reads 1.0 as a float, "1" as a string; lax pydantic took each as message 1.
NOT_INTEGERS = [True, "1", 1.0]


@pytest.fixture
async def client(aiohttp_client: Any, tmp_path: Path) -> Client:
    app = build_app(settings(tmp_path / "gateway.db"), ingest_only=True)
    client: Client = await aiohttp_client(app)
    store = client.app[STORE]
    await store.create_session("telegram", "support", "42", "triage")
    await store.append_message(SID, "user", "hello")  # message 1
    await store.append_message(SID, "assistant", "hi", agent="triage")
    return client


def integer_fields(model: type[BaseModel]) -> set[str]:
    """``Model.field`` of each integer field of ``model`` and of the models it holds."""
    schema = model.model_json_schema()
    owners = [(model.__name__, schema), *schema.get("$defs", {}).items()]
    found = set()
    for owner, sub in owners:
        for name, prop in sub.get("properties", {}).items():
            variants = [prop, *prop.get("anyOf", ()), prop.get("items", {})]
            if any(variant.get("type") == "integer" for variant in variants):
                found.add(f"{owner}.{name}")
    return found


async def head_of(client: Client) -> int | None:
    session = await client.app[STORE].get_session(SID)
    assert session is not None
    return session.head_id


@pytest.mark.parametrize("value", NOT_INTEGERS, ids=["true", "string", "float"])
async def test_json_body_integer_fields_take_only_json_integers(
    client: Client, value: object
) -> None:
    found = set().union(*(integer_fields(model) for model in JSON_BODIES))
    assert found == set(INTEGER_FIELDS), "list a new integer body field in INTEGER_FIELDS"
    head = await head_of(client)
    for dotted, route in INTEGER_FIELDS.items():
        field = dotted.rsplit(".", 1)[1]
        path = f"/api/sessions/{SID}/{route}"
        response = await client.post(path, headers=AUTH, json={field: value})
        assert response.status == 400, await response.text()
        error = (await response.json())["error"]
        assert (error["code"], error["field"]) == ("invalid_field", field)
        assert error["message"] == f"{field}: Input should be a valid integer"
    assert await head_of(client) == head  # nothing moved
    # A query's numbers are text by nature: still read from their digits.
    for url in (
        "/api/sessions?limit=1&offset=0",
        f"/api/sessions/{SID}/events?after=0&limit=5",
        "/api/deadletters?limit=1&offset=0",
        "/api/quarantine?limit=1",
    ):
        assert (await client.get(url, headers=AUTH)).status == 200, url


@pytest.mark.parametrize("channel", ["sms", "Telegram", "", "web "])
async def test_sessions_list_refuses_a_channel_that_does_not_exist(
    client: Client, channel: str
) -> None:
    response = await client.get("/api/sessions", params={"channel": channel}, headers=AUTH)
    assert response.status == 400, await response.text()
    error = (await response.json())["error"]
    assert (error["code"], error["field"]) == ("invalid_field", "channel")
    assert "'telegram', 'whatsapp' or 'web'" in error["message"]


async def test_sessions_list_channels_are_the_channels_the_gateway_has(client: Client) -> None:
    """The closed set follows channels.ADAPTERS; each of its channels filters."""
    [channels, _] = SessionsQuery.model_json_schema()["properties"]["channel"]["anyOf"]
    assert set(channels["enum"]) == set(ADAPTERS)
    await client.app[STORE].create_session("web", "web", "abc", "triage")
    for channel in ADAPTERS:
        response = await client.get("/api/sessions", params={"channel": channel}, headers=AUTH)
        listed = await response.json()
        assert [s["channel"] for s in listed["sessions"]] == (
            [channel] if channel in ("telegram", "web") else []
        )
    error = await client.get("/api/sessions?channel=sms", headers=AUTH)
    assert error.status == 400  # before: 200 and no sessions, as if none had come by SMS


# Every model the admin API reads a query or a JSON body into (the export's query included).
INPUTS: list[type[BaseModel]] = sorted(
    {model for op in OPERATIONS for model in (op.query, op.body) if model is not None},
    key=lambda model: model.__name__,
)
QUERIES = {op.query for op in OPERATIONS if op.query is not None}


@pytest.mark.parametrize("model", INPUTS, ids=[model.__name__ for model in INPUTS])
def test_every_query_and_body_field_refuses_a_nul_character(model: type[BaseModel]) -> None:
    """One check for all of them (``_Input``): PostgreSQL's text holds no NUL."""
    assert ExportQuery in INPUTS
    for name in model.model_fields:
        for value in ("\x00", "a\x00b", ["ok", "\x00"]):
            with pytest.raises(ValidationError) as caught:
                model.model_validate({name: value}, strict=model not in QUERIES)
            found = {(e["loc"][0], e["type"]) for e in caught.value.errors()}
            assert (name, "nul_character") in found, (name, value)
