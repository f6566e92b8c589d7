"""A fake Telegram Bot API server on loopback, and the config and fixtures Telegram tests share."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from pytest_aiohttp import AiohttpServer

from webhook_bot_gateway.channels import TelegramConfig
from webhook_bot_gateway.channels.telegram import BotIdentity

FIXTURES = Path(__file__).parent.parent / "fixtures" / "telegram"
TOKEN = "123456789:AAH-fake_TOKEN-for-tests-only_0123456"
OTHER_TOKEN = "987654321:AAE-another_fake_TOKEN_for_tests_999"
SECRET = "s3cret-Token_for_support"
OTHER_SECRET = "another-secret_for_sales"
BOT_USER = {"id": 7000000001, "is_bot": True, "first_name": "Gateway Bot", "username": "gw_bot"}
# The bot the fixtures speak to and mention (their README): as getMe would describe it.
FIXTURE_BOT = BotIdentity(7000000001, "gateway_test_bot")
FIXTURE_BOTS = {"support": FIXTURE_BOT, "sales": FIXTURE_BOT}

Reply = Callable[[web.Request, "Recorded"], Awaitable[web.StreamResponse]]


def fixture_names() -> list[str]:
    """Every stored Update, by file name."""
    return sorted(path.name for path in FIXTURES.glob("*.json"))


def fixture_bytes(name: str) -> bytes:
    """A fixture's body exactly as stored."""
    return (FIXTURES / name).read_bytes()


def config(
    api_base_url: str = "http://127.0.0.1:9", timeout: float = 5.0, **options: str
) -> TelegramConfig:
    """Two bots, ``support`` and ``sales``, talking to ``api_base_url``; ``options`` (e.g.
    ``groups="all"``) set on both."""
    return TelegramConfig.model_validate(
        {
            "api_base_url": api_base_url,
            "request_timeout": timeout,
            "bots": [
                {"name": "support", "token": TOKEN, "secret_token": SECRET, **options},
                {"name": "sales", "token": OTHER_TOKEN, "secret_token": OTHER_SECRET, **options},
            ],
        }
    )


@dataclass
class Recorded:
    """One request the fake received."""

    http_method: str
    method: str
    token: str
    fields: dict[str, Any]
    content_type: str
    path: str

    def json_field(self, name: str) -> Any:
        """A nested field: PTB sends objects as JSON strings inside form fields."""
        return json.loads(self.fields[name])


@dataclass
class FakeBotApi:
    """Records every call; answers each method from its script, else with a plausible result."""

    calls: list[Recorded] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    hanging: asyncio.Event = field(default_factory=asyncio.Event)
    _scripts: defaultdict[str, deque[Reply]] = field(default_factory=lambda: defaultdict(deque))
    _next_message_id: int = 5000

    def app(self) -> web.Application:
        """The aiohttp application to serve with ``aiohttp_server``."""
        app = web.Application()
        app.router.add_post("/bot{token}/{method}", self._api)
        app.router.add_get("/file/bot{token}/{path:.+}", self._file)
        return app

    def script(self, method: str, *replies: Reply) -> None:
        """Answer the next calls of ``method`` with ``replies``, in order."""
        self._scripts[method].extend(replies)

    def methods(self) -> list[str]:
        """The Bot API methods called so far, in order."""
        return [call.method for call in self.calls if call.http_method == "POST"]

    async def _api(self, request: web.Request) -> web.StreamResponse:
        recorded = Recorded(
            "POST",
            request.match_info["method"],
            request.match_info["token"],
            await _fields(request),
            request.content_type,
            request.path,
        )
        self.calls.append(recorded)
        script = self._scripts[recorded.method]
        if script:
            return await script.popleft()(request, recorded)
        return ok(self._default_result(recorded))

    async def _file(self, request: web.Request) -> web.StreamResponse:
        path = request.match_info["path"]
        token = request.match_info["token"]
        self.calls.append(Recorded("GET", "file", token, {}, "", request.path))
        if path not in self.files:
            return web.json_response({"ok": False, "error_code": 404}, status=404)
        return web.Response(body=self.files[path])

    def _default_result(self, call: Recorded) -> Any:
        if call.method.startswith("send") and call.method != "sendChatAction":
            return self._message(call)
        if call.method == "getMe":
            return BOT_USER
        if call.method == "getFile":
            file_id = call.fields["file_id"]
            return {"file_id": file_id, "file_unique_id": "u1", "file_path": f"docs/{file_id}.pdf"}
        return True

    def _message(self, call: Recorded) -> dict[str, Any]:
        self._next_message_id += 1
        chat_id = call.fields.get("chat_id", "1")
        chat = {"id": int(chat_id) if chat_id.lstrip("-").isdigit() else 1, "type": "private"}
        message: dict[str, Any] = {
            "message_id": self._next_message_id,
            "date": 1735689600,
            "chat": chat,
            "from": BOT_USER,
        }
        if "text" in call.fields:
            message["text"] = call.fields["text"]
        return message


