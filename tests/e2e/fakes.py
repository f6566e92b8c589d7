"""Fake Telegram Bot API and Graph API servers for the end-to-end tests.

They run in the test process on 127.0.0.1 (port 0); the gateway under test is a subprocess
that talks to them over loopback. Every request is recorded with the time it arrived, and a
chat can be given faults for its next sends: ``429:<seconds>``, ``500`` or ``hang``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

HANG = "hang"


@dataclass(frozen=True)
class Request:
    """One send (or typing/read call) as a fake received it."""

    method: str  # sendMessage, sendChatAction, answerCallbackQuery, message, read
    chat_id: str
    text: str | None
    at: float  # time.monotonic() in the test process
    outcome: str  # "ok", "429", "500" or "hang"
    body: dict[str, Any]


@dataclass
class FakePlatform:
    """What both fakes share: the request log, per-chat faults, and a wake-up per request."""

    requests: list[Request] = field(default_factory=list)
    faults: defaultdict[str, deque[str]] = field(default_factory=lambda: defaultdict(deque))
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)  # ends hanging requests
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def fail(self, chat_id: str, *modes: str) -> None:
        """Answer the next sends to ``chat_id`` with these faults, in order."""
        self.faults[chat_id].extend(modes)

    def sent(self, method: str | None = None) -> list[Request]:
        """The sends that were accepted (outcome ok), optionally of one method."""
        return [
            r for r in self.requests if r.outcome == "ok" and (method is None or r.method == method)
        ]

    def texts(self, chat_id: str) -> list[str]:
        """Texts accepted for ``chat_id``, in arrival order."""
        return [r.text or "" for r in self.sent() if r.chat_id == chat_id and r.text is not None]

    def _record(self, method: str, chat_id: str, text: str | None, body: dict[str, Any]) -> str:
        """Record the request; return the fault to answer with ("ok" for none)."""
        queue = self.faults.get(chat_id) if _is_send(method) else None
        outcome = queue.popleft() if queue else "ok"
        self.requests.append(
            Request(method, chat_id, text, time.monotonic(), outcome.split(":")[0], body)
        )
        self.changed.set()
        return outcome


def _is_send(method: str) -> bool:
    return method in ("sendMessage", "message")


class FakeTelegram(FakePlatform):
    """``POST /bot<token>/<method>``; sendMessage answers a Message with a fresh id."""

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/bot{token}/{method}", self._call)
        return app

    async def _call(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        fields = await _fields(request)
        chat_id = str(fields.get("chat_id", ""))
        outcome = self._record(method, chat_id, fields.get("text"), fields)
        fault = await _fault(self, outcome, telegram=True)
        if fault is not None:
            return fault
        if method == "sendMessage":
            return _ok(self._message(chat_id, fields.get("text")))
        return _ok(True)

    def _message(self, chat_id: str, text: str | None) -> dict[str, Any]:
        chat = int(chat_id) if chat_id.lstrip("-").isdigit() else 1
        message = {"message_id": next(self._ids), "date": 1735689600, "text": text or ""}
        return {**message, "chat": {"id": chat, "type": "private"}}


class FakeGraph(FakePlatform):
    """``POST /<version>/<number>/messages``: messages get ``wamid.out<n>``; reads succeed."""

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/{version}/{number}/messages", self._messages)
        return app

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if body.get("status") == "read":
            self._record("read", "", None, body)
            return web.json_response({"success": True})
        chat_id = str(body.get("to", ""))
        outcome = self._record("message", chat_id, _graph_text(body), body)
        fault = await _fault(self, outcome, telegram=False)
        if fault is not None:
            return fault
        wamid = f"wamid.out{next(self._ids)}"
        contacts = [{"input": chat_id, "wa_id": chat_id}]
        return web.json_response(
            {"messaging_product": "whatsapp", "contacts": contacts, "messages": [{"id": wamid}]}
        )


async def _fault(fake: FakePlatform, outcome: str, *, telegram: bool) -> web.Response | None:
    if outcome == "ok":
        return None
    if outcome == HANG:
        await fake.release.wait()
        return web.json_response({"too": "late"})
    if outcome.startswith("429"):
        seconds = int(outcome.split(":")[1]) if ":" in outcome else 1
        if telegram:
            body = {
                "ok": False,
                "error_code": 429,
                "description": f"Too Many Requests: retry after {seconds}",
                "parameters": {"retry_after": seconds},
            }
            return web.json_response(body, status=429)
        error = {"message": "Rate limit hit", "code": 130429, "type": "OAuthException"}
        return web.json_response(
            {"error": error}, status=429, headers={"Retry-After": str(seconds)}
        )
    if telegram:
        body = {"ok": False, "error_code": 500, "description": "Internal Server Error"}
        return web.json_response(body, status=500)
    error = {"message": "An unknown error occurred", "code": 1, "type": "OAuthException"}
    return web.json_response({"error": error}, status=500)


def _graph_text(body: dict[str, Any]) -> str | None:
    if body.get("type") == "text":
        return str(body["text"]["body"])
    interactive = body.get("interactive")
    if isinstance(interactive, dict):
        return str(interactive.get("body", {}).get("text"))
    return None


def _ok(result: Any) -> web.Response:
    return web.json_response({"ok": True, "result": result})


async def _fields(request: web.Request) -> dict[str, Any]:
    if request.content_type == "application/json":
        data = await request.json()
        return {k: v if isinstance(v, str) else json.dumps(v) for k, v in data.items()}
    form = await request.post()
    return {key: str(value) for key, value in form.items()}
