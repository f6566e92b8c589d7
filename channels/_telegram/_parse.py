"""One Telegram webhook body (a single Update) into normalized events."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from telegram import (
    Bot,
    CallbackQuery,
    Chat,
    ChatMemberUpdated,
    InlineKeyboardMarkup,
    Message,
    MessageReactionUpdated,
    ReactionType,
    ReactionTypeCustomEmoji,
    ReactionTypeEmoji,
    Update,
    User,
)

from .._errors import ChannelError
from .._json import load_json
from .._model import (
    InboundEvent,
    InboundMessage,
    InteractiveReply,
    MembershipEvent,
    MembershipState,
    ParseResult,
    SystemNotice,
)
from .._model import Reaction as ReactionModel
from ._audience import Audience, BotIdentity, wanted
from ._call import CHANNEL
from ._content import Content, message_content
from ._plain import plain_text

MIGRATE_TO = "migrate_to_chat_id"  # SystemNotice.type of a group's upgrade, in the old group
MIGRATE_FROM = "migrate_from_chat_id"  # ... and in the new supergroup
ANYONE = Audience(BotIdentity(None), groups="all", edited="new_turn")  # every message is wanted


@dataclass(frozen=True, slots=True)
class _Context:
    account: str
    update_id: int
    now: Callable[[], datetime]
    audience: Audience = ANYONE

    @property
    def dedup_key(self) -> str:
        return f"{CHANNEL}:{self.account}:{self.update_id}"

    def common(self) -> dict[str, Any]:
        return {"channel": CHANNEL, "account": self.account, "dedup_key": self.dedup_key}


def parse_update(
    body: bytes,
    account: str,
    bot: Bot,
    now: Callable[[], datetime],
    audience: Audience = ANYONE,
) -> ParseResult:
    """Parse one webhook body; anything malformed raises ChannelError and nothing else.

    A message the bot does not answer (``audience``: a command for another bot, group chatter
    not addressed to it, an edit with ``edited_messages = "ignore"``) is ignored: no event.
    """
    data = _load(body)
    update_id = data.get("update_id")
    if not isinstance(update_id, int) or isinstance(update_id, bool):
        raise ChannelError(CHANNEL, "update without an integer update_id")
    update_type = _update_type(data)
    handler = _HANDLERS.get(update_type)
    if handler is None:
        raise ChannelError(CHANNEL, unhandled_type(update_type))
    context = _Context(account, update_id, now, audience)
    plain = plain_text(data, context.common())
    if plain is not None:
        return ParseResult(events=(plain,))
    try:
        event = handler(Update.de_json(data, bot), context)
    except ChannelError:
        raise
    except Exception as exc:  # PTB and pydantic raise many types on bad shapes
        raise ChannelError(CHANNEL, f"{update_type}: {_describe(exc)}") from exc
    if event is None:
        return ParseResult(ignored=(update_type,))
    return ParseResult(events=(event,))


def unhandled_type(update_type: str) -> str:
    """Why an update of a type the parser does not handle is quarantined: Telegram sends such
    types only to a webhook set without ``gateway telegram set-webhook``'s allowed_updates."""
    shown = update_type if len(update_type) <= 64 else update_type[:63] + "…"
    return (
        f"update type {shown!r} is not handled (set the webhook with "
        "`gateway telegram set-webhook` to receive only the handled types)"
    )


def _describe(exc: Exception) -> str:
    # Name fields, not values: reasons are logged, and values may be a user's words.
    if isinstance(exc, ValidationError):
        fields = sorted({".".join(str(part) for part in error["loc"]) for error in exc.errors()})
        return f"invalid {', '.join(fields)}"
    if isinstance(exc, KeyError):
        return f"missing field {exc.args[0]!r}" if exc.args else "missing field"
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def _load(body: bytes) -> dict[str, Any]:
    try:
        data = load_json(body)
    except (ValueError, RecursionError) as exc:
        raise ChannelError(CHANNEL, f"body is not JSON: {type(exc).__name__}") from exc
    if not isinstance(data, dict):
        raise ChannelError(CHANNEL, f"body is a JSON {type(data).__name__}, not an object")
    return data


def _update_type(data: dict[str, Any]) -> str:
    present = [key for key in data if key != "update_id"]
    if not present:
        raise ChannelError(CHANNEL, "update without a type")
    handled = [key for key in present if key in _HANDLERS]
    return handled[0] if handled else present[0]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _id(value: object, what: str) -> str:
    if not _is_int(value):
        raise ChannelError(CHANNEL, f"{what} is not an integer")
    return str(value)


def _required(value: Any, what: str) -> Any:
    if value is None:
        raise ChannelError(CHANNEL, f"{what} is missing")
    return value


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _message(update: Update, context: _Context) -> InboundMessage | None:
    edited = update.edited_message or update.edited_channel_post
    message: Message = _required(edited or update.message or update.channel_post, "message")
    chat: Chat = _required(message.chat, "message.chat")
    if edited and context.audience.edited == "ignore":
        return None
    notice = _migration(message)
    if notice is None and not wanted(message, context.audience):
        return None  # a migration notice is for every member, addressed or not
    message_id = _id(message.message_id, "message.message_id")
    sender_id, sender_name = _sender(message, chat)
    content = message_content(message) if notice is None else Content("system", system=notice)
    reply = message.reply_to_message
    moment = message.edit_date if edited and message.edit_date else message.date
    return InboundMessage(
        **context.common(),
        chat_id=_id(chat.id, "chat.id"),
        sender_id=sender_id,
        sender_name=sender_name,
        message_id=message_id,
        timestamp=_aware(_required(moment, "message.date")),
        kind="edited" if edited else content.kind,
        text=content.text,
        command=content.command,
        media=content.media,
        location=content.location,
        contacts=content.contacts,
        reply_to=_id(reply.message_id, "reply_to_message.message_id") if reply else None,
        thread_id=_topic(message),
        edited_message_id=message_id if edited else None,
        platform_type=content.platform_type,
        system=content.system,
        media_group=message.media_group_id,
    )


