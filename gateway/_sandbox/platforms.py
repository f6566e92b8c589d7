"""Fake Telegram Bot API and Graph API routes: they accept what the gateway sends, answer as the
platforms do (with their error shapes for a wrong token or an unknown method), and record it."""

from __future__ import annotations

import hmac
import itertools
import json
import time
from typing import Any

from aiohttp import web

from .._keys import SETTINGS
from .keys import SANDBOX
from .state import SandboxState

TELEGRAM = "telegram"
WHATSAPP = "whatsapp"
_message_ids = itertools.count(1)


def _telegram_error(status: int, description: str) -> web.Response:
    body = {"ok": False, "error_code": status, "description": description}
    return web.json_response(body, status=status)


def _telegram_ok(result: Any) -> web.Response:
    return web.json_response({"ok": True, "result": result})


def _raw(sent: str) -> bytes:
    """A header or path value as the bytes sent: undecodable bytes are kept (surrogateescape),
    so a forged ``Bearer \\xff`` is a wrong token (401), not a 500."""
    return sent.encode("utf-8", "surrogateescape")


def _bot_name(request: web.Request, token: str) -> str | None:
    for bot in request.app[SETTINGS].telegram.bots:
        if hmac.compare_digest(bot.token.get_secret_value().encode(), _raw(token)):
            return bot.name
    return None


async def _fields(request: web.Request) -> dict[str, Any] | None:
    """PTB sends form fields (JSON-encoded where structured); accept JSON bodies too. None for
    a JSON body that is not a JSON object (or nests past the scanner's stack)."""
    if request.content_type == "application/json":
        try:
            data = await request.json()
        except (ValueError, RecursionError):
            return None
        return data if isinstance(data, dict) else None
    form = await request.post()
    fields: dict[str, Any] = {}
    for key, value in form.items():
        text = value if isinstance(value, str) else ""
        try:
            fields[key] = json.loads(text) if text[:1] in "[{" else text
        except (ValueError, RecursionError):
            fields[key] = text
    return fields


class _Malformed(Exception):
    """A request body of the wrong shape: the platform would refuse it with a 400."""


def _object(value: Any) -> dict[str, Any]:
    """``value`` where a JSON object must be (absent: empty); _Malformed otherwise."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Malformed
    return value


def _array(value: Any) -> list[Any]:
    """``value`` where a JSON array must be (absent: empty); _Malformed otherwise."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Malformed
    return value


def _keyboard(markup: object) -> tuple[dict[str, str], ...]:
    if not isinstance(markup, dict):
        return ()
    buttons = [
        _object(button) for row in _array(markup.get("inline_keyboard")) for button in _array(row)
    ]
    return tuple(
        {"id": str(button.get("callback_data", "")), "title": str(button.get("text", ""))}
        for button in buttons
    )


async def telegram_method(request: web.Request) -> web.Response:
    """POST /sandbox/telegram/bot{token}/{method}"""
    state: SandboxState = request.app[SANDBOX]
    bot = _bot_name(request, request.match_info["token"])
    if bot is None:
        return _telegram_error(401, "Unauthorized")
    method = request.match_info["method"]
    try:
        fields = await _fields(request)
    except ConnectionError:  # the client went away mid-body: nobody to answer
        fields = None
    if fields is None:
        return _telegram_error(400, "Bad Request: the body is no JSON object")
    chat_id = str(fields.get("chat_id", ""))
    if method in ("sendMessage", "sendPhoto", "sendDocument"):
        try:
            buttons = _keyboard(fields.get("reply_markup"))
        except _Malformed:
            return _telegram_error(400, "Bad Request: can't parse inline keyboard button")
        message_id = next(_message_ids)
        text = fields.get("text") or fields.get("caption")
        state.record(
            TELEGRAM, bot, chat_id, method, text=text, buttons=buttons, platform_id=str(message_id)
        )
        chat = int(chat_id) if chat_id.lstrip("-").isdigit() else 0
        message: dict[str, Any] = {
            "message_id": message_id,
            "date": int(time.time()),
            "chat": {"id": chat, "type": "private" if chat > 0 else "group"},
            "text": text or "",
        }
        if buttons:
            message["reply_markup"] = fields.get("reply_markup")
        return _telegram_ok(message)
    if method in ("sendChatAction", "answerCallbackQuery", "setWebhook", "deleteWebhook"):
        state.record(TELEGRAM, bot, chat_id, method)
        return _telegram_ok(True)
    if method == "getMe":
        return _telegram_ok(_me(bot))
    if method == "getFile":
        file_id = str(fields.get("file_id", ""))
        media = state.media.get(file_id)
        if media is None:
            return _telegram_error(400, "Bad Request: invalid file_id")
        state.record(TELEGRAM, bot, "", method)
        path = f"sandbox/{file_id}"
        result = {
            "file_id": file_id,
            "file_unique_id": file_id,
            "file_size": len(media.data),
            "file_path": path,
        }
        return _telegram_ok(result)
    return _telegram_error(404, "Not Found: method not found")


async def telegram_get_me(request: web.Request) -> web.Response:
    """GET /sandbox/telegram/bot{token}/getMe: Telegram answers it by GET too (the curl a user
    tries first); the other methods change or record something, so they stay POST only."""
    bot = _bot_name(request, request.match_info["token"])
    if bot is None:
        return _telegram_error(401, "Unauthorized")
    return _telegram_ok(_me(bot))


def _me(bot: str) -> dict[str, Any]:
    return {"id": 1, "is_bot": True, "first_name": bot, "username": f"{bot}_bot"}


