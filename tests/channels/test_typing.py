"""``send_typing``, the one call every adapter offers, against fake platform servers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from pytest_aiohttp import AiohttpServer

from webhook_bot_gateway.channels import ChannelAdapter, RetryableSendError
from webhook_bot_gateway.channels.telegram import TelegramAdapter
from webhook_bot_gateway.channels.whatsapp import WhatsAppAdapter

from . import telegram_fakes as tg
from . import whatsapp_fakes as wa


@pytest.fixture
async def bot_api(aiohttp_server: AiohttpServer) -> AsyncIterator[tuple[tg.FakeBotApi, str]]:
    fake = tg.FakeBotApi()
    server = await aiohttp_server(fake.app())
    yield fake, str(server.make_url("")).rstrip("/")
    fake.release.set()


@pytest.fixture
async def graph(aiohttp_server: AiohttpServer) -> AsyncIterator[tuple[wa.FakeGraph, str]]:
    fake = wa.FakeGraph()
    server = await aiohttp_server(fake.app())
    yield fake, str(server.make_url("/"))
    fake.release.set()


async def test_send_typing_telegram_posts_the_typing_chat_action(
    bot_api: tuple[tg.FakeBotApi, str],
) -> None:
    fake, url = bot_api
    async with TelegramAdapter(tg.config(url)) as adapter:
        typing: ChannelAdapter = adapter
        await typing.send_typing("support", "4242", "77")
    [call] = fake.calls
    assert (call.method, call.token) == ("sendChatAction", tg.TOKEN)
    assert call.fields == {"chat_id": "4242", "action": "typing"}


async def test_send_typing_telegram_shows_it_in_the_forum_topic(
    bot_api: tuple[tg.FakeBotApi, str],
) -> None:
    fake, url = bot_api
    async with TelegramAdapter(tg.config(url)) as adapter:
        await adapter.send_typing("support", "-100", thread_id="3001")
    [call] = fake.calls
    assert call.fields == {"chat_id": "-100", "action": "typing", "message_thread_id": "3001"}


async def test_send_typing_telegram_maps_a_429_to_a_retryable_error(
    bot_api: tuple[tg.FakeBotApi, str],
) -> None:
    fake, url = bot_api
    fake.script("sendChatAction", tg.error(429, "Too Many Requests: retry after 3", retry_after=3))
    async with TelegramAdapter(tg.config(url)) as adapter:
        with pytest.raises(RetryableSendError) as caught:
            await adapter.send_typing("support", "4242")
    assert caught.value.retry_after == 3


async def test_send_typing_whatsapp_marks_the_message_read_with_the_indicator(
    graph: tuple[wa.FakeGraph, str],
) -> None:
    fake, url = graph
    async with aiohttp.ClientSession() as session:
        adapter: ChannelAdapter = WhatsAppAdapter(wa.config(url), session)
        await adapter.send_typing(wa.NUMBER_A, "16505551234", "wamid.in1")
    [request] = fake.requests
    expected: dict[str, Any] = {
        "messaging_product": "whatsapp",
        "status": "read",
        "message_id": "wamid.in1",
        "typing_indicator": {"type": "text"},
    }
    assert (request.path, request.body) == (f"/{wa.API_VERSION}/{wa.NUMBER_A}/messages", expected)
    assert request.authorization == f"Bearer {wa.TOKEN_A}"


async def test_send_typing_whatsapp_without_a_message_sends_nothing(
    graph: tuple[wa.FakeGraph, str],
) -> None:
    fake, url = graph
    async with aiohttp.ClientSession() as session:
        await WhatsAppAdapter(wa.config(url), session).send_typing(wa.NUMBER_A, "16505551234")
    assert fake.requests == []
