"""Registering a bot's webhook with Telegram (the CLI's ``telegram set-webhook``)."""

from __future__ import annotations

from collections.abc import Iterable

from .. import _errors as errors
from .._config import TelegramBotConfig
from ._bots import build_bot
from ._call import CHANNEL, call_api
from ._parse import HANDLED_UPDATES
from ._ptb_log import parse_errors_unlogged
from ._redact import TokenRedactor, scrub

# Only what the parser handles; message_reaction is never sent unless listed explicitly.
ALLOWED_UPDATES: tuple[str, ...] = HANDLED_UPDATES


async def set_webhook(
    bot: TelegramBotConfig,
    url: str,
    api_base_url: str,
    *,
    request_timeout: float = 15.0,
    redact: Iterable[str] = (),
) -> None:
    """Point the bot's webhook at ``url`` with its secret_token and ALLOWED_UPDATES.

    Any failure is a ChannelError (a SendError when the Bot API refused) without the bot's
    token, its secret_token or any of ``redact`` (the caller's other secrets): a description or
    a proxy's page may echo the request back, and the command prints the error.
    """
    secrets = (bot.token.get_secret_value(), bot.secret_token.get_secret_value(), *redact)
    secrets = tuple(secret for secret in secrets if secret)
    # PTB logs every call's parameters at DEBUG, the webhook secret among them.
    redactor = TokenRedactor(secrets)
    redactor.install()
    try:
        handle = build_bot(bot, api_base_url, request_timeout)
        await handle.request.initialize()
        try:
            with parse_errors_unlogged():
                await call_api(
                    handle.bot,
                    lambda b: b.set_webhook(
                        url=url,
                        secret_token=bot.secret_token.get_secret_value(),
                        allowed_updates=list(ALLOWED_UPDATES),
                    ),
                    secrets,
                )
        finally:
            await handle.request.shutdown()
    except errors.ChannelError:
        raise  # call_api built it from a scrubbed description
    except Exception as exc:  # not chained: the cause's text or traceback may hold a secret
        raise errors.ChannelError(CHANNEL, scrub(f"{type(exc).__name__}: {exc}", secrets)) from None
    finally:
        redactor.uninstall()
