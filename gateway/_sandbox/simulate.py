"""``POST /sandbox/api/simulate``: a platform delivery as the platform would build and sign it,
posted through the gateway's real webhook route; and ``GET /sandbox/api/sent``."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import time
import uuid
from typing import Any, Literal

import aiohttp
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, model_validator

from .._admin._routes import ApiError, admin_route, json_body, parse
from .._keys import SETTINGS
from ..config import Settings, loopback_host
from .keys import SANDBOX
from .state import MAX_CALLS, Call, MediaFile, SandboxState, demo_png

MAX_WAIT = 25.0  # seconds a GET /sandbox/api/sent may wait for a new call


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ImageIn(_Input):
    caption: str = Field(default="", max_length=1024)


class StatusIn(_Input):
    message_id: str = Field(min_length=1, max_length=256)
    state: Literal["sent", "delivered", "read", "failed"]


class SimulateBody(_Input):
    channel: Literal["telegram", "whatsapp"]
    chat_id: str = Field(pattern=r"^[1-9][0-9]{0,14}$")
    account: str | None = Field(default=None, max_length=64)
    name: str = Field(default="Sandbox user", min_length=1, max_length=64)
    text: str | None = Field(default=None, min_length=1, max_length=4096)
    button: str | None = Field(default=None, min_length=1, max_length=256)
    image: ImageIn | None = None
    status: StatusIn | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> SimulateBody:
        given = [k for k in ("text", "button", "image", "status") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of text, button, image, status")
        return self


class SentQuery(_Input):
    channel: Literal["telegram", "whatsapp"] | None = None
    chat_id: str | None = Field(default=None, max_length=64)
    after: int = Field(default=0, ge=0)
    wait: float = Field(default=0, ge=0, le=MAX_WAIT)


def _account(body: SimulateBody, settings: Settings) -> str:
    if body.channel == "telegram":
        names = [bot.name for bot in settings.telegram.bots]
    else:
        names = [number.phone_number_id for number in settings.whatsapp.numbers]
    if not names:
        raise ApiError(400, "channel_not_configured", f"no {body.channel} account is configured")
    account = body.account or names[0]
    if account not in names:
        raise ApiError(400, "unknown_account", f"no {body.channel} account {account!r}", "account")
    return account


def _last_buttons(state: SandboxState, channel: str, chat_id: str, button: str) -> Call | None:
    """The newest message the gateway sent this chat with the pressed button on it."""
    for call in reversed(state.calls):
        mine = call.channel == channel and call.chat_id == chat_id
        if mine and any(b["id"] == button for b in call.buttons):
            return call
    return None


# Telegram


def telegram_update(body: SimulateBody, state: SandboxState) -> dict[str, Any]:
    update_id = state.next_update_id()
    chat = int(body.chat_id)
    user = {"id": chat, "is_bot": False, "first_name": body.name}
    message: dict[str, Any] = {
        "message_id": update_id % 1_000_000_000,
        "date": int(time.time()),
        "chat": {"id": chat, "type": "private", "first_name": body.name},
        "from": user,
    }
    if body.text is not None:
        return {"update_id": update_id, "message": {**message, "text": body.text}}
    if body.image is not None:
        file_id = f"sbx{uuid.uuid4().hex}"
        state.media[file_id] = MediaFile("image/png", demo_png(update_id), "photo.png")
        photo = [
            {
                "file_id": file_id,
                "file_unique_id": file_id,
                "width": 32,
                "height": 32,
                "file_size": len(state.media[file_id].data),
            }
        ]
        extra = {"caption": body.image.caption} if body.image.caption else {}
        return {"update_id": update_id, "message": {**message, "photo": photo, **extra}}
    if body.button is not None:
        return {"update_id": update_id, "callback_query": _callback(body, state, user)}
    raise ApiError(400, "invalid_field", "status: Telegram reports no delivery statuses", "status")


def _callback(body: SimulateBody, state: SandboxState, user: dict[str, Any]) -> dict[str, Any]:
    assert body.button is not None
    origin = _last_buttons(state, "telegram", body.chat_id, body.button)
    if origin is None:
        raise ApiError(404, "unknown_button", "no message sent to this chat has that button")
    keyboard = [[{"text": b["title"], "callback_data": b["id"]}] for b in origin.buttons]
    message = {
        "message_id": int(origin.platform_id or 0),
        "date": int(origin.at),
        "chat": {"id": int(body.chat_id), "type": "private"},
        "text": origin.text or "",
        "reply_markup": {"inline_keyboard": keyboard},
    }
    return {
        "id": uuid.uuid4().hex[:16],
        "from": user,
        "chat_instance": body.chat_id,
        "message": message,
        "data": body.button,
    }


# WhatsApp


def whatsapp_value(body: SimulateBody, account: str, state: SandboxState) -> dict[str, Any]:
    value: dict[str, Any] = {
        "messaging_product": "whatsapp",
        "metadata": {"display_phone_number": "15550000000", "phone_number_id": account},
    }
    if body.status is not None:
        _sent_message(state, account, body.chat_id, body.status.message_id)
        status: dict[str, Any] = {
            "id": body.status.message_id,
            "status": body.status.state,
            "timestamp": str(int(time.time())),
            "recipient_id": body.chat_id,
        }
        if body.status.state == "failed":
            status["errors"] = [{"code": 131047, "title": "Re-engagement message"}]
        return {**value, "statuses": [status]}
    message: dict[str, Any] = {
        "from": body.chat_id,
        "id": f"wamid.sandbox-{uuid.uuid4().hex}",
        "timestamp": str(int(time.time())),
    }
    if body.text is not None:
        message |= {"type": "text", "text": {"body": body.text}}
    elif body.image is not None:
        media_id = f"sbx{uuid.uuid4().hex}"
        png = demo_png(len(state.media))
        state.media[media_id] = MediaFile("image/png", png, "photo.png", account=account)
        image = {"id": media_id, "mime_type": "image/png", "sha256": "sandbox"}
        message |= {"type": "image", "image": image | _caption(body.image.caption)}
    else:
        message |= _whatsapp_button(body, state)
    contact = {"profile": {"name": body.name}, "wa_id": body.chat_id}
    return {**value, "contacts": [contact], "messages": [message]}


def _sent_message(state: SandboxState, account: str, chat_id: str, message_id: str) -> Call:
    """The message a status reports on: one the gateway sent from this number to this chat
    (WhatsApp reports statuses only of what it delivered, and to the recipient's chat)."""
    field = "status.message_id"
    call = next((c for c in reversed(state.calls) if _sent_as(c, message_id)), None)
    if call is None:
        recalled = f"of the last {MAX_CALLS:,} calls"
        message = f"{field}: the gateway sent no message {message_id!r} ({recalled})"
        raise ApiError(404, "unknown_message", message, field)
    if (call.account, call.chat_id) != (account, chat_id):
        message = (
            f"{field}: {message_id!r} was sent to chat {call.chat_id} from {call.account},"
            f" not to chat {chat_id} from {account}"
        )
        raise ApiError(404, "unknown_message", message, field)
    return call


def _sent_as(call: Call, message_id: str) -> bool:
    return (
        call.channel == "whatsapp" and call.method == "messages" and call.platform_id == message_id
    )


def _caption(caption: str) -> dict[str, str]:
    return {"caption": caption} if caption else {}


def _whatsapp_button(body: SimulateBody, state: SandboxState) -> dict[str, Any]:
    assert body.button is not None
    origin = _last_buttons(state, "whatsapp", body.chat_id, body.button)
    if origin is None:
        raise ApiError(404, "unknown_button", "no message sent to this chat has that button")
    title = next(b["title"] for b in origin.buttons if b["id"] == body.button)
    reply = {"type": "button_reply", "button_reply": {"id": body.button, "title": title}}
    return {
        "type": "interactive",
        "interactive": reply,
        "context": {"from": "15550000000", "id": origin.platform_id},
    }


def _signed(
    body: SimulateBody, account: str, settings: Settings, state: SandboxState
) -> tuple[str, bytes, dict[str, str]]:
    """The webhook path, body and headers the platform would send."""
    if body.channel == "telegram":
        update = telegram_update(body, state)
        bot = next(b for b in settings.telegram.bots if b.name == account)
        headers = {"X-Telegram-Bot-Api-Secret-Token": bot.secret_token.get_secret_value()}
        return f"/webhooks/telegram/{account}", json.dumps(update).encode(), headers
    change = {"field": "messages", "value": whatsapp_value(body, account, state)}
    envelope = {"object": "whatsapp_business_account", "entry": [{"id": "0", "changes": [change]}]}
    raw = json.dumps(envelope).encode()
    secret = settings.whatsapp.app_secret.get_secret_value().encode()
    signature = hmac.new(secret, raw, hashlib.sha256).hexdigest()
    return "/webhooks/whatsapp", raw, {"X-Hub-Signature-256": f"sha256={signature}"}


def _own_url(request: web.Request) -> str:
    """This server, as reached over loopback (``server.host``: 127.0.0.1, ::1, ...)."""
    sockname = request.transport.get_extra_info("sockname") if request.transport else None
    port = sockname[1] if sockname else request.app[SETTINGS].server.port
    return f"http://{loopback_host(request.app[SETTINGS].server.host)}:{port}"


@admin_route
async def simulate(request: web.Request) -> web.Response:
    """POST /sandbox/api/simulate: build, sign and post one delivery; answer what came back."""
    body = await json_body(request, SimulateBody)
    settings = request.app[SETTINGS]
    account = _account(body, settings)
    path, raw, headers = _signed(body, account, settings, request.app[SANDBOX])
    headers["Content-Type"] = "application/json"
    timeout = aiohttp.ClientTimeout(total=30)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as http,
            http.post(_own_url(request) + path, data=raw, headers=headers) as answer,
        ):
            status = answer.status
            await answer.read()
    except (aiohttp.ClientError, TimeoutError) as exc:
        message = f"the gateway's own webhook route did not answer: {type(exc).__name__}"
        raise ApiError(502, "webhook_unreachable", message) from None
    delivery = json.loads(raw)
    return web.json_response({"webhook_status": status, "delivery": delivery})


@admin_route
async def sent(request: web.Request) -> web.Response:
    """GET /sandbox/api/sent?channel=&chat_id=&after=&wait=: the calls the gateway made."""
    query = parse(SentQuery, dict(request.query))
    state: SandboxState = request.app[SANDBOX]
    calls = state.sent(query.channel, query.chat_id, query.after)
    deadline = asyncio.get_running_loop().time() + query.wait
    while not calls and query.wait and not state.closing:
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            break
        state.changed.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(remaining):
                await state.changed.wait()
        calls = state.sent(query.channel, query.chat_id, query.after)
    return web.json_response({"sent": [call.as_json() for call in calls]})
