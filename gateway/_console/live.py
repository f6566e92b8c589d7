"""``/console/live``: the console's live feed over one WebSocket.

The first frame must be ``{"type": "auth", "ticket"}`` with a ticket from
``POST /api/console/ticket`` (so the admin token never travels in a URL). Then the server sends
``sessions_changed`` whenever any session changes, and, for the session the client ``watch``es
(``{"type": "watch", "session_id", "after"}``), that session's log after ``after`` then live,
each event once and in seq order, exactly as ``/ws`` does for a web user.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from aiohttp import WSMsgType, web

from webhook_bot_gateway.store import (
    InvalidSessionId,
    SessionEvent,
    StoreError,
    validate_session_id,
)

from .._admin._api_models import MAX_ROW_ID
from .._keys import FEED, SOCKETS, STORE
from .._wait import wait_event
from .._web.feed import Changes, follow_log
from .keys import TICKETS
from .others import POLL_SECONDS, OthersChanges

log = logging.getLogger("gateway.console")

AUTH_SECONDS = 10.0  # a socket that does not authenticate within this is closed


class Live:
    """One console socket: frames out under one lock; at most one watched session."""

    def __init__(self, request: web.Request, ws: web.WebSocketResponse) -> None:
        self.app = request.app
        self.ws = ws
        self._lock = asyncio.Lock()
        self._watching: asyncio.Task[None] | None = None

    async def send(self, frame: dict[str, Any]) -> None:
        async with self._lock:
            await self.ws.send_json(frame)

    async def error(self, code: str, message: str) -> None:
        await self.send({"type": "error", "data": {"code": code, "message": message}})

    async def watch(self, session_id: str, after: int) -> None:
        await self.unwatch()
        self._watching = asyncio.create_task(self._follow(session_id, after))

    async def unwatch(self) -> None:
        if self._watching is not None:
            self._watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watching
            self._watching = None

    async def _follow(self, session_id: str, after: int) -> None:
        async def send(event: SessionEvent) -> None:
            frame = {"type": event.kind, "session_id": session_id, "seq": event.seq}
            await self.send({**frame, "data": {**event.detail, "at": event.created_at.isoformat()}})

        with self.app[FEED].watch(session_id) as wake:
            try:
                await follow_log(self.app[STORE], session_id, after, wake, send)
            except ConnectionError:
                return
            except StoreError:
                await self.error("unknown_session", f"no session {session_id!r} (any more)")

    async def changes(self, changes: Changes, others: OthersChanges) -> None:
        """Tell the client which sessions changed: this process's as they do, other processes'
        at the next poll (``others.py``)."""
        with contextlib.suppress(ConnectionError):
            while True:
                if not await wait_event(changes.event, POLL_SECONDS):
                    try:
                        changes.sessions.update(await others.changed())
                    except StoreError as exc:
                        log.debug("console poll of the sessions failed: %s", exc)
                if changes.sessions:
                    await self.send({"type": "sessions_changed", "session_ids": changes.take()})


async def live(request: web.Request) -> web.WebSocketResponse:
    """GET /console/live"""
    ws = web.WebSocketResponse(heartbeat=30.0, max_msg_size=64 * 1024)
    await ws.prepare(request)
    socket = Live(request, ws)
    if not await _authenticated(request, ws):
        await socket.error("unauthorized", "send a fresh ticket from POST /api/console/ticket")
        await ws.close(code=4001, message=b"unauthorized")
        return ws
    others = OthersChanges(request.app[STORE])
    await others.start()  # before "ready": what changes after it is announced
    await socket.send({"type": "ready"})
    open_sockets = request.app[SOCKETS]
    open_sockets.add(ws)
    with request.app[FEED].watch_all() as changes:
        notifier = asyncio.create_task(socket.changes(changes, others))
        try:
            await _read(socket)
        finally:
            open_sockets.discard(ws)
            notifier.cancel()
            await socket.unwatch()
            with contextlib.suppress(asyncio.CancelledError):
                await notifier
    return ws


async def _authenticated(request: web.Request, ws: web.WebSocketResponse) -> bool:
    try:
        message = await ws.receive(timeout=AUTH_SECONDS)
    except TimeoutError:
        return False
    if message.type != WSMsgType.TEXT:
        return False
    frame = _load(message.data)
    if frame is None or frame.get("type") != "auth":
        return False
    return request.app[TICKETS].redeem(frame.get("ticket"))


async def _read(socket: Live) -> None:
    async for message in socket.ws:
        if message.type != WSMsgType.TEXT:
            continue
        frame = _load(message.data)
        if frame is None:
            await socket.error("invalid_json", "a frame is a JSON object")
        elif frame.get("type") == "watch":
            await _watch(socket, frame)
        elif frame.get("type") == "unwatch":
            await socket.unwatch()
        else:
            await socket.error("unknown_type", "frames are watch and unwatch")


async def _watch(socket: Live, frame: dict[str, Any]) -> None:
    after = frame.get("after", 0)
    if isinstance(after, bool) or not isinstance(after, int) or not 0 <= after <= MAX_ROW_ID:
        await socket.error("invalid_after", f"after must be a seq number from 0 to {MAX_ROW_ID}")
        return
    try:
        session_id = validate_session_id(frame.get("session_id"))
    except InvalidSessionId as exc:
        await socket.error("invalid_session_id", str(exc))
        return
    await socket.watch(session_id, after)


def _load(text: str) -> dict[str, Any] | None:
    try:
        frame = json.loads(text)
    except ValueError:
        return None
    return frame if isinstance(frame, dict) else None
