"""A WhatsApp template's body parameters are checked once, in ``_templates.checked``, against
what Meta refuses (Graph error 132018: a line break, a tab, more than 4 spaces in a row; and a
blank one): ``POST /api/sessions/{id}/template`` answers 400 naming ``parameters.N`` before
anything is stored or queued. The agents' tool: tests/gateway/test_window.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.channels import whatsapp_fakes as wa
from webhook_bot_gateway.gateway._keys import SENDER_WAKE, STORE
from webhook_bot_gateway.gateway.app import build_app

from .ingest_helpers import AUTH, settings

Client = TestClient[web.Request, web.Application]
TEMPLATE = {"name": "order_ready", "language": "en_US", "parameters": ["name", "order"]}
# What Meta refuses in a parameter's text, and the words of the refusal.
REFUSED = [
    ("Bob\nSmith", "must not hold a line break or a tab"),
    ("Bob\r\nSmith", "must not hold a line break or a tab"),
    ("Bob\rSmith", "must not hold a line break or a tab"),
    ("Bob\u2028Smith", "must not hold a line break or a tab"),
    ("Bob\tSmith", "must not hold a line break or a tab"),
    ("Bob     Smith", "must not hold more than 4 spaces in a row"),
    ("Bob" + " " * 12, "must not hold more than 4 spaces in a row"),
]
ACCEPTED = ["Bob    Smith", " Bob ", "Bob\u00a0\u00a0\u00a0\u00a0\u00a0Smith", "Ünïcode ✓"]


@pytest.fixture
async def client(aiohttp_client: Any, tmp_path: Path) -> Client:
    config = settings(tmp_path / "gateway.db", whatsapp={"templates": [TEMPLATE]})
    client: Client = await aiohttp_client(build_app(config, ingest_only=True))
    return client


async def whatsapp_session(client: Client) -> str:
    store = client.app[STORE]
    session = await store.create_session("whatsapp", wa.NUMBER_A, "15550001111", "human")
    return session.session_id


async def send(client: Client, sid: str, parameters: list[str]) -> Any:
    body = {"name": "order_ready", "language": "en_US", "parameters": parameters}
    return await client.post(f"/api/sessions/{sid}/template", headers=AUTH, json=body)


@pytest.mark.parametrize(("text", "why"), REFUSED)
@pytest.mark.parametrize("index", [0, 1])
async def test_template_parameter_whatsapp_refuses_is_a_400_naming_it(
    client: Client, text: str, why: str, index: int
) -> None:
    sid = await whatsapp_session(client)
    store = client.app[STORE]
    parameters = ["Ann", "A-17"]
    parameters[index] = text
    response = await send(client, sid, parameters)
    assert response.status == 400, await response.text()
    error = (await response.json())["error"]
    field, name = f"parameters.{index}", TEMPLATE["parameters"][index]
    assert (error["code"], error["field"]) == ("invalid_field", field)
    assert error["message"] == f"{field} ({name}): {why} (WhatsApp refuses it: error 132018)"
    assert await store.get_branch(sid) == []
    assert await store.list_outbox(sid) == []
    assert await store.list_events(sid) == []
    assert not client.app[SENDER_WAKE].is_set()


async def test_template_parameters_meta_takes_are_queued_as_sent(client: Client) -> None:
    sid = await whatsapp_session(client)
    for text in ACCEPTED:
        response = await send(client, sid, [text, "A-17"])
        assert response.status == 202, (text, await response.text())
    rows = await client.app[STORE].list_outbox(sid)
    assert [row.payload["template"]["parameters"][0] for row in rows] == ACCEPTED
    refused = await send(client, sid, ["Ann", "A-17\n"])  # the one after a good one, too
    assert (await refused.json())["error"]["field"] == "parameters.1"
    assert len(await client.app[STORE].list_outbox(sid)) == len(ACCEPTED)
