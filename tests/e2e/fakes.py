"""Fake Telegram Bot API and Graph API servers for the end-to-end tests.

They run in the test process on 127.0.0.1 (port 0); the gateway under test is a subprocess
that talks to them over loopback. Every request is recorded with the time it arrived, and a
chat can be given faults for its next sends: ``429:<seconds>``, ``500``, ``hang``, ``drop``
(the message is taken, then the connection is closed without an answer: the sender cannot know
it arrived), or ``gone`` (the user blocked the bot or cannot be reached). ``Chaos`` draws
such faults for a share of all sends, from a seed.

Media: a fake serves the files a test registers (``add_media``): Graph's ``GET /<version>/<id>``
and ``/media-bytes/<id>``, Telegram's ``getFile`` and ``/file/bot<token>/<path>``. A file's
download can answer a redirect, hang until ``release``, announce more than it sends, or stream
without a length; every media request is recorded as a ``Hit`` with its headers. ``Sink`` is a
server that must receive nothing: it records whatever reaches it.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import random
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

HANG = "hang"
DROP = "drop"
GONE = "gone"  # Telegram 403 "blocked by the user", Graph 131026 "undeliverable"
ACCEPTED = ("ok", DROP)  # outcomes of a send the platform took (the user sees the message)
SINK_BODY = b"sink bytes, not the file"
MediaAnswer = Literal["serve", "redirect", "hang", "announce", "stream"]


@dataclass(frozen=True)
class Request:
    """One send (or typing/read call) as a fake received it."""

    method: str  # sendMessage, sendChatAction, answerCallbackQuery, message, read
    chat_id: str
    text: str | None
    at: float  # time.monotonic() in the test process
    outcome: str  # "ok", "429", "500", "hang" or "drop"
    body: dict[str, Any]


@dataclass
class Hit:
    """One media request (metadata, getFile or download) as a fake or the sink received it."""

    method: str
    path: str  # with the query string
    headers: dict[str, str]
    at: float  # time.monotonic() when it arrived
    answered: float | None = None  # when its handler returned (None while it hangs)


@dataclass
class MediaFile:
    """A file a fake serves, how its API describes it and how its download answers.

    ``answer``: ``serve`` the bytes; ``redirect`` to ``location``; ``hang`` until the fake's
    ``release``, then serve; ``announce`` a Content-Length of ``content_length`` and send no
    body until ``release``; ``stream`` ``stream_bytes`` bytes chunked, without a length.
    """

    data: bytes = b""
    content_type: str = "application/octet-stream"  # served, and Graph's mime_type
    size: int | None = None  # file_size in the metadata / File; None: not announced
    url: str | None = None  # Graph: the metadata's url (None: the fake's own /media-bytes/<id>)
    file_path: str = ""  # Telegram: the File's file_path
    answer: MediaAnswer = "serve"
    location: str = ""
    content_length: int = 0
    stream_bytes: int = 0
    streamed: int = 0  # bytes the stream handed to the socket before it ended or was cut


@dataclass(frozen=True)
class Chaos:
    """Faults for a share of all sends, e.g. ``Chaos(7, (("429:1", 0.05), ("drop", 0.02)))``.

    The draw for a send depends only on the seed, the chat, the text and how many times that
    text went to that chat before, so a seed gives the same faults whatever order the sends
    arrive in.
    """

    seed: int
    shares: tuple[tuple[str, float], ...]  # (fault, share of sends), shares summing to <= 1

    def draw(self, chat_id: str, text: str | None, attempt: int) -> str:
        roll = random.Random(f"{self.seed}:{chat_id}:{text}:{attempt}").random()
        for fault, share in self.shares:
            if roll < share:
                return fault
            roll -= share
        return "ok"


@dataclass
class FakePlatform:
    """What both fakes share: the request log, per-chat faults, and a wake-up per request."""

    requests: list[Request] = field(default_factory=list)
    hits: list[Hit] = field(default_factory=list)  # media requests, in arrival order
    media: dict[str, MediaFile] = field(default_factory=dict)
    faults: defaultdict[str, deque[str]] = field(default_factory=lambda: defaultdict(deque))
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)  # ends hanging requests
    chaos: Chaos | None = None  # faults for sends that have none queued by ``fail``
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _tries: defaultdict[tuple[str, str | None], int] = field(
        default_factory=lambda: defaultdict(int)
    )

    def fail(self, chat_id: str, *modes: str) -> None:
        """Answer the next sends to ``chat_id`` with these faults, in order."""
        self.faults[chat_id].extend(modes)

    def sent(self, method: str | None = None) -> list[Request]:
        """The sends that were accepted (outcome ok or drop), optionally of one method."""
        return [
            r
            for r in self.requests
            if r.outcome in ACCEPTED and (method is None or r.method == method)
        ]

    def texts(self, chat_id: str) -> list[str]:
        """Texts accepted for ``chat_id``, in arrival order."""
        return [r.text or "" for r in self.sent() if r.chat_id == chat_id and r.text is not None]

    def add_media(
        self,
        key: str,
        data: bytes = b"",
        *,
        content_type: str = "application/octet-stream",
        announce_size: bool = True,
        **options: Any,
    ) -> MediaFile:
        """Serve a file under a Graph media id or a Telegram file_id; the size is announced as
        ``len(data)`` unless ``announce_size`` is false or ``size`` is given."""
        size = options.pop("size", len(data) if announce_size else None)
        file = MediaFile(data, content_type, size, **options)
        self.media[key] = file
        return file

    def media_hits(self, fragment: str) -> list[Hit]:
        """The media requests whose path contains ``fragment``."""
        return [hit for hit in self.hits if fragment in hit.path]

    def record_hit(self, request: web.Request) -> Hit:
        hit = Hit(request.method, request.path_qs, dict(request.headers), time.monotonic())
        self.hits.append(hit)
        self.changed.set()
        return hit

    def _record(self, method: str, chat_id: str, text: str | None, body: dict[str, Any]) -> str:
        """Record the request; return the fault to answer with ("ok" for none)."""
        outcome = self._fault_for(method, chat_id, text)
        self.requests.append(
            Request(method, chat_id, text, time.monotonic(), outcome.split(":")[0], body)
        )
        self.changed.set()
        return outcome

    def _fault_for(self, method: str, chat_id: str, text: str | None) -> str:
        if not _is_send(method):
            return "ok"
        queue = self.faults.get(chat_id)
        if queue:
            return queue.popleft()
        if self.chaos is None:
            return "ok"
        attempt = self._tries[chat_id, text]
        self._tries[chat_id, text] += 1
        return self.chaos.draw(chat_id, text, attempt)


def _is_send(method: str) -> bool:
    return method in ("sendMessage", "message")


@dataclass
class FakeTelegram(FakePlatform):
    """``POST /bot<token>/<method>``; sendMessage answers a Message with a fresh id; getMe the
    bot whose id is the token's number and whose username is ``usernames[token]`` (else
    ``e2e_bot``), unrecorded; a 502 instead while ``get_me_down``."""

    usernames: dict[str, str] = field(default_factory=dict)
    get_me_down: bool = False

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/bot{token}/{method}", self._call)
        app.router.add_get("/file/bot{token}/{path:.*}", self._file)
        return app

    async def _call(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        fields = await _fields(request)
        if method == "getMe" and self.get_me_down:
            return web.json_response(
                {"ok": False, "error_code": 502, "description": "Bad Gateway"}, status=502
            )
        if method == "getMe":
            return _ok(self.bot_user(request.match_info["token"]))
        if method == "getFile":
            return self._get_file(request, str(fields.get("file_id", "")))
        chat_id = str(fields.get("chat_id", ""))
        outcome = self._record(method, chat_id, fields.get("text"), fields)
        fault = await _fault(self, request, outcome, telegram=True)
        if fault is not None:
            return fault
        if method == "sendMessage":
            return _ok(self._message(chat_id, fields.get("text")))
        return _ok(True)

    def bot_user(self, token: str) -> dict[str, Any]:
        """The bot ``token`` belongs to, as getMe describes it."""
        username = self.usernames.get(token, "e2e_bot")
        return {
            "id": int(token.split(":")[0]),
            "is_bot": True,
            "first_name": username,
            "username": username,
        }

    def _message(self, chat_id: str, text: str | None) -> dict[str, Any]:
        chat = int(chat_id) if chat_id.lstrip("-").isdigit() else 1
        message = {"message_id": next(self._ids), "date": 1735689600, "text": text or ""}
        return {**message, "chat": {"id": chat, "type": "private"}}

    def _get_file(self, request: web.Request, file_id: str) -> web.Response:
        hit = self.record_hit(request)
        hit.answered = hit.at
        file = self.media.get(file_id)
        if file is None:
            body = {"ok": False, "error_code": 400, "description": "Bad Request: invalid file_id"}
            return web.json_response(body, status=400)
        path = file.file_path or f"documents/{file_id}"
        result = {"file_id": file_id, "file_unique_id": f"u{file_id[:16]}", "file_path": path}
        if file.size is not None:
            result["file_size"] = file.size
        return _ok(result)

    async def _file(self, request: web.Request) -> web.StreamResponse:
        path = request.match_info["path"]
        file = next((f for f in self.media.values() if f.file_path == path), None)
        return await _serve_media(self, request, file)


class FakeGraph(FakePlatform):
    """``POST /<version>/<number>/messages``: messages get ``wamid.out<n>``; reads succeed."""

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/{version}/{number}/messages", self._messages)
        app.router.add_get("/media-bytes/{media_id}", self._media_bytes)  # before the next
        app.router.add_get("/{version}/{media_id}", self._media_info)
        return app

    async def _media_info(self, request: web.Request) -> web.Response:
        hit = self.record_hit(request)
        hit.answered = hit.at
        media_id = request.match_info["media_id"]
        file = self.media.get(media_id)
        if file is None:
            error = {"message": "Unsupported get request", "code": 100, "type": "OAuthException"}
            return web.json_response({"error": error}, status=400)
        url = file.url or str(request.url.origin().with_path(f"/media-bytes/{media_id}"))
        info: dict[str, Any] = {
            "messaging_product": "whatsapp",
            "url": url,
            "mime_type": file.content_type,
            "sha256": hashlib.sha256(file.data).hexdigest(),
            "id": media_id,
        }
        if file.size is not None:
            info["file_size"] = file.size
        return web.json_response(info)

    async def _media_bytes(self, request: web.Request) -> web.StreamResponse:
        return await _serve_media(self, request, self.media.get(request.match_info["media_id"]))

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if body.get("status") == "read":
            self._record("read", "", None, body)
            return web.json_response({"success": True})
        chat_id = str(body.get("to", ""))
        outcome = self._record("message", chat_id, _graph_text(body), body)
        fault = await _fault(self, request, outcome, telegram=False)
        if fault is not None:
            return fault
        wamid = f"wamid.out{next(self._ids)}"
        contacts = [{"input": chat_id, "wa_id": chat_id}]
        return web.json_response(
            {"messaging_product": "whatsapp", "contacts": contacts, "messages": [{"id": wamid}]}
        )


async def _fault(
    fake: FakePlatform, request: web.Request, outcome: str, *, telegram: bool
) -> web.Response | None:
    if outcome == "ok":
        return None
    if outcome == DROP:
        # The message was read whole: close the connection before any byte of an answer.
        assert request.transport is not None
        request.transport.close()
        return web.Response()
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
    if outcome == GONE:
        return _gone(telegram)
    if telegram:
        body = {"ok": False, "error_code": 500, "description": "Internal Server Error"}
        return web.json_response(body, status=500)
    error = {"message": "An unknown error occurred", "code": 1, "type": "OAuthException"}
    return web.json_response({"error": error}, status=500)


def _gone(telegram: bool) -> web.Response:
    """The user blocked the bot (Telegram) or cannot be reached (Graph's 131026)."""
    if telegram:
        body = {
            "ok": False,
            "error_code": 403,
            "description": "Forbidden: bot was blocked by the user",
        }
        return web.json_response(body, status=403)
    error = {"message": "(#131026) Message undeliverable", "code": 131026, "type": "OAuthException"}
    return web.json_response({"error": error}, status=400)


async def _serve_media(
    fake: FakePlatform, request: web.Request, file: MediaFile | None
) -> web.StreamResponse:
    hit = fake.record_hit(request)
    try:
        if file is None:
            return web.Response(status=404, text="no such file")
        if file.answer == "redirect":
            return web.Response(status=302, headers={"Location": file.location})
        if file.answer == "announce":
            return await _announce(fake, request, file)
        if file.answer == "stream":
            return await _stream(request, file)
        if file.answer == HANG:
            await fake.release.wait()
        return web.Response(body=file.data, headers={"Content-Type": file.content_type})
    finally:
        hit.answered = time.monotonic()
        fake.changed.set()


async def _announce(
    fake: FakePlatform, request: web.Request, file: MediaFile
) -> web.StreamResponse:
    """Headers announcing ``file.content_length`` bytes, then nothing until released."""
    response = web.StreamResponse(headers={"Content-Type": file.content_type})
    response.content_length = file.content_length
    await response.prepare(request)
    await fake.release.wait()
    return response  # the body stays short: the client is gone or must see a broken payload


async def _stream(request: web.Request, file: MediaFile) -> web.StreamResponse:
    """``file.stream_bytes`` bytes, chunked, until done or the client goes away."""
    response = web.StreamResponse(headers={"Content-Type": file.content_type})
    response.enable_chunked_encoding()
    await response.prepare(request)
    chunk = b"s" * 4096
    try:
        while file.streamed < file.stream_bytes:
            await response.write(chunk)
            file.streamed += len(chunk)
        await response.write_eof()
    except ConnectionResetError:
        pass
    return response


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


class Sink:
    """A server no download may reach: it records every request and answers 200 with bytes."""

    def __init__(self) -> None:
        self.hits: list[Hit] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self._any)
        return app

    async def _any(self, request: web.Request) -> web.Response:
        at = time.monotonic()
        self.hits.append(Hit(request.method, request.path_qs, dict(request.headers), at, at))
        return web.Response(body=SINK_BODY, content_type="image/jpeg")
