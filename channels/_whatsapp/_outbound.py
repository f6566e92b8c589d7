"""Build the Graph API request bodies for one OutboundMessage, in the order they are sent."""

from __future__ import annotations

import re
from typing import Any

from .._errors import PermanentSendError
from .._model import Button, OutboundMedia, OutboundMessage, OutboundTemplate
from .._split import split_text

CHANNEL = "whatsapp"
TEXT_LIMIT = 4096
CAPTION_LIMIT = 1024
BUTTONS_BODY_LIMIT = 1024
LIST_BODY_LIMIT = 4096
MAX_REPLY_BUTTONS = 3
MAX_LIST_ROWS = 10
BUTTON_TITLE_LIMIT = 20
ROW_TITLE_LIMIT = 24
ROW_DESCRIPTION_LIMIT = 72
ROW_ID_LIMIT = 200
LIST_BUTTON_LABEL = "Options"  # the label that opens the list; at most 20 characters
_CAPTIONED = frozenset({"image", "video", "document"})
_PHONE = re.compile(r"\+?[0-9]{1,20}")

Payload = dict[str, Any]


def build_payloads(message: OutboundMessage) -> list[Payload]:
    """Every request body the message needs; raises PermanentSendError if it cannot be sent."""
    text = (message.text or "").strip()
    bodies: list[Payload] = []
    if message.template is not None:
        bodies.append(_template(message.template))
    elif message.media is not None:
        media_body, text = _media(message.media, text, text_as_caption=not message.buttons)
        bodies.append(media_body)
    if message.template is not None:
        pass  # a template carries its own text: the only body
    elif message.buttons:
        bodies += _interactive(text, message.buttons)
    elif text:
        bodies += [_text(part) for part in split_text(text, TEXT_LIMIT)]
    if not bodies:
        raise _invalid("the message has no text, buttons or media")
    if message.reply_to:
        bodies[0]["context"] = {"message_id": message.reply_to}
    envelope = {"messaging_product": "whatsapp", "recipient_type": "individual"}
    envelope |= recipient(message.chat_id)
    return [envelope | body for body in bodies]


def recipient(chat_id: str) -> dict[str, str]:
    """Phone numbers go in ``to``; a business-scoped user id (``US.1349…``) in ``recipient``."""
    return {"to": chat_id} if _PHONE.fullmatch(chat_id) else {"recipient": chat_id}


def _text(body: str) -> Payload:
    return {"type": "text", "text": {"body": body, "preview_url": False}}


def _template(template: OutboundTemplate) -> Payload:
    """The documented template body: name, language code, the body's text parameters."""
    body: dict[str, Any] = {"name": template.name, "language": {"code": template.language}}
    if template.parameters:
        parameters = [{"type": "text", "text": value} for value in template.parameters]
        body["components"] = [{"type": "body", "parameters": parameters}]
    return {"type": "template", "template": body}


def _media(media: OutboundMedia, text: str, *, text_as_caption: bool) -> tuple[Payload, str]:
    """The media body, and the text still to send after it (the caption, where it fits)."""
    if media.id:
        obj: dict[str, str] = {"id": media.id}
    elif media.url:
        obj = {"link": media.url}
    else:
        raise _invalid("outbound media needs an id or a url")
    caption = media.caption
    if media.kind not in _CAPTIONED or (caption and len(caption) > CAPTION_LIMIT):
        text = "\n\n".join(filter(None, [caption, text]))  # goes out as text after the media
    elif caption is None and text_as_caption and text and len(text) <= CAPTION_LIMIT:
        obj["caption"], text = text, ""
    elif caption:
        obj["caption"] = caption
    if media.kind == "document" and media.file_name:
        obj["filename"] = media.file_name
    return {"type": media.kind, media.kind: obj}, text


def _interactive(text: str, buttons: tuple[Button, ...]) -> list[Payload]:
    if not text:
        raise _invalid("buttons need text to go with them")
    if len(buttons) > MAX_LIST_ROWS:
        raise _invalid(f"{len(buttons)} buttons: WhatsApp shows at most {MAX_LIST_ROWS}")
    as_buttons = _fits_reply_buttons(buttons)
    limit = BUTTONS_BODY_LIMIT if as_buttons else LIST_BODY_LIMIT
    parts = split_text(text, TEXT_LIMIT)
    last = split_text(parts.pop(), limit)
    leading = [_text(part) for part in parts + last[:-1]]
    action = _reply_buttons(buttons) if as_buttons else _list(buttons)
    kind = "button" if as_buttons else "list"
    body = {"type": kind, "body": {"text": last[-1]}, "action": action}
    return [*leading, {"type": "interactive", "interactive": body}]


def _fits_reply_buttons(buttons: tuple[Button, ...]) -> bool:
    """Reply buttons when they fit untruncated; otherwise a list, which has room for more."""
    return len(buttons) <= MAX_REPLY_BUTTONS and all(
        len(b.title) <= BUTTON_TITLE_LIMIT and not b.description for b in buttons
    )


def _reply_buttons(buttons: tuple[Button, ...]) -> dict[str, Any]:
    replies = [{"type": "reply", "reply": {"id": b.id, "title": b.title}} for b in buttons]
    return {"buttons": replies}


def _list(buttons: tuple[Button, ...]) -> dict[str, Any]:
    rows = [_row(button) for button in buttons]
    section = {"title": LIST_BUTTON_LABEL, "rows": rows}
    return {"button": LIST_BUTTON_LABEL, "sections": [section]}


def _row(button: Button) -> dict[str, str]:
    if len(button.id) > ROW_ID_LIMIT:
        raise _invalid(f"list row id longer than {ROW_ID_LIMIT} characters")
    row = {"id": button.id, "title": _shorten(button.title, ROW_TITLE_LIMIT)}
    if button.description:
        row["description"] = _shorten(button.description, ROW_DESCRIPTION_LIMIT)
    return row


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _invalid(reason: str) -> PermanentSendError:
    return PermanentSendError(CHANNEL, reason, error_code="invalid_message")
