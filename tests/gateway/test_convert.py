"""Channel events into the runner's input: the deep link payload of ``/start <payload>``."""

from __future__ import annotations

from typing import Any

from pytest_aiohttp import AiohttpServer

from tests.channels import telegram_fakes as tg
from webhook_bot_gateway.agents import Reply
from webhook_bot_gateway.channels.telegram import TelegramAdapter
from webhook_bot_gateway.gateway import _convert as convert


def event(text: str, command: dict[str, str] | None = None, key: str = "k1") -> dict[str, Any]:
    return {
        "channel": "telegram",
        "account": "support",
        "chat_id": "1",
        "sender_id": "1",
        "message_id": key,
        "dedup_key": key,
        "timestamp": "2026-01-01T00:00:00+00:00",
        "kind": "command" if command else "text",
        "text": text,
        "command": command,
    }


START = event("/start ref_42", {"name": "start", "args": "ref_42"})


def test_start_payload_is_a_context_line_and_in_the_data() -> None:
    inbound = convert.user_input([START])
    assert inbound.text.splitlines() == [
        "/start ref_42",
        "[the user came through a link with start payload: ref_42]",
    ]
    assert inbound.data[convert.START_PAYLOAD] == "ref_42"
    assert convert.last_start_payload([START]) == "ref_42"


def test_start_without_a_deep_link_payload_has_none() -> None:
    typed = event("/start hello there", {"name": "start", "args": "hello there"})
    bare = event("/start", {"name": "start", "args": ""})
    other = event("/help ref_42", {"name": "help", "args": "ref_42"})
    for item in (typed, bare, other, event("ref_42")):
        assert convert.START_PAYLOAD not in convert.user_input([item]).data
        assert convert.last_start_payload([item]) is None


def test_the_last_payload_of_a_merged_turn_wins() -> None:
    second = event("/start ref_43", {"name": "start", "args": "ref_43"}, key="k2")
    assert convert.last_start_payload([START, second, event("hi", key="k3")]) == "ref_43"
    assert convert.user_input([START, second]).data[convert.START_PAYLOAD] == "ref_43"


def test_a_nul_character_a_user_sent_becomes_a_replacement_character() -> None:
    """The store refuses U+0000 in a message (PostgreSQL cannot hold it): the user's text is
    answered with U+FFFD in its place rather than failing every try of the turn."""
    assert convert.user_input([event("a\x00b")]).text == "a\ufffdb"


async def test_a_long_button_title_still_sends_on_telegram(aiohttp_server: AiohttpServer) -> None:
    """An agent's button whose title is over Telegram's 64 bytes of callback_data (35 Cyrillic
    letters are 70 bytes) no longer makes the Bot API adapter refuse the whole reply: the id is
    cut at a character boundary, the button shows its whole title."""
    title = "Поговорить с оператором прямо сейчас"
    assert len(title.encode()) > 64
    reply = Reply("Чем помочь?", "triage", (title, "Меню"))
    message = convert.outbound("telegram", "support", "123456789", reply)
    fake = tg.FakeBotApi()
    server = await aiohttp_server(fake.app())
    async with TelegramAdapter(tg.config(str(server.make_url("")).rstrip("/"))) as adapter:
        await adapter.send(message)
    [call] = fake.calls
    [[first], [second]] = call.json_field("reply_markup")["inline_keyboard"]
    assert first["text"] == title
    assert len(first["callback_data"].encode()) <= 64
    assert title.startswith(first["callback_data"])
    assert second == {"text": "Меню", "callback_data": "Меню"}
