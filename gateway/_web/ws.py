"""``/ws``: the web chat channel (frames, codes and an example exchange in docs/web.md).

A socket attaches to one web session. Its messages are deliveries like webhooks: the same
group-commit writer (dedup key ``web:<chat>:<client_id>``), inbox, lanes and runner; ``ack``
goes out only after the writer's commit. What the socket is shown is read from the session's
event log, after the last seq it was sent: replayed from ``after`` on connect, then live. So a
reconnect misses nothing and sees nothing twice, and a turn never depends on a socket.

The session id is the web user's only credential: it is made here (``web-<uuid4>``, signed:
``ids.py``), never taken from a client for a new session, and logged only shortened. A new
session is stored with its first message or upload, not at connect.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from dataclasses import dataclass
from typing import Any

from aiohttp import WSMsgType, web

from webhook_bot_gateway.channels.web import CHANNEL, web_body, web_dedup_key
from webhook_bot_gateway.store import DeliveryIn, SessionEvent, Store, StoreError

from .._cancel_refusal import not_stopped
from .._http import json_http_errors
from .._keys import (
    BACKLOG,
    DISPATCHER,
    FEED,
    METRICS,
    SETTINGS,
    SOCKETS,
    STORE,
    WEB_IDS,
    WRITER,
)
from .._pipeline._dispatcher import CANCEL_UNANSWERED, UNANSWERED_TEXT
from .feed import follow_log
from .frames import CancelFrame, FrameError, MessageData, error_frame, event_frame, parse_frame

log = logging.getLogger("gateway.web")

WEB_SESSION = re.compile(r"web-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")
FRAMES = "gateway_ws_frames_total"
CONNECTIONS = "gateway_ws_connections_total"


def short(session_id: str) -> str:
    """Enough of a web session id to follow it in a log, too little to use it."""
    return session_id[:12] + "…"


class Refused(Exception):
    """The socket cannot attach: an ``error`` frame, repeated for every frame the client sends."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class WebChat:
    """The web session a socket is attached to (stored or not yet)."""

    session_id: str
    chat_id: str

    @classmethod
    def of(cls, session_id: str) -> WebChat:
        return cls(session_id, session_id.removeprefix("web-"))


class Socket:
    """One attached socket: frames out under one lock (the pump and the reader both send)."""

    def __init__(self, ws: web.WebSocketResponse, session: WebChat) -> None:
        self.ws = ws
        self.session = session
        self._lock = asyncio.Lock()

    async def send(self, frame: dict[str, Any]) -> None:
        async with self._lock:
            await self.ws.send_json(frame)


async def websocket(request: web.Request) -> web.WebSocketResponse:
    """GET /ws[?session_id=ID&after=SEQ]"""
    config = request.app[SETTINGS].web
    # aiohttp closes the socket on a frame over its limit; up to 4x ours the frame is read and
    # refused with an error frame, so a client's mistake does not cost it the connection.
    ws = web.WebSocketResponse(
        heartbeat=config.heartbeat_seconds, max_msg_size=4 * config.max_frame_bytes
    )
    await ws.prepare(request)
    try:
        session, after, stored = await _attach(request)
    except Refused as exc:
        request.app[METRICS].inc(CONNECTIONS, outcome=exc.code)
        await _refusing(request, ws, exc)
        return ws
    request.app[METRICS].inc(CONNECTIONS, outcome="attached")
    log.info("web socket attached to %s after seq %d", short(session.session_id), after)
    socket = Socket(ws, session)
    await socket.send({"type": "connection", "data": {"session_id": session.session_id}})
    open_sockets = request.app[SOCKETS]
    open_sockets.add(ws)
    with request.app[FEED].watch(session.session_id) as wake:
        pump = asyncio.create_task(_pump(request.app[STORE], socket, after, wake, stored))
        try:
            await _read(request, socket)
        finally:
            open_sockets.discard(ws)
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump
    return ws


async def _refusing(request: web.Request, ws: web.WebSocketResponse, refusal: Refused) -> None:
    """The refusal's error frame, then the same frame for each frame the client sends, until it
    closes: an error frame leaves the socket open (CONTRACT.md), though it is attached to no
    session and never will be; the client connects again to try another id."""
    frame = error_frame(refusal.code, refusal.message)
    open_sockets = request.app[SOCKETS]
    open_sockets.add(ws)  # closed with the others at shutdown
    try:
        await ws.send_json(frame)
        async for msg in ws:
            if msg.type in (WSMsgType.TEXT, WSMsgType.BINARY):
                request.app[METRICS].inc(FRAMES, outcome=refusal.code)
                await ws.send_json(frame)
            elif msg.type == WSMsgType.ERROR:
                return
    finally:
        open_sockets.discard(ws)


async def _attach(request: web.Request) -> tuple[WebChat, int, bool]:
    """The session the socket asks for (or a new one), the seq to replay after, and whether
    the session is stored (a new one, or one given out and not used yet, is not)."""
    query = request.query
    after = _after(query.get("after", "0"))
    ids = request.app[WEB_IDS]
    if "session_id" not in query:
        return WebChat.of(ids.issue()), 0, False
    sid = query["session_id"]
    if not sid:
        raise Refused("session_not_connected", "session_id is empty: connect without it")
    if not WEB_SESSION.fullmatch(sid):
        raise Refused("invalid_session_id", "session_id is not a web session id")
    store = request.app[STORE]
    try:
        session = await store.get_session(sid)
        if session is not None and after > 0 and not await _has_seq(store, sid, after):
            after = 0  # past the log's end: deleted since, its log began again (see below)
    except StoreError:
        raise Refused("store_unavailable", "the store does not answer; connect again") from None
    if session is None and ids.issued(sid):
        # Not stored (yet, or again since an operator deleted it): its log is empty, and
        # whatever comes next is new to the client, whatever seq it saw before.
        return WebChat.of(sid), 0, False
    if session is None or session.channel != CHANNEL:
        raise Refused("unknown_session", "no such web session")
    return WebChat(session.session_id, session.chat_id), after, True


