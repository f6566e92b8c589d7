"""Wakes the ``/ws`` sockets of a session when its event log grows.

The store tells the feed, after each commit of this process, which sessions got events; each
watching socket then reads its log after the last seq it sent. The feed carries no events
itself, so a missed or doubled wake-up cannot lose or repeat one: the log is the only source.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager


class EventFeed:
    """Session id -> the wake-up events of the sockets watching it."""

    def __init__(self) -> None:
        self._watchers: dict[str, set[asyncio.Event]] = {}

    def notify(self, session_ids: frozenset[str]) -> None:
        """The store's listener: these sessions' logs grew."""
        for sid in session_ids:
            for wake in self._watchers.get(sid, ()):
                wake.set()

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

    def watching(self, session_id: str) -> int:
        """How many sockets watch the session now."""
        return len(self._watchers.get(session_id, ()))
