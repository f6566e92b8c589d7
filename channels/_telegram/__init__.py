"""The Telegram channel, on python-telegram-bot."""

from ._adapter import SECRET_HEADER, TelegramAdapter
from ._audience import USERNAME_UNKNOWN, BotIdentity
from ._call import map_error
from ._split import MAX_TEXT_LENGTH, split_text
from ._webhook import ALLOWED_UPDATES, set_webhook

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