async def _has_seq(store: Store, session_id: str, seq: int) -> bool:
    """Whether the session's log holds the event ``seq`` (a client reattaching after it)."""
    return bool(await store.list_events(session_id, after=seq - 1, limit=1))


def _after(raw: str) -> int:
    if not (raw.isascii() and raw.isdecimal()) or len(raw) > 18:
        raise Refused("invalid_after", "after must be a seq number, 0 or more")
    return int(raw)


async def _pump(
    store: Store, socket: Socket, after: int, wake: asyncio.Event, stored: bool
) -> None:
    """The session's log to the socket (see ``follow_log``) until the socket or session goes;
    a session not ``stored`` yet has an empty log until its first message stores it."""
    sid = socket.session.session_id

    async def send(event: SessionEvent) -> None:
        await socket.send(event_frame(event))

    try:
        await follow_log(store, sid, after, wake, send, stored=stored)
    except ConnectionError:
        return  # the socket went while an event was on its way: the reader ends the handler
    except StoreError as exc:
        log.info("web session %s: log not readable: %s", short(sid), type(exc).__name__)
        await socket.send(error_frame("session_gone", "the session was deleted or is away"))
        await socket.ws.close(code=4004, message=b"session_gone")


async def _read(request: web.Request, socket: Socket) -> None:
    """Answer the client's frames until it goes; a bad frame costs an error frame, no more."""
    limit = request.app[SETTINGS].web.max_frame_bytes
    metrics = request.app[METRICS]
    sid = socket.session.session_id
    async for msg in socket.ws:
        if msg.type == WSMsgType.TEXT:
            try:
                if len(msg.data.encode()) > limit:
                    raise FrameError("frame_too_large", f"a frame may hold {limit} bytes")
                await _handle(request, socket, msg.data)
                metrics.inc(FRAMES, outcome="ok")
            except FrameError as exc:
                metrics.inc(FRAMES, outcome=exc.code)
                await socket.send(error_frame(exc.code, exc.message, exc.client_id))
            except StoreError as exc:  # a cancel's relay, an attachment's lookup: send it again
                log.warning("web session %s: the store failed (%s)", short(sid), exc.code)
                metrics.inc(FRAMES, outcome="store_unavailable")
                failed = "the store did not answer; send it again"
                await socket.send(error_frame("store_unavailable", failed))
        elif msg.type == WSMsgType.BINARY:
            metrics.inc(FRAMES, outcome="binary_frame")
            await socket.send(error_frame("binary_frame", "frames are JSON text"))
        elif msg.type == WSMsgType.ERROR:
            return


async def _handle(request: web.Request, socket: Socket, text: str) -> None:
    frame = parse_frame(text)
    if isinstance(frame, CancelFrame):
        dispatcher = request.app.get(DISPATCHER)
        taken = False if dispatcher is None else await dispatcher.cancel(socket.session.session_id)
        if taken is None:
            raise FrameError(CANCEL_UNANSWERED, UNANSWERED_TEXT)
        if not taken:
            why = await not_stopped(request.app[STORE], socket.session.session_id)
            raise FrameError("no_turn_running", why)
        return
    await _message(request, socket, frame.data)


async def _message(request: web.Request, socket: Socket, data: MessageData) -> None:
    """Check, record durably, then ack (a duplicate is acked too, so the client stops)."""
    config = request.app[SETTINGS].web
    cid = data.client_id
    if len(data.text) > config.max_text_chars:
        raise FrameError("text_too_long", f"text may hold {config.max_text_chars} chars", cid)
    if not data.text.strip() and not data.attachments:
        raise FrameError("empty_message", "a message needs text or attachments", cid)
    if len(data.attachments) > config.max_attachments:
        raise FrameError("too_many_attachments", f"at most {config.max_attachments}", cid)
    await _check_attachments(request.app[STORE], socket.session, data)
    chat_id = socket.session.chat_id
    body = web_body(chat_id, cid, data.text, data.attachments)
    item = DeliveryIn(CHANNEL, None, body, (web_dedup_key(chat_id, cid),))
    backlog = request.app[BACKLOG]
    if backlog.full():  # as a webhook gets 503: nothing is stored, the client sends it later
        raise FrameError("backlog_full", "too many messages wait for an answer; retry later", cid)
    backlog.submitted()
    result = None
    try:
        result = await request.app[WRITER].submit(item)
    except Exception as exc:  # whatever the store raised: the client keeps it and re-sends
        log.warning("web message not recorded: %s", type(exc).__name__)
        raise FrameError("store_unavailable", "not recorded; send it again", cid) from None
    finally:
        backlog.settled(stored=result is not None and result.delivery_id is not None)
    duplicate = result.delivery_id is None
    await socket.send({"type": "ack", "data": {"client_id": cid, "duplicate": duplicate}})


async def _check_attachments(store: Store, session: WebChat, data: MessageData) -> None:
    for attachment_id in data.attachments:
        try:
            found = await store.get_attachment(session.session_id, attachment_id)
        except ValueError:
            found = None
        if found is None or found.state != "ready":
            raise FrameError(
                "unknown_attachment", f"no attachment {attachment_id!r} here", data.client_id
            )


def add_ws_route(app: web.Application) -> None:
    """Register ``GET /ws``."""
    app.router.add_get("/ws", json_http_errors(websocket))  # not a handshake: a JSON 400
