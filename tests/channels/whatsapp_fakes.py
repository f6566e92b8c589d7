"""Shared helpers of the WhatsApp tests: fixtures on disk, signing, a fake Graph API server."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from webhook_bot_gateway.channels import WhatsAppConfig, WhatsAppNumberConfig

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "whatsapp"
APP_SECRET = "test-app-secret"
VERIFY_TOKEN = "meatyhamhock"
API_VERSION = "v21.0"
NUMBER_A = "1122334455667"
NUMBER_B = "106540352242922"
TOKEN_A = "EAAtoken-for-number-a-0123456789"
TOKEN_B = "EAAtoken-for-number-b-9876543210"
MEDIA_BYTES = b"\x89PNG fake image bytes"


def fixture_names() -> list[str]:
    return sorted(path.name for path in FIXTURES.glob("*.json"))


def fixture_bytes(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def fixture_json(name: str) -> Any:
    return json.loads(fixture_bytes(name))


def sign(body: bytes, secret: str = APP_SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def config(base_url: str = "https://graph.invalid", **overrides: Any) -> WhatsAppConfig:
    values: dict[str, Any] = {
        "graph_base_url": base_url,
        "api_version": API_VERSION,
        "app_secret": APP_SECRET,
        "verify_token": VERIFY_TOKEN,
        "request_timeout": 5.0,
        "numbers": (
            WhatsAppNumberConfig(phone_number_id=NUMBER_A, access_token=TOKEN_A),
            WhatsAppNumberConfig(phone_number_id=NUMBER_B, access_token=TOKEN_B),
        ),
    }
    values.update(overrides)
    return WhatsAppConfig(**values)


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    authorization: str | None
    body: Any


HANG = "hang"


@dataclass
class FakeGraph:
    """A Graph API on loopback: records every request and answers from a script.

    ``answers`` holds (status, json body[, headers]) tuples, or ``HANG`` to never answer; once it
    is empty, message sends succeed with ids ``wamid.out1``, ``wamid.out2``, ...
    """

    requests: list[Recorded] = field(default_factory=list)
    answers: deque[Any] = field(default_factory=deque)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    sent: int = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/download/{media_id}", self._media_bytes, name="download")
        app.router.add_post("/{version}/{number}/messages", self._messages)
        app.router.add_get("/{version}/{media_id}", self._media_info)
        return app

    def answer(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self.answers.append((status, body, headers or {}))

    def graph_error(self, status: int, code: int, message: str = "error", **extra: Any) -> None:
        error = {"message": message, "type": "OAuthException", "code": code}
        error.update(extra)
        self.answer(status, {"error": {**error, "fbtrace_id": "AbCdEf123"}})

    async def _record(self, request: web.Request) -> None:
        body = await request.json() if request.can_read_body else None
        auth = request.headers.get("Authorization")
        self.requests.append(Recorded(request.method, request.path, auth, body))

    async def _scripted(self) -> web.Response | None:
        if not self.answers:
            return None
        answer = self.answers.popleft()
        if answer == HANG:
            await self.release.wait()
            return web.json_response({"too": "late"})
        status, body, headers = answer
        return web.json_response(body, status=status, headers=headers)

    async def _messages(self, request: web.Request) -> web.Response:
        await self._record(request)
        scripted = await self._scripted()
        if scripted is not None:
            return scripted
        if self.requests[-1].body.get("status") == "read":
            return web.json_response({"success": True})
        self.sent += 1
        to = self.requests[-1].body.get("to")
        return web.json_response(
            {
                "messaging_product": "whatsapp",
                "contacts": [{"input": to, "wa_id": to}],
                "messages": [{"id": f"wamid.out{self.sent}"}],
            }
        )

    async def _media_info(self, request: web.Request) -> web.Response:
        await self._record(request)
        scripted = await self._scripted()
        if scripted is not None:
            return scripted
        media_id = request.match_info["media_id"]
        url = request.url.origin().join(request.app.router["download"].url_for(media_id=media_id))
        return web.json_response(
            {
                "url": str(url),
                "mime_type": "image/png",
                "sha256": "abc",
                "file_size": len(MEDIA_BYTES),
                "id": media_id,
                "messaging_product": "whatsapp",
            }
        )

    async def _media_bytes(self, request: web.Request) -> web.Response:
        await self._record(request)
        return web.Response(body=MEDIA_BYTES, content_type="image/png")
