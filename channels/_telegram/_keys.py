"""The dedup key of one Update, cheaply: ``json.loads`` and a few lookups, no PTB objects.

It mirrors ``_parse``'s decisions: a chat-member change that is not a block has no key; a body
the parser would refuse, an update type it does not handle included, raises ChannelError (the
delivery is quarantined whole, to be replayed by a release that handles it). A message
the bot does not answer (group chatter not addressed to it, a command for another bot, an edit
under ``edited_messages = "ignore"``) still has its key: it is claimed like any other, so a
retried delivery of it is dropped at the door, and the parser then gives it no event. An update
that passes here but fails PTB's deeper validation still claims its key; the intake then
quarantines it with the reason.
"""

from __future__ import annotations

from typing import Any

from .._errors import ChannelError
from ._call import CHANNEL
from ._parse import HANDLED_UPDATES, _load, unhandled_type

_MESSAGES = frozenset({"message", "edited_message", "channel_post", "edited_channel_post"})


def update_keys(body: bytes, account: str) -> list[str]:
    """``["telegram:<bot>:<update_id>"]`` when the parser would give an event, else ``[]``."""
    data = _load(body)
    update_id = data.get("update_id")
    if not isinstance(update_id, int) or isinstance(update_id, bool):
        raise ChannelError(CHANNEL, "update without an integer update_id")
    kind = _update_type(data)
    if kind not in HANDLED_UPDATES:
        raise ChannelError(CHANNEL, unhandled_type(kind))
    payload = data[kind]
    if not isinstance(payload, dict):
        raise ChannelError(CHANNEL, f"{kind} is not an object")
    if kind in _MESSAGES:
        _check_message(payload, kind)
    elif kind == "my_chat_member" and not _is_block_change(payload):
        return []
    return [f"{CHANNEL}:{account}:{update_id}"]


def _update_type(data: dict[str, Any]) -> str:
    present = [key for key in data if key != "update_id"]
    if not present:
        raise ChannelError(CHANNEL, "update without a type")
    return next((key for key in present if key in HANDLED_UPDATES), present[0])


def _check_message(message: dict[str, Any], kind: str) -> None:
    chat = message.get("chat")
    if not isinstance(chat, dict) or not _is_int(chat.get("id")):
        raise ChannelError(CHANNEL, f"{kind}.chat.id is not an integer")
    if not _is_int(message.get("message_id")):
        raise ChannelError(CHANNEL, f"{kind}.message_id is not an integer")


def _is_block_change(change: dict[str, Any]) -> bool:
    new = _status(change.get("new_chat_member"))
    if new == "kicked":  # a block whatever the old status says, as the parser decides
        return True
    return new == "member" and _status(change.get("old_chat_member")) == "kicked"


def _status(member: object) -> str:
    status = member.get("status") if isinstance(member, dict) else None
    if not isinstance(status, str):
        raise ChannelError(CHANNEL, "my_chat_member without old and new member statuses")
    return status


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
