"""A PTB Bot per configured bot, pointed at the configured API server."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from functools import cache

import httpx
from telegram import Bot
from telegram.request import HTTPXRequest

from .._config import TelegramBotConfig


@dataclass(frozen=True, slots=True)
class BotHandle:
    """One configured bot: its PTB Bot, the request object it owns, its webhook secret."""

    name: str
    bot: Bot
    request: HTTPXRequest
    secret: bytes
    token: str


def build_bot(config: TelegramBotConfig, api_base_url: str, timeout: float) -> BotHandle:
    """Build (without any network call) the Bot for one configured bot."""
    base = api_base_url.rstrip("/")
    token = config.token.get_secret_value()
    request = HTTPXRequest(
        read_timeout=timeout,
        write_timeout=timeout,
        connect_timeout=timeout,
        pool_timeout=timeout,
        media_write_timeout=timeout,
        httpx_kwargs={"verify": _tls_context()},
    )
    # PTB appends the token to both base URLs: {base}/bot{token}/{method}.
    bot = Bot(
        token,
        base_url=f"{base}/bot",
        base_file_url=f"{base}/file/bot",
        request=request,
        get_updates_request=request,  # never polled; one client to close
    )
    secret = config.secret_token.get_secret_value().encode()
    return BotHandle(config.name, bot, request, secret, token)


@cache
def _tls_context() -> ssl.SSLContext:
    # Loading the CA bundle costs ~30 ms per client; the context is immutable once built, so
    # every bot's client shares one (it holds no connection).
    return httpx.create_ssl_context()
