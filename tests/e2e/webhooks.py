"""Webhook bodies as the platforms send them, and a client that retries like they do."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from .gateway_proc import APP_SECRET, BOT, BOT_SECRET, NUMBER

RETRY_SECONDS = 0.05  # pause between tries while the gateway is down or answers 5xx


@dataclass(frozen=True)
class Delivery:
    """One webhook POST: where, what, and with which headers."""

    path: str
    body: bytes
    headers: dict[str, str]


def telegram_text(
    update_id: int,
    chat_id: int,
    text: str,
    *,
    bot: str = BOT,
    secret: str = BOT_SECRET,
    **fields: Any,
) -> Delivery:
    """An Update carrying a private text message (to ``bot``, the default one unless given;
    ``fields`` added to the message, e.g. ``entities``)."""
    message = {**_private(update_id, chat_id, text), **fields}
    return telegram_update(
        {"update_id": update_id, "message": message},
        bot=bot,
        secret=secret,
    )


def _private(message_id: int, chat_id: int, text: str) -> dict[str, Any]:
    return {
        "message_id": message_id,
        "date": 1735689600,
        "chat": {"id": chat_id, "type": "private", "first_name": "Ann"},
        "from": {"id": chat_id, "is_bot": False, "first_name": "Ann"},
        "text": text,
    }


def telegram_update(
    update: dict[str, Any], *, bot: str = BOT, secret: str = BOT_SECRET
) -> Delivery:
    """Any Update, posted to ``bot``'s webhook with its secret."""
    body = json.dumps(update).encode()
    headers = {"Content-Type": "application/json", "X-Telegram-Bot-Api-Secret-Token": secret}
    return Delivery(f"/webhooks/telegram/{bot}", body, headers)


def telegram_photo(
    update_id: int, chat_id: int, sizes: list[tuple[str, int, int]], caption: str | None = None
) -> Delivery:
    """A photo message: ``sizes`` are ``(file_id, width, height)``, smallest first as sent."""
    photo = [
        {
            "file_id": fid,
            "file_unique_id": f"u{fid}",
            "file_size": w * h // 10,
            "width": w,
            "height": h,
        }
        for fid, w, h in sizes
    ]
    fields: dict[str, Any] = {"photo": photo}
    if caption is not None:
        fields["caption"] = caption
    return _telegram_message(update_id, chat_id, fields)


def telegram_document(
    update_id: int,
    chat_id: int,
    file_id: str,
    file_name: str,
    mime_type: str | None,
    file_size: int,
    caption: str | None = None,
) -> Delivery:
    """A document message (a file sent without compression); ``mime_type`` None leaves the
    field out, as Telegram may."""
    document = {
        "file_id": file_id,
        "file_unique_id": f"u{file_id}",
        "file_name": file_name,
        "mime_type": mime_type,
        "file_size": file_size,
    }
    if mime_type is None:
        del document["mime_type"]
    fields: dict[str, Any] = {"document": document}
    if caption is not None:
        fields["caption"] = caption
    return _telegram_message(update_id, chat_id, fields)


def _telegram_message(update_id: int, chat_id: int, fields: dict[str, Any]) -> Delivery:
    message = {**_private(update_id, chat_id, ""), **fields}
    del message["text"]
    if "text" in fields:
        message["text"] = fields["text"]
    return telegram_update({"update_id": update_id, "message": message})


def now() -> str:
    """A WhatsApp ``timestamp`` of this moment: the user wrote within the 24-hour window."""
    return str(int(time.time()))


def _whatsapp(value: dict[str, Any], number: str = NUMBER) -> Delivery:
    value = {
        "messaging_product": "whatsapp",
        "metadata": {"display_phone_number": "15550001111", "phone_number_id": number},
        **value,
    }
    envelope = {
        "object": "whatsapp_business_account",
        "entry": [{"id": "1", "changes": [{"field": "messages", "value": value}]}],
    }
    body = json.dumps(envelope).encode()
    signature = hmac.new(APP_SECRET.encode(), body, hashlib.sha256).hexdigest()
    headers = {"Content-Type": "application/json", "X-Hub-Signature-256": f"sha256={signature}"}
    return Delivery("/webhooks/whatsapp", body, headers)


def whatsapp_texts(wa_id: str, *messages: tuple[str, str], number: str = NUMBER) -> Delivery:
    """A delivery of text messages ``(wamid, text)`` from one user (to ``number``)."""
    return _whatsapp(
        {
            "contacts": [{"profile": {"name": "Bob"}, "wa_id": wa_id}],
            "messages": [
                {
                    "from": wa_id,
                    "id": wamid,
                    "timestamp": now(),
                    "type": "text",
                    "text": {"body": text},
                }
                for wamid, text in messages
            ],
        },
        number,
    )


def whatsapp_image(
    wamid: str, media_id: str, *, mime_type: str = "image/jpeg", caption: str | None = None
) -> dict[str, Any]:
    """An image message object (for ``whatsapp_messages``), as Meta sends it."""
    image = {"mime_type": mime_type, "sha256": "4654+8g=", "id": media_id}
    if caption is not None:
        image["caption"] = caption
    return {"id": wamid, "timestamp": now(), "type": "image", "image": image}


def whatsapp_document(
    wamid: str, media_id: str, filename: str, mime_type: str, caption: str | None = None
) -> dict[str, Any]:
    """A document message object (for ``whatsapp_messages``)."""
    document = {"filename": filename, "mime_type": mime_type, "sha256": "grw=", "id": media_id}
    if caption is not None:
        document["caption"] = caption
    return {"id": wamid, "timestamp": now(), "type": "document", "document": document}


def whatsapp_messages(wa_id: str, *messages: dict[str, Any]) -> Delivery:
    """A delivery of message objects (e.g. ``whatsapp_image(...)``) from one user."""
    return _whatsapp(
        {
            "contacts": [{"profile": {"name": "Bob"}, "wa_id": wa_id}],
            "messages": [{"from": wa_id, **message} for message in messages],
        }
    )


def whatsapp_status(wamid: str, wa_id: str, status: str) -> Delivery:
    """A delivery status of one of our messages."""
    return _whatsapp(
        {
            "statuses": [
                {"id": wamid, "status": status, "timestamp": "1735689700", "recipient_id": wa_id}
            ]
        }
    )


async def post(session: aiohttp.ClientSession, base_url: str, delivery: Delivery) -> int:
    """POST once; the status."""
    async with session.post(
        base_url + delivery.path, data=delivery.body, headers=delivery.headers
    ) as response:
        await response.read()
        return response.status


async def post_until_ok(
    session: aiohttp.ClientSession, base_url: str, delivery: Delivery, *, seconds: float = 60.0
) -> int:
    """POST until a 200, as Telegram and Meta retry; return how many tries it took."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    for tries in range(1, 100_000):
        try:
            status = await post(session, base_url, delivery)
        except (aiohttp.ClientError, TimeoutError):
            status = 0  # refused, reset or cut off by a kill: the platform tries again
        if status == 200:
            return tries
        if 400 <= status < 500:
            raise AssertionError(f"{delivery.path} refused with {status}")
        if loop.time() > deadline:
            break
        await asyncio.sleep(RETRY_SECONDS)
    raise AssertionError(f"{delivery.path} got no 200 within {seconds:g} s")
