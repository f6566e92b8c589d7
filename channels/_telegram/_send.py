"""An OutboundMessage as the Bot API calls that deliver it, validated before any is made."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup, Message, ReplyParameters

from .._errors import PermanentSendError
from .._model import Button, OutboundMedia, OutboundMessage
from ._call import CHANNEL
from ._split import MAX_CAPTION_LENGTH, split_text, utf16_length

MAX_CALLBACK_DATA_BYTES = 64
# file_ids are URL-safe base64. Anything else could be a local path, which PTB would upload.
_FILE_ID = re.compile(r"^[A-Za-z0-9_-]{1,512}$")
_MESSAGE_ID = re.compile(r"^[0-9]{1,19}$")

Call = Callable[[Bot], Awaitable[Message]]


@dataclass(frozen=True, slots=True)
class _Extras:
    """Reply parameters go on the first message of a split reply, the keyboard on the last."""

    reply: ReplyParameters | None = None
    markup: InlineKeyboardMarkup | None = None
    thread: int | None = None  # the forum topic every part goes to


def plan(message: OutboundMessage) -> list[Call]:
    """The calls that send ``message``, in order; PermanentSendError if it cannot be sent."""
    chunks = split_text(_sticker_caption(message.media)) + split_text(message.text or "")
    if message.media is None and not chunks:
        raise PermanentSendError(CHANNEL, "nothing to send: no text and no media")
    reply = _reply_parameters(message.reply_to)
    markup = _keyboard(message.buttons)
    senders = [_media_call(message.chat_id, message.media)] if message.media else []
    senders += [_text_call(message.chat_id, chunk) for chunk in chunks]
    last = len(senders) - 1
    thread = _thread(message.thread_id)
    return [
        send(_Extras(reply if i == 0 else None, markup if i == last else None, thread))
        for i, send in enumerate(senders)
    ]


def _thread(thread_id: str | None) -> int | None:
    if thread_id is None:
        return None
    if not _MESSAGE_ID.match(thread_id):
        raise PermanentSendError(CHANNEL, f"thread_id {thread_id!r} is not a Telegram topic id")
    return int(thread_id)


def _sticker_caption(media: OutboundMedia | None) -> str:
    # Telegram stickers take no caption: it goes out as text after the sticker instead.
    return (media.caption or "") if media is not None and media.kind == "sticker" else ""


def _reply_parameters(reply_to: str | None) -> ReplyParameters | None:
    if reply_to is None:
        return None
    if not _MESSAGE_ID.match(reply_to):
        raise PermanentSendError(CHANNEL, f"reply_to {reply_to!r} is not a Telegram message id")
    return ReplyParameters(message_id=int(reply_to), allow_sending_without_reply=True)


def _keyboard(buttons: tuple[Button, ...]) -> InlineKeyboardMarkup | None:
    if not buttons:
        return None
    for button in buttons:
        if len(button.id.encode()) > MAX_CALLBACK_DATA_BYTES:
            raise PermanentSendError(
                CHANNEL, f"button id longer than {MAX_CALLBACK_DATA_BYTES} bytes: {button.id!r}"
            )
    rows = [[InlineKeyboardButton(b.title, callback_data=b.id)] for b in buttons]
    return InlineKeyboardMarkup(rows)


def _text_call(chat_id: str, text: str) -> Callable[[_Extras], Call]:
    def bind(extras: _Extras) -> Call:
        async def call(bot: Bot) -> Message:
            return await bot.send_message(chat_id, text, **_placement(extras))

        return call

    return bind


def _media_call(chat_id: str, media: OutboundMedia) -> Callable[[_Extras], Call]:
    file = _file_reference(media)
    caption = media.caption if media.kind != "sticker" else None
    if caption is not None and utf16_length(caption) > MAX_CAPTION_LENGTH:
        raise PermanentSendError(CHANNEL, f"caption longer than {MAX_CAPTION_LENGTH} characters")
    send = _MEDIA_SENDERS[media.kind]

    def bind(extras: _Extras) -> Call:
        async def call(bot: Bot) -> Message:
            return await send(bot, chat_id, file, caption, extras)

        return call

    return bind


def _file_reference(media: OutboundMedia) -> str:
    if media.id is not None:
        if not _FILE_ID.match(media.id):
            raise PermanentSendError(CHANNEL, "media id is not a Telegram file_id")
        return media.id
    if media.url is not None:
        if urlsplit(media.url).scheme not in ("http", "https"):
            raise PermanentSendError(CHANNEL, "media url must be http or https")
        return media.url
    raise PermanentSendError(CHANNEL, "media has neither an id nor a url")


def _placement(x: _Extras) -> dict[str, Any]:
    """Where a message goes and what it carries besides its content; the same for every kind."""
    return {"reply_parameters": x.reply, "reply_markup": x.markup, "message_thread_id": x.thread}


async def _photo(bot: Bot, chat: str, file: str, caption: str | None, x: _Extras) -> Message:
    return await bot.send_photo(chat, file, caption=caption, **_placement(x))


async def _audio(bot: Bot, chat: str, file: str, caption: str | None, x: _Extras) -> Message:
    return await bot.send_audio(chat, file, caption=caption, **_placement(x))


async def _video(bot: Bot, chat: str, file: str, caption: str | None, x: _Extras) -> Message:
    return await bot.send_video(chat, file, caption=caption, **_placement(x))


async def _document(bot: Bot, chat: str, file: str, caption: str | None, x: _Extras) -> Message:
    return await bot.send_document(chat, file, caption=caption, **_placement(x))


async def _sticker(bot: Bot, chat: str, file: str, caption: str | None, x: _Extras) -> Message:
    return await bot.send_sticker(chat, file, **_placement(x))


_MEDIA_SENDERS: dict[str, Callable[[Bot, str, str, str | None, _Extras], Awaitable[Message]]] = {
    "image": _photo,
    "audio": _audio,
    "video": _video,
    "document": _document,
    "sticker": _sticker,
}
