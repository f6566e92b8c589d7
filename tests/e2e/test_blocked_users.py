"""Blocked and unreachable users through the real ``gateway serve``: their replies are parked
(the fake platforms record no send attempt) until they are back, then sent in order."""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from .conftest import MakeGateway, Platforms
from .fakes import GONE, FakePlatform
from .gateway_proc import ADMIN_TOKEN, BOT, NUMBER, Gateway, eventually
from .webhooks import post, telegram_text, telegram_update, whatsapp_texts

HELP = "Hello! I can help with bills, invoices, refunds and payments, or pass you to a person."
ALICE = 555
OTHER = 777  # a user nobody blocked: a barrier for the sender (rows start in id order)


def membership(update_id: int, old: str, new: str) -> dict[str, Any]:
    user = {"id": ALICE, "is_bot": False, "first_name": "Alice"}
    bot = {"id": 123456789, "is_bot": True, "first_name": "Bot", "username": "e2e_bot"}
    change = {
        "chat": {"id": ALICE, "type": "private", "first_name": "Alice"},
        "from": user,
        "date": 1735690000,
        "old_chat_member": _member(bot, old),
        "new_chat_member": _member(bot, new),
    }
    return {"update_id": update_id, "my_chat_member": change}


def _member(bot: dict[str, Any], status: str) -> dict[str, Any]:
    banned = {"until_date": 0} if status == "kicked" else {}  # ChatMemberBanned requires it
    return {"user": bot, "status": status, **banned}


async def operator_reply(
    http: aiohttp.ClientSession, gateway: Gateway, session_id: str, text: str
) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    url = f"{gateway.url}/api/sessions/{session_id}/reply"
    async with http.post(url, json={"text": text}, headers=headers) as response:
        assert response.status == 202, await response.text()
        answer: dict[str, Any] = await response.json()
        return answer


def attempts(fake: FakePlatform, chat_id: str, method: str) -> list[str | None]:
    """Every send to the chat the fake received, accepted or not."""
    return [r.text for r in fake.requests if r.chat_id == chat_id and r.method == method]


async def test_e2e_blocked_telegram_user_gets_no_send_attempt_until_unblocked(
    make_gateway: MakeGateway, platforms: Platforms, http: aiohttp.ClientSession
) -> None:
    gateway = await make_gateway()
    fake, alice = platforms.telegram, f"telegram-{BOT}-{ALICE}"
    assert await post(http, gateway.url, telegram_text(1, ALICE, "hello")) == 200
    await eventually(lambda: fake.texts(str(ALICE)) == [HELP], "the first answer")
    assert await post(http, gateway.url, telegram_update(membership(2, "member", "kicked"))) == 200
    await eventually(lambda: _blocked(gateway, alice), "the session marked blocked", seconds=10)
    answer = await operator_reply(http, gateway, alice, "We refunded you.")
    assert answer["parked"] is True
    other = f"telegram-{BOT}-{OTHER}"
    assert await post(http, gateway.url, telegram_text(3, OTHER, "hi")) == 200
    await eventually(lambda: fake.texts(str(OTHER)) == [HELP], "the barrier's answer")
    await operator_reply(http, gateway, other, "barrier")
    await eventually(lambda: fake.texts(str(OTHER)) == [HELP, "barrier"], "the later reply")
    assert attempts(fake, str(ALICE), "sendMessage") == [HELP]  # nothing tried since the block
    session = await gateway.admin(http, f"/api/sessions/{alice}")
    assert (session["metadata"]["blocked"], session["parked_replies"]) == (True, 1)
    # The block was a status-only event: no turn ran, the history is the first exchange.
    messages = await gateway.admin(http, f"/api/sessions/{alice}/messages")
    assert [m["text"] for m in messages["messages"]] == ["hello", HELP, "We refunded you."]
    assert await post(http, gateway.url, telegram_update(membership(4, "kicked", "member"))) == 200
    await eventually(
        lambda: fake.texts(str(ALICE)) == [HELP, "We refunded you."], "the parked reply"
    )
    assert await post(http, gateway.url, telegram_text(5, ALICE, "thanks")) == 200
    await eventually(
        lambda: fake.texts(str(ALICE)) == [HELP, "We refunded you.", HELP], "the new answer"
    )
    events = await gateway.admin(http, f"/api/sessions/{alice}/export")
    kinds = [e["kind"] for e in events["events"]]
    assert "user_blocked" in kinds
    assert kinds.index("user_blocked") < kinds.index("user_unblocked")


def _blocked(gateway: Gateway, session_id: str) -> bool:
    rows = gateway.query("SELECT metadata FROM sessions WHERE session_id = ?", session_id)
    return bool(rows) and json.loads(rows[0][0]).get("blocked") is True


async def test_e2e_unreachable_whatsapp_user_gets_no_send_attempt_until_they_write_again(
    make_gateway: MakeGateway, platforms: Platforms, http: aiohttp.ClientSession
) -> None:
    gateway = await make_gateway()
    fake, user = platforms.graph, "15550003333"
    session_id = f"whatsapp-{NUMBER}-{user}"
    fake.fail(user, GONE)  # the first reply: Graph answers 131026
    assert await post(http, gateway.url, whatsapp_texts(user, ("wamid.u1", "hello"))) == 200
    await eventually(lambda: _blocked(gateway, session_id), "the session marked unreachable")
    answer = await operator_reply(http, gateway, session_id, "Are you still there?")
    assert answer["parked"] is True
    barrier = "15550004444"
    assert await post(http, gateway.url, whatsapp_texts(barrier, ("wamid.b1", "hi"))) == 200
    await eventually(lambda: fake.texts(barrier) == [HELP], "the barrier's answer")
    await operator_reply(http, gateway, f"whatsapp-{NUMBER}-{barrier}", "barrier")
    await eventually(lambda: fake.texts(barrier) == [HELP, "barrier"], "the later reply")
    assert attempts(fake, user, "message") == [HELP]  # the one refused try, nothing since
    session = await gateway.admin(http, f"/api/sessions/{session_id}")
    assert (session["metadata"]["blocked"], session["parked_replies"]) == (True, 2)
    assert await post(http, gateway.url, whatsapp_texts(user, ("wamid.u2", "back"))) == 200
    await eventually(
        lambda: fake.texts(user) == [HELP, "Are you still there?", HELP],
        "the parked replies, then the new answer",
    )
    session = await gateway.admin(http, f"/api/sessions/{session_id}")
    assert (session["metadata"]["blocked"], session["parked_replies"]) == (False, 0)
