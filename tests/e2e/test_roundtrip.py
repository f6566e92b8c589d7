"""The real ``gateway serve`` between fake platforms: round trips, duplicates, statuses, restarts.

The agents are the offline demo agents of config.example.toml.
"""

from __future__ import annotations

import asyncio
import json
import signal

import aiohttp

from .conftest import MakeGateway, Platforms
from .gateway_proc import BOT, NUMBER, Gateway, eventually
from .webhooks import post, post_until_ok, telegram_text, whatsapp_status, whatsapp_texts

HELP = "Hello! I can help with bills, invoices, refunds and payments, or pass you to a person."
BILLING = "Billing here. Send me an invoice number such as INV-1001, or say menu to go back."


def telegram_session(chat_id: int) -> str:
    return f"telegram-{BOT}-{chat_id}"


def whatsapp_session(wa_id: str) -> str:
    return f"whatsapp-{NUMBER}-{wa_id}"


def user_texts(gateway: Gateway, session_id: str) -> list[str]:
    rows = gateway.query(
        "SELECT text FROM messages WHERE session_id = ? AND role = 'user' ORDER BY id", session_id
    )
    return [row[0] for row in rows]


def outbox_states(gateway: Gateway, session_id: str) -> list[str]:
    rows = gateway.query("SELECT state FROM outbox WHERE session_id = ? ORDER BY id", session_id)
    return [row[0] for row in rows]


async def test_e2e_telegram_round_trip(
    make_gateway: MakeGateway, platforms: Platforms, http: aiohttp.ClientSession
) -> None:
    gateway = await make_gateway()
    assert await post(http, gateway.url, telegram_text(1001, 555, "hello")) == 200
    fake = platforms.telegram
    await eventually(lambda: fake.texts("555") == [HELP], "the Telegram reply")
    [sent] = fake.sent("sendMessage")
    keyboard = json.loads(sent.body["reply_markup"])
    assert [b["text"] for row in keyboard["inline_keyboard"] for b in row] == [
        "Billing",
        "Talk to a person",
    ]
    session = await gateway.admin(http, f"/api/sessions/{telegram_session(555)}")
    assert (session["active_agent"], session["status"]) == ("triage", "idle")
    await eventually(
        lambda: outbox_states(gateway, telegram_session(555)) == ["sent"], "the row marked sent"
    )


async def test_e2e_whatsapp_round_trip(
    make_gateway: MakeGateway, platforms: Platforms, http: aiohttp.ClientSession
) -> None:
    gateway = await make_gateway()
    delivery = whatsapp_texts("15550002222", ("wamid.in1", "hello"))
    assert await post(http, gateway.url, delivery) == 200
    fake = platforms.graph
    await eventually(lambda: fake.texts("15550002222") == [HELP], "the WhatsApp reply")
    [sent] = fake.sent("message")
    assert sent.body["type"] == "interactive"
    buttons = sent.body["interactive"]["action"]["buttons"]
    assert [b["reply"]["title"] for b in buttons] == ["Billing", "Talk to a person"]
    messages = await gateway.admin(
        http, f"/api/sessions/{whatsapp_session('15550002222')}/messages"
    )
    assert [(m["role"], m["text"]) for m in messages["messages"]] == [
        ("user", "hello"),
        ("assistant", HELP),
    ]


async def test_e2e_same_delivery_five_times_gives_one_turn_and_one_reply(
    make_gateway: MakeGateway, platforms: Platforms, http: aiohttp.ClientSession
) -> None:
    gateway = await make_gateway()
    delivery = telegram_text(2001, 777, "hello")
    statuses = await asyncio.gather(*(post(http, gateway.url, delivery) for _ in range(3)))
    statuses += [await post(http, gateway.url, delivery) for _ in range(2)]
    assert statuses == [200] * 5
    sid = telegram_session(777)
    await eventually(lambda: outbox_states(gateway, sid) == ["sent"], "the reply sent")
    await eventually(lambda: gateway.query("SELECT count(*) FROM deliveries") == [(0,)], "intake")
    assert gateway.query("SELECT count(*) FROM inbox WHERE session_id = ?", sid) == [(1,)]
    assert user_texts(gateway, sid) == ["hello"]
    assert platforms.telegram.texts("777") == [HELP]


async def test_e2e_whatsapp_delivery_with_two_messages_gives_two_turns(
    make_gateway: MakeGateway, platforms: Platforms, http: aiohttp.ClientSession
) -> None:
    gateway = await make_gateway()  # double_texting = "enqueue"
    delivery = whatsapp_texts("15550003333", ("wamid.a", "hi"), ("wamid.b", "hello again"))
    assert await post(http, gateway.url, delivery) == 200
    sid = whatsapp_session("15550003333")
    await eventually(lambda: outbox_states(gateway, sid) == ["sent", "sent"], "two replies sent")
    assert user_texts(gateway, sid) == ["hi", "hello again"]
    assert platforms.graph.texts("15550003333") == [HELP, HELP]


async def test_e2e_status_webhook_marks_the_reply_delivered(
    make_gateway: MakeGateway, platforms: Platforms, http: aiohttp.ClientSession
) -> None:
    gateway = await make_gateway()
    user = "15550004444"
    assert await post(http, gateway.url, whatsapp_texts(user, ("wamid.in9", "hello"))) == 200
    sid = whatsapp_session(user)
    await eventually(lambda: outbox_states(gateway, sid) == ["sent"], "the reply sent")
    [(platform_ids,)] = gateway.query("SELECT platform_ids FROM outbox WHERE session_id = ?", sid)
    [wamid] = json.loads(platform_ids)
    assert [r.text for r in platforms.graph.sent("message")] == [HELP]
    assert await post(http, gateway.url, whatsapp_status(wamid, user, "delivered")) == 200

    def delivered() -> bool:
        rows = gateway.query("SELECT delivery_state FROM outbox WHERE session_id = ?", sid)
        return rows == [("delivered",)]

    await eventually(delivered, "delivery_state = delivered")


async def test_e2e_handoff_to_billing_survives_a_sigkill_and_restart(
    make_gateway: MakeGateway, platforms: Platforms, http: aiohttp.ClientSession
) -> None:
    gateway = await make_gateway()
    fake = platforms.telegram
    await post_until_ok(
        http, gateway.url, telegram_text(3001, 888, "I have a question about my invoice")
    )
    await eventually(lambda: fake.texts("888") == [BILLING], "billing's first answer")
    sid = telegram_session(888)
    await eventually(lambda: outbox_states(gateway, sid) == ["sent"], "the row marked sent")
    await gateway.kill()
    await gateway.start()
    await post_until_ok(http, gateway.url, telegram_text(3002, 888, "INV-1001 please"))
    answer = "Invoice INV-1001: 49.00 EUR, paid, due 2024-05-01."
    await eventually(lambda: fake.texts("888") == [BILLING, answer], "billing after the restart")
    session = await gateway.admin(http, f"/api/sessions/{sid}")
    assert session["active_agent"] == "billing"
    assert await gateway.stop(signal.SIGTERM) == 0