async def _fields(request: web.Request) -> dict[str, Any]:
    if request.content_type == "application/json":
        data = await request.json()
        return {
            key: value if isinstance(value, str) else json.dumps(value)
            for key, value in data.items()
        }
    form = await request.post()
    return {key: str(value) for key, value in form.items()}


def ok(result: Any) -> web.Response:
    """A successful Bot API answer."""
    return web.json_response({"ok": True, "result": result})


def error(status: int, description: str, **parameters: Any) -> Reply:
    """An error answer, with ``parameters`` (retry_after, migrate_to_chat_id) if given."""

    async def reply(request: web.Request, call: Recorded) -> web.StreamResponse:
        body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
        if parameters:
            body["parameters"] = parameters
        return web.json_response(body, status=status)

    return reply


def echo_path(status: int) -> Reply:
    """An error whose description repeats the request path, token included."""

    async def reply(request: web.Request, call: Recorded) -> web.StreamResponse:
        description = f"Bad Request: no such path {request.path}"
        return web.json_response(
            {"ok": False, "error_code": status, "description": description}, status=status
        )

    return reply


def hang(fake: FakeBotApi) -> Reply:
    """Never answer until the test ends (the client must time out)."""

    async def reply(request: web.Request, call: Recorded) -> web.StreamResponse:
        fake.hanging.set()
        await fake.release.wait()
        return ok(True)

    return reply


def drop_connection(fake: FakeBotApi, *, reset: bool) -> Reply:
    """Read the whole request, then close the connection without answering (RST or FIN)."""

    async def reply(request: web.Request, call: Recorded) -> web.StreamResponse:
        transport = request.transport
        assert transport is not None
        if reset:  # SO_LINGER 0: the close sends RST, the client reads ECONNRESET
            sock = transport.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            transport.abort()
        else:
            transport.close()
        fake.hanging.set()
        await fake.release.wait()
        return ok(True)

    return reply


@dataclass
class Upload:
    """One file part of a multipart request."""

    field: str
    file_name: str
    content_type: str
    content: bytes


def record_uploads(uploads: list[Upload]) -> Reply:
    """Keep every file part of the request, then answer with a document message."""

    async def reply(request: web.Request, call: Recorded) -> web.StreamResponse:
        form = await request.post()  # cached: the fake already parsed it
        for name, value in form.items():
            if isinstance(value, web.FileField):
                content = value.file.read()
                uploads.append(Upload(name, value.filename, value.content_type, content))
        chat = {"id": 1, "type": "private"}
        message = {"message_id": 4242, "date": 1735689600, "chat": chat, "from": BOT_USER}
        return ok(message)

    return reply


class ConnectionCounter:
    """Counts the TCP connections an aiohttp server accepted (keep-alive reuse shows as one)."""

    def __init__(self) -> None:
        self.peers: set[tuple[str, int]] = set()

    @web.middleware
    async def middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        transport = request.transport
        if transport is not None:
            self.peers.add(transport.get_extra_info("peername")[:2])
        return await handler(request)


@pytest.fixture
async def bot_api(aiohttp_server: AiohttpServer) -> AsyncIterator[tuple[FakeBotApi, str]]:
    """A FakeBotApi on loopback and its base url (import the fixture where it is used)."""
    fake = FakeBotApi()
    server = await aiohttp_server(fake.app())
    yield fake, str(server.make_url("")).rstrip("/")
    fake.release.set()
