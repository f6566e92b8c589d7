"""The channels' context: each Telegram bot learns who it is (getMe) at start, and later when
that failed, without a restart; the sandbox's own fake Bot API is asked once the server
listens."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from pytest_aiohttp import AiohttpServer

from tests.channels import telegram_fakes as tg
from tests.e2e.gateway_proc import free_port
from webhook_bot_gateway.channels import TelegramAdapter
from webhook_bot_gateway.channels._telegram import _identify
from webhook_bot_gateway.channels.telegram import BotIdentity
from webhook_bot_gateway.gateway._channels_ctx import served_here
from webhook_bot_gateway.gateway._keys import ADAPTERS
from webhook_bot_gateway.gateway.app import build_app
from webhook_bot_gateway.gateway.config import ServerConfig

from .ingest_helpers import settings

TASK = "telegram-identify"

bot_api = tg.bot_api  # the fixture: a FakeBotApi on loopback and its url


def identify_task() -> asyncio.Task[Any] | None:
    return next((t for t in asyncio.all_tasks() if t.get_name() == TASK and not t.done()), None)


async def identified() -> None:
    """Until the background getMe is done (the task ends once every bot is known)."""
    task = identify_task()
    assert task is not None, "no background getMe"
    async with asyncio.timeout(10):
        await task


def telegram_of(app: Any) -> TelegramAdapter:
    adapter = app[ADAPTERS]["telegram"]
    assert isinstance(adapter, TelegramAdapter)
    return adapter


async def test_a_get_me_that_failed_at_start_is_asked_again_in_the_background(
    aiohttp_client: Any,
    bot_api: tuple[tg.FakeBotApi, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The network was down at boot: the bots became deaf to @mentions until a restart."""
    fake, url = bot_api
    back = asyncio.Event()  # the Bot API answers again once the test says so

    async def later(request: web.Request, call: tg.Recorded) -> web.StreamResponse:
        await back.wait()
        return tg.ok(tg.BOT_USER)

    down = tg.error(502, "Bad Gateway")
    fake.script("getMe", down, down, later, later)
    monkeypatch.setattr(_identify, "RETRY_DELAYS", (0.0,))  # no pause in a test
    app = build_app(settings(tmp_path / "gateway.db", telegram={"api_base_url": url}))
    with caplog.at_level(logging.WARNING, logger="channels.telegram"):
        client = await aiohttp_client(app)  # serving: the start did not wait for the retry
        telegram = telegram_of(client.app)
        assert telegram.identity("support").username is None
        back.set()
        await identified()
    assert telegram.identity("support") == BotIdentity(7000000001, "gw_bot")
    assert telegram.identity("sales") == BotIdentity(7000000001, "gw_bot")
    assert fake.methods() == ["getMe"] * 4  # at start, then once more each
    assert caplog.text.count("getMe failed") == 2
    assert "asked again in the background" in caplog.text


async def test_the_background_get_me_ends_with_the_application(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    """A Bot API that never answers: the retry runs until the application stops, not after."""
    app = build_app(settings(tmp_path / "gateway.db"), ingest_only=True)  # 127.0.0.1:9
    client = await aiohttp_client(app)
    task = identify_task()
    assert task is not None
    await client.close()
    assert task.cancelled()
    assert identify_task() is None


async def test_the_sandbox_bot_api_is_asked_once_the_server_listens(
    aiohttp_server: AiohttpServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The sandbox's fake Bot API is this server: a getMe before it listens could not connect,
    so every sandbox start logged "getMe failed" and ignored /start@<bot> in groups."""
    port = free_port()
    config = settings(
        tmp_path / "gateway.db",
        server={"port": port},
        sandbox={"enabled": True},
        telegram={"api_base_url": "/sandbox/telegram"},
    )
    assert config.telegram.api_base_url == f"http://127.0.0.1:{port}/sandbox/telegram"
    app = build_app(config, ingest_only=True)
    with caplog.at_level(logging.INFO, logger="channels.telegram"):
        await aiohttp_server(app, port=port)
        await identified()
    assert telegram_of(app).identity("support").username == "support_bot"
    assert telegram_of(app).identity("sales").username == "sales_bot"
    assert "getMe failed" not in caplog.text
    assert "bot support: getMe answered: @support_bot" in caplog.text


@pytest.mark.parametrize(
    ("url", "host", "here"),
    [
        ("http://127.0.0.1:8080/sandbox/telegram", "127.0.0.1", ("127.0.0.1", 8080)),
        ("http://127.0.0.1:8080/sandbox/telegram", "0.0.0.0", ("127.0.0.1", 8080)),
        ("http://[::1]:8080/sandbox/telegram", "::1", ("::1", 8080)),
        ("http://localhost:8080/x", "localhost", ("localhost", 8080)),
        ("http://127.0.0.1:8081/sandbox/telegram", "127.0.0.1", None),
        ("http://10.0.0.5:8080/x", "0.0.0.0", None),
        ("https://api.telegram.org", "127.0.0.1", None),
    ],
)
def test_served_here_knows_a_bot_api_of_this_very_server(
    url: str, host: str, here: tuple[str, int] | None
) -> None:
    assert served_here(url, ServerConfig(host=host, port=8080)) == here
