"""``gateway telegram set-webhook`` prints no secret, whatever the Bot API (or a proxy in front
of it) echoes back in its error (docs/security.md, "Secrets")."""

from __future__ import annotations

import argparse
import io
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from pytest_aiohttp import AiohttpServer

from tests.channels.telegram_fakes import (
    OTHER_SECRET,
    OTHER_TOKEN,
    SECRET,
    TOKEN,
    FakeBotApi,
    Recorded,
    config,
    error,
)
from webhook_bot_gateway.channels import ChannelError
from webhook_bot_gateway.channels._telegram import _webhook
from webhook_bot_gateway.channels.telegram import set_webhook
from webhook_bot_gateway.gateway._cli._commands import telegram_command
from webhook_bot_gateway.gateway.config import Settings

URL = "https://gateway.example.com/webhooks/telegram/support"
ADMIN_TOKEN = "admin-token-echoed-back"
APP_SECRET = "whatsapp-app-secret-echoed"


@pytest.fixture
async def fake() -> AsyncIterator[FakeBotApi]:
    api = FakeBotApi()
    yield api
    api.release.set()


@pytest.fixture
async def base_url(fake: FakeBotApi, aiohttp_server: AiohttpServer) -> str:
    server: TestServer = await aiohttp_server(fake.app())
    return str(server.make_url("")).rstrip("/")


def secrets_of_everything() -> list[str]:
    return [TOKEN, SECRET, OTHER_TOKEN, OTHER_SECRET, ADMIN_TOKEN, APP_SECRET]


def echo_everything(status: int) -> web.StreamResponse:
    """A (JSON) error whose description echoes the request, secret_token included, and more."""
    description = "Bad Request: rejected " + " ".join(secrets_of_everything())
    return web.json_response(
        {"ok": False, "error_code": status, "description": description}, status=status
    )


async def echo(request: web.Request, call: Recorded) -> web.StreamResponse:
    assert call.fields["secret_token"] == SECRET
    return echo_everything(400)


async def test_set_webhook_scrubs_the_token_and_the_secret_token_from_its_error(
    fake: FakeBotApi, base_url: str
) -> None:
    fake.script("setWebhook", error(400, f"Bad Request: secret_token {SECRET} is not allowed"))
    with pytest.raises(ChannelError) as caught:
        await set_webhook(config().bots[0], URL, base_url)
    assert "is not allowed" in str(caught.value)
    assert SECRET not in str(caught.value)
    assert SECRET.lower() not in str(caught.value).lower()


async def test_set_webhook_scrubs_the_extra_secrets_it_is_given(
    fake: FakeBotApi, base_url: str
) -> None:
    fake.script("setWebhook", echo)
    with pytest.raises(ChannelError) as caught:
        await set_webhook(config().bots[0], URL, base_url, redact=secrets_of_everything())
    text = str(caught.value)
    assert "rejected" in text.lower()
    for secret in secrets_of_everything():
        assert secret.lower() not in text.lower()


async def test_the_command_prints_no_configured_secret(fake: FakeBotApi, base_url: str) -> None:
    settings = Settings.model_validate(
        {
            "admin": {"token": ADMIN_TOKEN},
            "whatsapp": {"app_secret": APP_SECRET},
            "telegram": {
                "api_base_url": base_url,
                "bots": [
                    {"name": "support", "token": TOKEN, "secret_token": SECRET},
                    {"name": "sales", "token": OTHER_TOKEN, "secret_token": OTHER_SECRET},
                ],
            },
        }
    )
    fake.script("setWebhook", echo)
    args = argparse.Namespace(bot="support", url=URL, action="set-webhook")
    with pytest.raises(ChannelError) as caught:
        await telegram_command(settings, args, io.StringIO())
    text = str(caught.value)
    assert "rejected" in text.lower()
    for secret in secrets_of_everything():
        assert secret.lower() not in text.lower()


async def test_an_unexpected_failure_is_a_channel_error_without_the_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError(f"cannot build a bot for {TOKEN} with {SECRET}")

    monkeypatch.setattr(_webhook, "build_bot", broken)
    with pytest.raises(ChannelError) as caught:
        await set_webhook(config().bots[0], URL, "http://127.0.0.1:9")
    assert "RuntimeError: cannot build a bot" in str(caught.value)
    assert TOKEN not in str(caught.value)
    assert SECRET not in str(caught.value)
