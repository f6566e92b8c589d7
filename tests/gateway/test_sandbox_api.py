"""The sandbox's simulator in-process: a webhook route it cannot reach is a JSON 502, no 500."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.channels import telegram_fakes as tg
from tests.channels import whatsapp_fakes as wa
from tests.e2e.gateway_proc import free_port
from webhook_bot_gateway.channels import OutboundMessage, OutboundTemplate
from webhook_bot_gateway.channels.whatsapp import build_payloads
from webhook_bot_gateway.gateway._sandbox import simulate as simulate_module
from webhook_bot_gateway.gateway.app import build_app

from .ingest_helpers import AUTH, counts, grown, settings
from .raw_http import Raw, head

Client = TestClient[web.Request, web.Application]
USER = "4915112345678"
OTHER_USER = "4915187654321"


async def sandbox(aiohttp_client: Any, tmp_path: Path) -> Client:
    """The gateway with the sandbox on; its store is ``tmp_path / "gateway.db"``."""
    app = build_app(settings(tmp_path / "gateway.db", sandbox={"enabled": True}), ingest_only=True)
    client: Client = await aiohttp_client(app)
    return client


async def graph_send(client: Client, to: str, number: str = wa.NUMBER_A) -> str:
    """A text the gateway sends through the fake Graph API, as its sender would; its wamid."""
    token = wa.TOKEN_A if number == wa.NUMBER_A else wa.TOKEN_B
    [payload] = build_payloads(
        OutboundMessage(channel="whatsapp", account=number, chat_id=to, text="your invoice")
    )
    path = f"/sandbox/graph/v21.0/{number}/messages"
    response = await client.post(path, json=payload, headers={"Authorization": f"Bearer {token}"})
    assert response.status == 200, await response.text()
    [message] = (await response.json())["messages"]
    return str(message["id"])


async def sent_calls(client: Client) -> list[dict[str, Any]]:
    response = await client.get("/sandbox/api/sent", headers=AUTH)
    assert response.status == 200
    calls: list[dict[str, Any]] = (await response.json())["sent"]
    return calls


def status_body(message_id: str, chat_id: str = USER, **extra: str) -> dict[str, Any]:
    status = {"message_id": message_id, "state": "read"}
    return {"channel": "whatsapp", "chat_id": chat_id, "status": status, **extra}


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


async def test_simulate_refuses_a_status_for_a_message_the_gateway_never_sent(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    client = await sandbox(aiohttp_client, tmp_path)
    await graph_send(client, USER)
    read = {"messaging_product": "whatsapp", "status": "read", "message_id": "wamid.from-user"}
    path = f"/sandbox/graph/v21.0/{wa.NUMBER_A}/messages"
    bearer = {"Authorization": f"Bearer {wa.TOKEN_A}"}
    assert (await client.post(path, json=read, headers=bearer)).status == 200
    store, calls = counts(tmp_path / "gateway.db"), await sent_calls(client)
    # never sent at all; and the user's own message, which the gateway only marked as read
    for message_id in ("wamid.never-sent", "wamid.from-user"):
        response = await client.post(
            "/sandbox/api/simulate", json=status_body(message_id), headers=AUTH
        )
        assert response.status == 404, await response.text()
        error = (await response.json())["error"]
        assert (error["code"], error["field"]) == ("unknown_message", "status.message_id")
        assert message_id in error["message"]
    assert grown(store, counts(tmp_path / "gateway.db")) == {}  # no delivery was posted
    assert await sent_calls(client) == calls


async def test_simulate_refuses_a_status_for_a_message_sent_to_another_chat(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    client = await sandbox(aiohttp_client, tmp_path)
    wamid = await graph_send(client, USER)
    store = counts(tmp_path / "gateway.db")
    for body in (
        status_body(wamid, chat_id=OTHER_USER),  # another user's chat
        status_body(wamid, account=wa.NUMBER_B),  # the same user, at the other number
    ):
        response = await client.post("/sandbox/api/simulate", json=body, headers=AUTH)
        assert response.status == 404, (body, await response.text())
        error = (await response.json())["error"]
        assert (error["code"], error["field"]) == ("unknown_message", "status.message_id")
        assert f"sent to chat {USER} from {wa.NUMBER_A}" in error["message"]
    assert grown(store, counts(tmp_path / "gateway.db")) == {}


async def test_simulate_posts_a_status_for_a_message_the_gateway_sent(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    client = await sandbox(aiohttp_client, tmp_path)
    wamid = await graph_send(client, USER, number=wa.NUMBER_B)
    await graph_send(client, OTHER_USER, number=wa.NUMBER_B)  # newer, to another chat
    store = counts(tmp_path / "gateway.db")
    body = status_body(wamid, account=wa.NUMBER_B)
    response = await client.post("/sandbox/api/simulate", json=body, headers=AUTH)
    assert response.status == 200, await response.text()
    answer = await response.json()
    assert answer["webhook_status"] == 200
    [change] = answer["delivery"]["entry"][0]["changes"]
    [status] = change["value"]["statuses"]
    assert (status["id"], status["status"], status["recipient_id"]) == (wamid, "read", USER)
    assert change["value"]["metadata"]["phone_number_id"] == wa.NUMBER_B
    assert grown(store, counts(tmp_path / "gateway.db"))["deliveries"] == 1  # posted, stored


async def test_the_gateways_media_lookup_at_the_fake_graph_api_is_listed(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    client = await sandbox(aiohttp_client, tmp_path)
    body = {"channel": "whatsapp", "chat_id": USER, "image": {}, "account": wa.NUMBER_B}
    response = await client.post("/sandbox/api/simulate", json=body, headers=AUTH)
    assert response.status == 200, await response.text()
    [change] = (await response.json())["delivery"]["entry"][0]["changes"]
    media_id = change["value"]["messages"][0]["image"]["id"]
    bearer = {"Authorization": f"Bearer {wa.TOKEN_B}"}  # what the media worker does first
    metadata = await client.get(f"/sandbox/graph/v21.0/{media_id}", headers=bearer)
    assert metadata.status == 200, await metadata.text()
    [call] = await sent_calls(client)
    assert {k: call[k] for k in ("channel", "account", "chat_id", "method", "platform_id")} == {
        "channel": "whatsapp",
        "account": wa.NUMBER_B,
        "chat_id": "",
        "method": "media",
        "platform_id": media_id,
    }


async def test_the_fake_platforms_answer_json_nested_past_the_scanner_in_their_own_errors(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    """It was aiohttp's plain-text 500 (json.loads raised RecursionError)."""
    client = await sandbox(aiohttp_client, tmp_path)
    deep = "[" * 100_000 + "]" * 100_000
    json_type = {"Content-Type": "application/json"}
    telegram = await client.post(
        f"/sandbox/telegram/bot{tg.TOKEN}/sendMessage", data=deep, headers=json_type
    )
    assert telegram.status == 400
    assert (await telegram.json())["ok"] is False
    graph = await client.post(
        f"/sandbox/graph/v21.0/{wa.NUMBER_A}/messages",
        data=deep,
        headers={**json_type, "Authorization": f"Bearer {wa.TOKEN_A}"},
    )
    assert graph.status == 400
    assert (await graph.json())["error"]["code"] == 100


