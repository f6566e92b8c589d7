"""WhatsApp's 24-hour window through the real ``gateway serve`` and the fake Graph API.

The clock is the message's own ``timestamp``: the gateway keeps when the user wrote from it, so a
message stamped 25 hours ago puts the session 25 hours after the user's last message, with no
sleeping and no clock inside the process to move.
"""

from __future__ import annotations

import json
import time
from typing import Any

import aiohttp

from .conftest import MakeGateway, Platforms
from .gateway_proc import ADMIN_TOKEN, NUMBER, Gateway, demo_agents, eventually
from .webhooks import post, whatsapp_messages

HOUR = 3600
TEMPLATE = """
[[whatsapp.templates]]
name = "follow_up"
language = "en_US"
parameters = ["customer_name"]
"""
# Only operators answer, so every Graph message call the fake records is one the test made.
OPERATORS_ONLY = """
[agents]
starting_agent = "human"

[[agents.list]]
name = "human"
kind = "human"
"""


def text_at(wamid: str, text: str, seconds_ago: float) -> dict[str, Any]:
    stamp = str(int(time.time() - seconds_ago))
    return {"id": wamid, "timestamp": stamp, "type": "text", "text": {"body": text}}


async def admin_post(
    http: aiohttp.ClientSession, gateway: Gateway, path: str, body: dict[str, Any]
) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    async with http.post(f"{gateway.url}{path}", json=body, headers=headers) as response:
        return response.status, await response.json()


async def user_wrote(
    http: aiohttp.ClientSession, gateway: Gateway, wa_id: str, seconds_ago: float
) -> str:
    """Deliver one text of ``wa_id`` stamped ``seconds_ago``; its session id once answered."""
    delivery = whatsapp_messages(wa_id, text_at(f"wamid.in-{wa_id}", "hello?", seconds_ago))
    assert await post(http, gateway.url, delivery) == 200
    session_id = f"whatsapp-{NUMBER}-{wa_id}"

    def answered() -> bool:
        rows = gateway.query(
            "SELECT count(*) FROM inbox WHERE session_id = ? AND state = 'done'", session_id
        )
        return bool(rows[0][0] == 1)

    await eventually(answered, "the message's turn")
    return session_id


async def test_e2e_reply_25_hours_later_is_refused_and_a_template_is_sent_instead(
    make_gateway: MakeGateway, platforms: Platforms, http: aiohttp.ClientSession
) -> None:
    gateway = await make_gateway(agents=TEMPLATE + OPERATORS_ONLY)
    session_id = await user_wrote(http, gateway, "15550002525", 25 * HOUR)
    graph = platforms.graph

    status, body = await admin_post(
        http, gateway, f"/api/sessions/{session_id}/reply", {"text": "Sorry for the wait!"}
    )
    assert status == 409
    assert body["error"]["code"] == "window_closed"
    assert gateway.query("SELECT count(*) FROM outbox")[0][0] == 0
    assert gateway.query("SELECT count(*) FROM messages WHERE role = 'assistant'")[0][0] == 0

    template = {"name": "follow_up", "language": "en_US", "parameters": ["Bob"]}
    status, body = await admin_post(http, gateway, f"/api/sessions/{session_id}/template", template)
    assert status == 202, body
    assert body["message"]["text"] == "[template follow_up (en_US): Bob]"
    await eventually(lambda: len(graph.sent("message")) == 1, "the template's Graph call")
    [sent] = graph.sent("message")
    assert sent.body == {
        "messaging_product": "whatsapp",
        "recipient_type": "individual",
        "to": "15550002525",
        "type": "template",
        "template": {
            "name": "follow_up",
            "language": {"code": "en_US"},
            "components": [{"type": "body", "parameters": [{"type": "text", "text": "Bob"}]}],
        },
    }
    # Every Graph message call the gateway made: none was the refused free text.
    assert [r.method for r in graph.requests if r.method == "message"] == ["message"]


async def test_e2e_reply_within_the_window_is_sent_and_the_session_shows_when(
    make_gateway: MakeGateway, platforms: Platforms, http: aiohttp.ClientSession
) -> None:
    gateway = await make_gateway(agents=TEMPLATE + OPERATORS_ONLY)
    before = time.time()
    session_id = await user_wrote(http, gateway, "15550002323", 23 * HOUR)
    session = await gateway.admin(http, f"/api/sessions/{session_id}")
    wrote = session["metadata"]["last_user_message_at"]
    assert before - 23 * HOUR - 1 <= wrote <= time.time() - 23 * HOUR

    status, body = await admin_post(
        http, gateway, f"/api/sessions/{session_id}/reply", {"text": "Here to help"}
    )
    assert status == 202, body
    await eventually(lambda: platforms.graph.texts("15550002323") == ["Here to help"], "the reply")


async def test_e2e_template_route_refuses_what_is_not_declared(
    make_gateway: MakeGateway, platforms: Platforms, http: aiohttp.ClientSession
) -> None:
    gateway = await make_gateway(agents=TEMPLATE + OPERATORS_ONLY)
    session_id = await user_wrote(http, gateway, "15550002424", 25 * HOUR)
    path = f"/api/sessions/{session_id}/template"
    cases: list[tuple[dict[str, Any], int, str | None]] = [
        ({"name": "nope", "language": "en_US"}, 404, "unknown_template"),
        ({"name": "follow_up", "language": "pt_BR", "parameters": ["x"]}, 404, "unknown_template"),
        ({"name": "follow_up", "language": "en_US"}, 422, "template_parameters"),
        ({"name": "follow_up", "language": "en_US", "parameters": ["a", "b"]}, 422, None),
        ({"name": "follow_up"}, 400, None),
    ]
    for body, status, code in cases:
        answer_status, answer = await admin_post(http, gateway, path, body)
        assert answer_status == status, (body, answer)
        assert answer["error"]["code"] == (code or answer["error"]["code"])
    assert platforms.graph.sent("message") == []
    assert gateway.query("SELECT count(*) FROM outbox")[0][0] == 0


async def test_e2e_agent_answer_25_hours_later_is_not_sent(
    make_gateway: MakeGateway, platforms: Platforms, http: aiohttp.ClientSession
) -> None:
    """The demo triage agent answers a message replayed 25 hours late: its text is kept in the
    history marked not_sent, and the fake Graph API records no message call."""
    gateway = await make_gateway(agents=TEMPLATE + demo_agents())
    session_id = await user_wrote(http, gateway, "15550002626", 25 * HOUR)
    found = gateway.query(
        "SELECT text, data FROM messages WHERE session_id = ? AND role = 'assistant'", session_id
    )
    assert found
    assert all("window" in json.loads(data)["not_sent"] for _, data in found)
    assert platforms.graph.sent("message") == []
    assert gateway.query("SELECT count(*) FROM outbox")[0][0] == 0
