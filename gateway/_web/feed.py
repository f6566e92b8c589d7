"""Wakes the ``/ws`` sockets of a session when its event log grows.

The store tells the feed, after each commit of this process, which sessions got events; each
watching socket then reads its log after the last seq it sent. The feed carries no events
itself, so a missed or doubled wake-up cannot lose or repeat one: the log is the only source.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

from webhook_bot_gateway.store import SessionEvent, SessionNotFound, Store

from .._wait import wait_event

PAGE = 500  # events read per query while replaying
POLL_SECONDS = 2.0  # the log is read this often even unwoken: commits of other processes
Send = Callable[[SessionEvent], Awaitable[None]]


class Changes:
    """The sessions that changed since the watcher last took them."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.sessions: set[str] = set()

    def take(self) -> list[str]:
        taken = sorted(self.sessions)
        self.sessions.clear()
        self.event.clear()
        return taken


class EventFeed:
    """Session id -> the wake-up events of the sockets watching it."""

    def __init__(self) -> None:
        self._watchers: dict[str, set[asyncio.Event]] = {}
        self._everything: set[Changes] = set()

    def notify(self, session_ids: frozenset[str]) -> None:
        """The store's listener: these sessions' logs grew."""
        for sid in session_ids:
            for wake in self._watchers.get(sid, ()):
                wake.set()
        for changes in self._everything:
            changes.sessions |= session_ids
            changes.event.set()

    @contextmanager
    def watch_all(self) -> Iterator[Changes]:
        """Every session that changes, while the ``with`` block lasts (the console's list)."""
        changes = Changes()
        self._everything.add(changes)
        try:
            yield changes
        finally:
            self._everything.discard(changes)

    @contextmanager
    def watch(self, session_id: str) -> Iterator[asyncio.Event]:
        """An event set whenever the session's log grows, while the ``with`` block lasts."""
        wake = asyncio.Event()
        self._watchers.setdefault(session_id, set()).add(wake)
        try:
            yield wake
        finally:
            watchers = self._watchers.get(session_id)
            if watchers is not None:
                watchers.discard(wake)
                if not watchers:
                    del self._watchers[session_id]


async def follow_log(
    store: Store,
    session_id: str,
    after: int,
    wake: asyncio.Event,
    send: Send,
    *,
    stored: bool = True,
) -> None:
    """Send the session's log after ``after``, then each new event, in seq order, each once.

    Runs until cancelled; the store's errors (a deleted session) end it by raising. A session
    not ``stored`` yet reads as an empty log until it is found once.
    """
    last = after
    while True:
        wake.clear()  # before the read: an event committed during it sets it again
        try:
            events = await store.list_events(session_id, after=last, limit=PAGE)
            stored = True
        except SessionNotFound:
            if stored:
                raise
            events = []
        for event in events:
            await send(event)
            last = event.seq
        if len(events) < PAGE:
            await wait_event(wake, POLL_SECONDS)