GRAPH_SHAPES = [
    {"type": "text", "text": "a string, not an object"},
    {"type": "interactive", "interactive": {"action": {"buttons": 5}}},
    {"type": "interactive", "interactive": {"action": {"buttons": [5]}}},
    {"type": "interactive", "interactive": {"action": {"sections": [{"rows": "x"}]}}},
    {"type": "interactive", "interactive": ["not", "an", "object"]},
]


@pytest.mark.parametrize("body", GRAPH_SHAPES, ids=[str(n) for n in range(len(GRAPH_SHAPES))])
async def test_the_fake_graph_api_refuses_a_message_of_the_wrong_shape_in_its_own_error(
    aiohttp_client: Any, tmp_path: Path, body: dict[str, Any]
) -> None:
    """It was aiohttp's plain-text 500 with a traceback in the log (TypeError, AttributeError),
    and nothing was said of what was wrong."""
    client = await sandbox(aiohttp_client, tmp_path)
    response = await client.post(
        f"/sandbox/graph/v21.0/{wa.NUMBER_A}/messages",
        json={"messaging_product": "whatsapp", "to": USER, **body},
        headers={"Authorization": f"Bearer {wa.TOKEN_A}"},
    )
    assert response.status == 400
    assert (await response.json())["error"]["code"] == 100
    assert await sent_calls(client) == []  # nothing recorded as sent


@pytest.mark.parametrize(
    "keyboard", [5, [5], [[5]], "x"], ids=["int", "row-int", "button-int", "str"]
)
async def test_the_fake_bot_api_refuses_a_keyboard_of_the_wrong_shape_in_its_own_error(
    aiohttp_client: Any, tmp_path: Path, keyboard: object
) -> None:
    client = await sandbox(aiohttp_client, tmp_path)
    response = await client.post(
        f"/sandbox/telegram/bot{tg.TOKEN}/sendMessage",
        json={"chat_id": 42, "text": "x", "reply_markup": {"inline_keyboard": keyboard}},
    )
    assert response.status == 400
    answer = await response.json()
    assert (answer["ok"], answer["error_code"]) == (False, 400)
    assert await sent_calls(client) == []


async def test_the_fake_bot_api_answers_get_me_by_get_as_telegram_does(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    """`curl .../getMe` is what a user tries first; it got 405 where Telegram answers it. A GET
    of a method that sends or records something stays refused."""
    client = await sandbox(aiohttp_client, tmp_path)
    me = await client.get(f"/sandbox/telegram/bot{tg.TOKEN}/getMe")
    assert me.status == 200
    answer = await me.json()
    assert answer["ok"] is True
    assert answer["result"]["is_bot"] is True
    wrong = await client.get("/sandbox/telegram/bot1:wrong/getMe")
    assert wrong.status == 401
    send = await client.get(f"/sandbox/telegram/bot{tg.TOKEN}/sendMessage")
    assert send.status == 405
    assert await sent_calls(client) == []