def _migration(message: Message) -> SystemNotice | None:
    """The service message of a group upgraded to a supergroup: the old group's names the new
    chat (where its replies go from now on), the new supergroup's the old group."""
    if message.migrate_to_chat_id is not None:
        new_chat = _id(message.migrate_to_chat_id, "message.migrate_to_chat_id")
        body = f"this group became the supergroup {new_chat}"
        return SystemNotice(type=MIGRATE_TO, body=body, new_user_id=new_chat)
    if message.migrate_from_chat_id is not None:
        old_chat = _id(message.migrate_from_chat_id, "message.migrate_from_chat_id")
        return SystemNotice(type=MIGRATE_FROM, body=f"this supergroup was the group {old_chat}")
    return None


def _topic(message: Message) -> str | None:
    """The forum topic a message was posted in (None outside forums: General has no id)."""
    if not message.is_topic_message or message.message_thread_id is None:
        return None
    return _id(message.message_thread_id, "message.message_thread_id")


def _sender(message: Message, chat: Chat) -> tuple[str, str | None]:
    # Channel posts and anonymous admins speak as a chat; `from` then holds a placeholder user.
    if message.sender_chat is not None:
        speaker = message.sender_chat
        return _id(speaker.id, "sender_chat.id"), speaker.title or speaker.username
    if message.from_user is not None:
        return _user(message.from_user)
    return _id(chat.id, "chat.id"), chat.title or chat.username


def _user(user: User) -> tuple[str, str | None]:
    return _id(user.id, "from.id"), user.full_name or None


def _callback(update: Update, context: _Context) -> InboundMessage:
    query: CallbackQuery = _required(update.callback_query, "callback_query")
    sender_id, sender_name = _user(_required(query.from_user, "callback_query.from"))
    origin = query.message
    chat_id = _id(origin.chat.id, "chat.id") if origin is not None else sender_id
    base = {
        **context.common(),
        "chat_id": chat_id,
        "sender_id": sender_id,
        "sender_name": sender_name,
        "message_id": _string(query.id, "callback_query.id"),
        "callback_query_id": query.id,
        "timestamp": context.now(),
        "reply_to": _id(origin.message_id, "message.message_id") if origin is not None else None,
        # The keyboard's message sits in a forum topic: the answer goes there, not to General.
        "thread_id": _topic(origin) if isinstance(origin, Message) else None,
    }
    if query.data is None:  # a game button: nothing the agents can answer
        return InboundMessage(**base, kind="unsupported", platform_type="callback_query")
    title = _button_title(origin, query.data)
    choice = InteractiveReply(id=query.data, title=title)
    return InboundMessage(**base, kind="interactive", interactive=choice)


def _string(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise ChannelError(CHANNEL, f"{what} is not a string")
    return value


def _button_title(origin: object, data: str) -> str | None:
    if not isinstance(origin, Message) or not isinstance(origin.reply_markup, InlineKeyboardMarkup):
        return None
    for row in origin.reply_markup.inline_keyboard:
        for button in row:
            if button.callback_data == data:
                return button.text
    return None


def _membership(update: Update, context: _Context) -> MembershipEvent | None:
    change: ChatMemberUpdated = _required(update.my_chat_member, "my_chat_member")
    old, new = change.old_chat_member.status, change.new_chat_member.status
    state: MembershipState
    if new == "kicked":
        state = "blocked"
    elif new == "member" and old == "kicked":
        state = "unblocked"
    else:
        return None  # joined or left a group, promoted...: not a block
    return MembershipEvent(
        **context.common(),
        chat_id=_id(change.chat.id, "chat.id"),
        sender_id=_user(change.from_user)[0],
        timestamp=_aware(change.date),
        state=state,
    )


def _reaction(update: Update, context: _Context) -> InboundMessage:
    change: MessageReactionUpdated = _required(update.message_reaction, "message_reaction")
    chat_id = _id(change.chat.id, "chat.id")
    if change.user is not None:
        sender_id, sender_name = _user(change.user)
    else:
        actor = change.actor_chat or change.chat
        sender_id, sender_name = _id(actor.id, "actor_chat.id"), actor.title
    target = _id(change.message_id, "message_reaction.message_id")
    return InboundMessage(
        **context.common(),
        chat_id=chat_id,
        sender_id=sender_id,
        sender_name=sender_name,
        message_id=f"update:{context.update_id}",
        timestamp=_aware(change.date),
        kind="reaction",
        reaction=ReactionModel(message_id=target, emoji=_first_emoji(change.new_reaction)),
    )


def _first_emoji(reactions: tuple[ReactionType, ...]) -> str | None:
    if not reactions:
        return None
    first = reactions[0]
    if isinstance(first, ReactionTypeEmoji):
        return first.emoji
    if isinstance(first, ReactionTypeCustomEmoji):
        return first.custom_emoji_id
    return "\u2b50"  # a paid reaction: clients show a star


_Handler = Callable[[Update, _Context], InboundEvent | None]
_HANDLERS: dict[str, _Handler] = {
    "message": _message,
    "edited_message": _message,
    "channel_post": _message,
    "edited_channel_post": _message,
    "callback_query": _callback,
    "my_chat_member": _membership,
    "message_reaction": _reaction,
}

HANDLED_UPDATES: tuple[str, ...] = tuple(_HANDLERS)
