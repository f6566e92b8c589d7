"""Users who blocked the bot or cannot be reached: their sessions are marked and their replies
parked (kept, not sent) until they are back.

Telegram says both ways (``my_chat_member``: kicked, then member again). WhatsApp never says a
user is back: there the user's next message releases the parked replies.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook_bot_gateway.channels import SendError

BLOCKED = "blocked"  # session metadata: true while replies are parked
RELEASED_BY_WRITING = frozenset({"whatsapp"})  # channels with no "user is back" event
WHATSAPP_UNDELIVERABLE = 131026  # not on WhatsApp any more, old client, terms not accepted


def is_blocked(metadata: Mapping[str, Any]) -> bool:
    """Whether the session's replies are parked."""
    return metadata.get(BLOCKED) is True


def released_by_message(channel: str, metadata: Mapping[str, Any]) -> bool:
    """A message of the user releases the session (WhatsApp: no other sign exists)."""
    return is_blocked(metadata) and channel in RELEASED_BY_WRITING


# Telegram's 403 descriptions of a private chat that cannot take the bot's messages, and how
# the session's event names it. A group the bot was removed from is not parked: nothing would
# release it (the bot added again is a plain join, as in a new group).
_TELEGRAM_GONE = (
    ("blocked by the user", "blocked"),
    ("user is deactivated", "unreachable"),  # the account was deleted
)


def gone_reason(channel: str, error: SendError) -> str | None:
    """``unreachable`` or ``blocked`` when the platform refused a send because of the user."""
    if channel == "whatsapp" and error.error_code == WHATSAPP_UNDELIVERABLE:
        return "unreachable"
    if channel == "telegram" and error.status == 403:
        for words, reason in _TELEGRAM_GONE:
            if words in error.reason:
                return reason
    return None


def is_undeliverable(channel: str, code: int | None) -> bool:
    """A WhatsApp delivery status that failed because the user cannot be reached."""
    return channel == "whatsapp" and code == WHATSAPP_UNDELIVERABLE
