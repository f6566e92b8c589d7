"""The commonest update, a plain text in a private chat, read without PTB's objects.

Building PTB's ``Update`` costs about six times the rest of a parse (its frozen objects set
each attribute through a check), and most of a support desk's updates are this one shape. Only
an update with nothing else in it takes this path: any other key, any entity (a command, a
link), a group, a reply or a value of another type goes to PTB's path, which therefore decides
every error. The two paths give the same event (tests/channels/test_telegram_plain.py).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from .._model import InboundMessage

_MESSAGE_KEYS = frozenset({"message_id", "from", "chat", "date", "text"})


def plain_text(data: dict[str, Any], common: dict[str, Any]) -> InboundMessage | None:
    """The event of a private chat's text message with no entities, or None for any other
    update (PTB's path reads it). ``common``: the channel, account and dedup key."""
    message = data.get("message")
    if len(data) != 2 or not isinstance(message, dict) or message.keys() != _MESSAGE_KEYS:
        return None
    chat, user, text = message["chat"], message["from"], message["text"]
    if not (isinstance(chat, dict) and isinstance(user, dict) and isinstance(text, str)):
        return None
    message_id, chat_id, user_id = message["message_id"], chat.get("id"), user.get("id")
    numbers = (message_id, chat_id, user_id, message["date"])
    if chat.get("type") != "private" or not _all_ints(*numbers):
        return None
    first, last, moment = user.get("first_name"), user.get("last_name"), _moment(message["date"])
    if not isinstance(first, str) or not isinstance(last, str | None) or moment is None:
        return None
    return InboundMessage(
        **common,
        chat_id=str(chat_id),
        sender_id=str(user_id),
        sender_name=_full_name(first, last),
        message_id=str(message_id),
        timestamp=moment,
        kind="text",
        text=text,
    )


def _all_ints(*values: object) -> bool:
    return all(type(value) is int for value in values)  # a bool goes to PTB's path, which decides


def _full_name(first: str, last: str | None) -> str | None:
    """PTB's ``User.full_name``, as PTB's path names the sender (None without a first name)."""
    if not first:
        return None
    return f"{first} {last}" if last else first


def _moment(date: int) -> datetime | None:
    try:
        return datetime.fromtimestamp(date, UTC)
    except (OverflowError, OSError, ValueError):  # out of range: PTB's path says so
        return None
