"""The Telegram channel's public names (implementation in ``channels._telegram``)."""

from ._telegram import (
    ALLOWED_UPDATES,
    MAX_TEXT_LENGTH,
    SECRET_HEADER,
    USERNAME_UNKNOWN,
    BotIdentity,
    TelegramAdapter,
    map_error,
    set_webhook,
    split_text,
)

__all__ = [
    "ALLOWED_UPDATES",
    "BotIdentity",
    "MAX_TEXT_LENGTH",
    "SECRET_HEADER",
    "TelegramAdapter",
    "USERNAME_UNKNOWN",
    "map_error",
    "set_webhook",
    "split_text",
]
