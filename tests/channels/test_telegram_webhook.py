"""set_webhook against the fake Bot API: url, secret_token and the update types parsed."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest
from aiohttp.test_utils import TestServer
from pytest_aiohttp import AiohttpServer

from tests.channels.telegram_fakes import SECRET, TOKEN, FakeBotApi, config, error, fixture_bytes
from webhook_bot_gateway.channels import PermanentSendError, RetryableSendError
from webhook_bot_gateway.channels._telegram._parse import HANDLED_UPDATES
from webhook_bot_gateway.channels.telegram import ALLOWED_UPDATES, set_webhook

URL = "https://gateway.example.com/webhooks/telegram/support"


@pytest.fixture
async def fake() -> AsyncIterator[FakeBotApi]:
    api = FakeBotApi()
    yield api
    api.release.set()


@pytest.fixture
async def base_url(fake: FakeBotApi, aiohttp_server: AiohttpServer) -> str:
    server: TestServer = await aiohttp_server(fake.app())
    return str(server.make_url("")).rstrip("/")


def test_allowed_updates_are_exactly_the_handled_ones() -> None:
    assert set(ALLOWED_UPDATES) == {
        "message",
        "edited_message",
        "channel_post",
        "edited_channel_post",
        "callback_query",
        "my_chat_member",
        "message_reaction",  # only delivered when listed explicitly
    }
    assert ALLOWED_UPDATES == HANDLED_UPDATES


async def test_set_webhook_sends_url_secret_and_allowed_updates(
    fake: FakeBotApi, base_url: str
) -> None:
    await set_webhook(config().bots[0], URL, base_url)

    [call] = fake.calls
    assert (call.method, call.token) == ("setWebhook", TOKEN)
    assert call.fields.keys() == {"url", "secret_token", "allowed_updates"}
    assert call.fields["url"] == URL
    assert call.fields["secret_token"] == SECRET
    assert call.json_field("allowed_updates") == list(ALLOWED_UPDATES)


async def test_set_webhook_refused_by_telegram_is_permanent_and_hides_the_token(
    fake: FakeBotApi, base_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    fake.script("setWebhook", error(400, "Bad Request: bad webhook: HTTPS url must be provided"))
    with pytest.raises(PermanentSendError, match="(?i)HTTPS url must be provided") as caught:
        await set_webhook(config().bots[0], "http://insecure", base_url)
    ours = "\n".join(r.getMessage() for r in caplog.records if not r.name.startswith("aiohttp"))
    secret_part = TOKEN.split(":")[1]
    assert secret_part not in str(caught.value)
    assert "HTTP Request: POST" in ours
    assert secret_part not in ours
    assert "Calling Bot API endpoint `setWebhook`" in ours  # PTB's DEBUG line with the parameters
    assert SECRET not in ours


async def test_set_webhook_unreachable_server_is_retryable(unused_tcp_port: int) -> None:
    with pytest.raises(RetryableSendError):
        await set_webhook(config().bots[0], URL, f"http://127.0.0.1:{unused_tcp_port}")


def test_fixture_update_types_outside_allowed_updates_are_the_ignored_ones() -> None:
    import json

    for name in ("23_chat_join_request.json", "24_poll_update.json"):
        kind = next(k for k in json.loads(fixture_bytes(name)) if k != "update_id")
        assert kind not in ALLOWED_UPDATES
