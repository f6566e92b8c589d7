"""Registering a bot's webhook with Telegram (the CLI's ``telegram set-webhook``)."""

from __future__ import annotations

from .._config import TelegramBotConfig
from ._bots import build_bot
from ._call import call_api
from ._parse import HANDLED_UPDATES
from ._redact import TokenRedactor

# Only what the parser handles; message_reaction is never sent unless listed explicitly.
ALLOWED_UPDATES: tuple[str, ...] = HANDLED_UPDATES


async def set_webhook(
    bot: TelegramBotConfig, url: str, api_base_url: str, *, request_timeout: float = 15.0
) -> None:
    """Point the bot's webhook at ``url`` with its secret_token and ALLOWED_UPDATES."""
    # PTB logs every call's parameters at DEBUG, the webhook secret among them.
    redactor = TokenRedactor([bot.token.get_secret_value(), bot.secret_token.get_secret_value()])
    redactor.install()
    try:
        handle = build_bot(bot, api_base_url, request_timeout)
        await handle.request.initialize()
        try:
            await call_api(
                handle.bot,
                lambda b: b.set_webhook(
                    url=url,
                    secret_token=bot.secret_token.get_secret_value(),
                    allowed_updates=list(ALLOWED_UPDATES),
                ),
                (handle.token,),
            )
        finally:
            await handle.request.shutdown()
    finally:
        redactor.uninstall()
