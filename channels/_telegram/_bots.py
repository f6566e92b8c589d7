"""A PTB Bot per configured bot, pointed at the configured API server."""

from __future__ import annotations

from dataclasses import dataclass

import aiohttp
from telegram import Bot

from .._config import TelegramBotConfig
from ._request import AiohttpRequest


@dataclass(frozen=True, slots=True)
class BotHandle:
    """One configured bot: its PTB Bot, the request object it owns, its webhook secret."""

    name: str
    bot: Bot
    request: AiohttpRequest
    secret: bytes
    token: str


def build_bot(
    config: TelegramBotConfig,
    api_base_url: str,
    timeout: float,
    session: aiohttp.ClientSession | None = None,
) -> BotHandle:
    """Build (without any network call) the Bot for one configured bot.

    With ``session`` (the gateway's shared one) its requests go through that session's pool;
    without, the request opens a session of its own on ``initialize()``.
    """
    base = api_base_url.rstrip("/")
    token = config.token.get_secret_value()
    request = AiohttpRequest(session, timeout=timeout, media_write_timeout=timeout)
    # PTB appends the token to both base URLs: {base}/bot{token}/{method}.
    bot = Bot(
        token,
        base_url=f"{base}/bot",
        base_file_url=f"{base}/file/bot",
        request=request,
        get_updates_request=request,  # never polled; one request object to close
    )
    secret = config.secret_token.get_secret_value().encode()
    return BotHandle(config.name, bot, request, secret, token)
