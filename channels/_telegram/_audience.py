"""Whom a Telegram message is for: the bot's identity and its policy for groups and edits."""

from __future__ import annotations

from dataclasses import dataclass, replace

from telegram import Message, MessageEntity

from .._errors import ChannelError
from ._call import CHANNEL

GROUP_CHATS = frozenset({"group", "supergroup"})
# The quarantine reason of a message whose addressee cannot be told yet: the gateway replays
# the deliveries quarantined so once every bot's getMe has answered.
USERNAME_UNKNOWN = (
    "whether the message is for the bot depends on its username, which getMe has not given"
    " yet; replayed once it has"
)


@dataclass(frozen=True, slots=True)
class BotIdentity:
    """Who the bot is (``getMe``); the id is also the number before the token's colon."""

    id: int | None
    username: str | None = None


@dataclass(frozen=True, slots=True)
class Audience:
    """One bot's identity plus its ``groups`` and ``edited_messages`` policies."""

    identity: BotIdentity
    groups: str = "addressed"  # or "all"
    edited: str = "ignore"  # or "new_turn"

    def knowing(self, identity: BotIdentity) -> Audience:
        return replace(self, identity=identity)


def id_of_token(token: str) -> int | None:
    """The bot's user id as the token spells it (``123456:ABC…`` → 123456)."""
    head = token.split(":", 1)[0]
    return int(head) if head.isdecimal() else None


def wanted(message: Message, audience: Audience) -> bool:
    """Whether the bot answers ``message``: never a command for another bot; in groups and
    supergroups with ``groups = "addressed"`` only what is addressed to it.

    While the bot's username is unknown (getMe has not answered), a message whose answer
    depends on it (``/cmd@name``, or an ``@mention`` in a group) raises ChannelError with
    ``USERNAME_UNKNOWN``: quarantined and replayed later, rather than dropped as not the bot's.
    """
    me = audience.identity
    target = command_target(message)
    if target is not None and not _is_me(target, me):
        return _undecided() if me.username is None else False
    if message.chat.type not in GROUP_CHATS or audience.groups == "all":
        return True
    if addressed(message, me):
        return True
    return _undecided() if me.username is None and _has_mention(message) else False


def _undecided() -> bool:
    raise ChannelError(CHANNEL, USERNAME_UNKNOWN)


def addressed(message: Message, me: BotIdentity) -> bool:
    """A command, a mention of the bot, or a reply to one of its messages."""
    if command_target(message) is not None or _leading_command(message) is not None:
        return True  # a bare /cmd, or /cmd@us (one for another bot was refused before)
    return _mentions(message, me) or _replies_to(message, me)


def command_target(message: Message) -> str | None:
    """``name`` of a leading ``/cmd@name``; None for a bare ``/cmd`` or no command."""
    word = _leading_command(message)
    if word is None or "@" not in word:
        return None
    return word.split("@", 1)[1]


def _leading_command(message: Message) -> str | None:
    for entity in message.entities:
        if entity.type == MessageEntity.BOT_COMMAND and entity.offset == 0:
            return message.parse_entity(entity)
    return None


def _is_me(username: str, me: BotIdentity) -> bool:
    # Usernames are case-insensitive; an unknown own name (getMe failed) matches nothing.
    return me.username is not None and username.casefold() == me.username.casefold()


def _mentions(message: Message, me: BotIdentity) -> bool:
    entities = message.parse_entities() if message.text else message.parse_caption_entities()
    for entity, word in entities.items():
        if entity.type == MessageEntity.MENTION and _is_me(word.removeprefix("@"), me):
            return True
        user = entity.user
        if entity.type == MessageEntity.TEXT_MENTION and user is not None and user.id == me.id:
            return True
    return False


def _has_mention(message: Message) -> bool:
    entities = message.entities if message.text else message.caption_entities
    return any(entity.type == MessageEntity.MENTION for entity in entities)


def _replies_to(message: Message, me: BotIdentity) -> bool:
    original = message.reply_to_message
    author = original.from_user if original is not None else None
    return author is not None and me.id is not None and author.id == me.id