async def telegram_file(request: web.Request) -> web.StreamResponse:
    """GET /sandbox/telegram/file/bot{token}/sandbox/{file_id}"""
    if _bot_name(request, request.match_info["token"]) is None:
        return _telegram_error(401, "Unauthorized")
    media = request.app[SANDBOX].media.get(request.match_info["file_id"])
    if media is None:
        return _telegram_error(404, "Not Found")
    return web.Response(body=media.data, content_type=media.content_type)


def _graph_error(status: int, code: int, message: str) -> web.Response:
    error = {"message": message, "type": "OAuthException", "code": code, "fbtrace_id": "sandbox"}
    return web.json_response({"error": error}, status=status)


def _number_of_token(request: web.Request) -> set[str]:
    """The phone_number_ids whose access token the request carries."""
    scheme, _, sent = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return set()
    return {
        number.phone_number_id
        for number in request.app[SETTINGS].whatsapp.numbers
        if hmac.compare_digest(number.access_token.get_secret_value().encode(), _raw(sent))
    }


def _graph_text(body: dict[str, Any]) -> tuple[str | None, tuple[dict[str, str], ...]]:
    """The text and buttons of a message; _Malformed for a part of the wrong shape."""
    kind = body.get("type")
    if kind == "text":
        return str(_object(body.get("text")).get("body", "")), ()
    if kind == "interactive":
        interactive = _object(body.get("interactive"))
        text = str(_object(interactive.get("body")).get("text", ""))
        action = _object(interactive.get("action"))
        buttons = [_object(_object(b).get("reply")) for b in _array(action.get("buttons"))]
        sections = [_object(section) for section in _array(action.get("sections"))]
        rows = [_object(row) for section in sections for row in _array(section.get("rows"))]
        found = tuple(
            {"id": str(b.get("id", "")), "title": str(b.get("title", ""))} for b in buttons + rows
        )
        return text, found
    if kind == "template":
        return _template_text(body.get("template", {})), ()
    media = body.get(str(kind), {})
    return (media.get("caption") if isinstance(media, dict) else None), ()


def _template_text(template: Any) -> str:
    """What the simulator shows of a template: the sandbox has no approved text, so its name
    and parameters."""
    if not isinstance(template, dict):
        return "[template]"
    language = template.get("language", {})
    code = language.get("code", "") if isinstance(language, dict) else ""
    values = [
        str(parameter.get("text", ""))
        for component in template.get("components", [])
        if isinstance(component, dict)
        for parameter in component.get("parameters", [])
        if isinstance(parameter, dict)
    ]
    shown = f": {', '.join(values)}" if values else ""
    return f"[template {template.get('name', '')} ({code}){shown}]"


async def graph_messages(request: web.Request) -> web.Response:
    """POST /sandbox/graph/{version}/{number}/messages: a message, or mark-as-read."""
    number = request.match_info["number"]
    if number not in _number_of_token(request):
        return _graph_error(401, 190, "Invalid OAuth access token - Cannot parse access token")
    try:
        body = await request.json()
    except (ValueError, RecursionError, ConnectionError):  # the last: the client went away
        return _graph_error(400, 100, "Invalid parameter")
    if not isinstance(body, dict):
        return _graph_error(400, 100, "Invalid parameter")
    state: SandboxState = request.app[SANDBOX]
    if body.get("status") == "read":
        state.record(WHATSAPP, number, "", "read", platform_id=str(body.get("message_id")))
        return web.json_response({"success": True})
    to = str(body.get("to", ""))
    try:
        text, buttons = _graph_text(body)
    except _Malformed:
        return _graph_error(400, 100, "Invalid parameter")
    wamid = f"wamid.sandbox{next(_message_ids)}"
    state.record(WHATSAPP, number, to, "messages", text=text, buttons=buttons, platform_id=wamid)
    return web.json_response(
        {
            "messaging_product": "whatsapp",
            "contacts": [{"input": to, "wa_id": to}],
            "messages": [{"id": wamid}],
        }
    )


async def graph_media(request: web.Request) -> web.Response:
    """GET /sandbox/graph/{version}/{media_id}: the media's metadata with its download URL."""
    if not _number_of_token(request):
        return _graph_error(401, 190, "Invalid OAuth access token - Cannot parse access token")
    media_id = request.match_info["media_id"]
    media = request.app[SANDBOX].media.get(media_id)
    if media is None:
        return _graph_error(404, 100, "Unsupported get request.")
    request.app[SANDBOX].record(WHATSAPP, media.account, "", "media", platform_id=media_id)
    base = request.app[SETTINGS].whatsapp.graph_base_url.rstrip("/")
    return web.json_response(
        {
            "messaging_product": "whatsapp",
            "url": f"{base}/media/{media_id}",
            "mime_type": media.content_type,
            "file_size": len(media.data),
            "id": media_id,
        }
    )


async def graph_media_bytes(request: web.Request) -> web.Response:
    """GET /sandbox/graph/media/{media_id}: the bytes, with the same token."""
    if not _number_of_token(request):
        return _graph_error(401, 190, "Invalid OAuth access token - Cannot parse access token")
    media = request.app[SANDBOX].media.get(request.match_info["media_id"])
    if media is None:
        return _graph_error(404, 100, "Unsupported get request.")
    return web.Response(body=media.data, content_type=media.content_type)


def add_platform_routes(app: web.Application) -> None:
    router = app.router  # add_get answers HEAD too, as every GET route of the gateway does
    router.add_get("/sandbox/telegram/bot{token}/getMe", telegram_get_me)
    router.add_post("/sandbox/telegram/bot{token}/{method}", telegram_method)
    router.add_get("/sandbox/telegram/file/bot{token}/sandbox/{file_id}", telegram_file)
    router.add_get("/sandbox/graph/media/{media_id}", graph_media_bytes)
    router.add_post("/sandbox/graph/{version}/{number}/messages", graph_messages)
    router.add_get("/sandbox/graph/{version}/{media_id}", graph_media)
