"""What a Telegram message carries, as one of the normalized kinds."""

from __future__ import annotations

import mimetypes
from dataclasses import dataclass
from functools import cache
from pathlib import PurePosixPath
from typing import Protocol

from telegram import Contact as TelegramContact
from telegram import Message, MessageEntity
from telegram.helpers import effective_message_type

from .._model import Command, Contact, Location, Media, MessageKind, SystemNotice

# Service messages about the chat itself (members, title, pins, topics, calls...): nobody asks
# the bot anything, so they are recorded as notices and answered by no agent. What a user sends
# the bot through a service message (users_shared, chat_shared, web_app_data, a payment) is not
# among them: it stays a message to answer.
CHAT_SERVICE = frozenset(
    {
        "new_chat_members",
        "left_chat_member",
        "new_chat_title",
        "new_chat_photo",
        "delete_chat_photo",
        "group_chat_created",
        "supergroup_chat_created",
        "channel_chat_created",
        "message_auto_delete_timer_changed",
        "pinned_message",
        "forum_topic_created",
        "forum_topic_edited",
        "forum_topic_closed",
        "forum_topic_reopened",
        "general_forum_topic_hidden",
        "general_forum_topic_unhidden",
        "video_chat_scheduled",
        "video_chat_started",
        "video_chat_ended",
        "video_chat_participants_invited",
        "boost_added",
        "chat_background_set",
        "write_access_allowed",
    }
)


class _File(Protocol):
    """What every PTB file object (PhotoSize, Audio, Document, ...) has."""

    @property
    def file_id(self) -> str: ...

    @property
    def file_size(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class Content:
    kind: MessageKind
    text: str | None = None
    command: Command | None = None
    media: Media | None = None
    location: Location | None = None
    contacts: tuple[Contact, ...] = ()
    platform_type: str | None = None
    system: SystemNotice | None = None


def message_content(message: Message) -> Content:
    """Classify a message by the first content field it carries; unknown ones stay unsupported."""
    if message.text is not None:
        return _text(message)
    media = _media_content(message)
    if media is not None:
        return media
    if message.venue is not None:
        venue = message.venue
        place = Location(
            latitude=venue.location.latitude,
            longitude=venue.location.longitude,
            name=venue.title,
            address=venue.address,
        )
        return Content("location", location=place)
    if message.location is not None:
        point = message.location
        return Content(
            "location", location=Location(latitude=point.latitude, longitude=point.longitude)
        )
    if message.contact is not None:
        return Content("contacts", contacts=(_contact(message.contact),))
    kind = effective_message_type(message) or "unknown"
    if kind in CHAT_SERVICE:
        return Content("system", platform_type=kind, system=SystemNotice(type=kind))
    return Content("unsupported", platform_type=kind)


def _text(message: Message) -> Content:
    command = _command(message)
    kind: MessageKind = "command" if command else "text"
    return Content(kind, text=message.text, command=command)


def _command(message: Message) -> Command | None:
    text = message.text or ""
    for entity in message.entities:
        if entity.type == MessageEntity.BOT_COMMAND and entity.offset == 0:
            word = message.parse_entity(entity)
            name = word.removeprefix("/").split("@", 1)[0]
            if name:
                return Command(name=name, args=text[len(word) :].strip())
    return None


def _media_content(message: Message) -> Content | None:
    caption = message.caption
    # An animation also fills `document`, and a video note is a round video: check them first.
    if message.animation is not None:
        return Content("video", media=_media(message.animation, caption))
    if message.photo:
        largest = max(
            message.photo, key=lambda size: (size.width * size.height, size.file_size or 0)
        )
        return Content("image", media=_media(largest, caption))
    if message.audio is not None:
        return Content("audio", media=_media(message.audio, caption))
    if message.video is not None:
        return Content("video", media=_media(message.video, caption))
    if message.video_note is not None:  # "rounded square MPEG4 videos" (Bot API): no mime_type
        return Content("video", media=_media(message.video_note, caption, "video/mp4"))
    if message.voice is not None:
        return Content("voice", media=_media(message.voice, caption))
    if message.document is not None:
        return Content("document", media=_media(message.document, caption))
    if message.sticker is not None:
        return Content("sticker", text=message.sticker.emoji, media=_media(message.sticker, None))
    return None


def _media(file: _File, caption: str | None, mime_type: str | None = None) -> Media:
    """The file as ``Media``: its type as Telegram gave it, else as its name's extension says
    (Telegram may leave ``mime_type`` out, its file server never names one), else ``mime_type``."""
    file_name = getattr(file, "file_name", None)
    return Media(
        id=file.file_id,
        size=file.file_size,
        mime_type=getattr(file, "mime_type", None) or type_of_name(file_name) or mime_type,
        file_name=file_name,
        caption=caption,
    )


def type_of_name(file_name: str | None) -> str | None:
    """The MIME type the last extension of ``file_name`` stands for (``report.PDF`` ->
    ``application/pdf``); None for no name, no extension or one not in the table.

    The table is Python's own strict one, the same on every machine: ``mimetypes.guess_type``
    would also read ``/etc/mime.types``, take a name such as ``data:text/html,x`` as a URL
    whose type it names, and type ``x.tar.gz`` as a tar file, though its bytes are gzip."""
    if not file_name:
        return None
    suffix = PurePosixPath(file_name.replace("\\", "/")).suffix.lower()
    return _strict_types().get(suffix) if suffix else None


@cache
def _strict_types() -> dict[str, str]:
    return mimetypes.MimeTypes().types_map[True]  # built-in table only; no file is read into it


def _contact(card: TelegramContact) -> Contact:
    name = " ".join(part for part in (card.first_name, card.last_name) if part) or None
    user_id = str(card.user_id) if card.user_id is not None else None
    return Contact(name=name, phones=(card.phone_number,), user_id=user_id)
