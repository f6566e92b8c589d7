"""Operator writes to one session in this process, one at a time.

A reply, a template, a handoff or a rewind from the admin API is a short write of its own (a
turn, ``store.turn``, that commits at once, or one transaction). Two meeting in the store, say
two operators answering the same user or one operator's double submit, would have the second
refused (TurnActive: a session has one turn open in a process) as if a model turn ran. So the
admin API queues them here, per session, in the order they come: an ``asyncio.Lock`` kept only
while a request holds it or waits for it (memory grows with the requests in flight, not with
the sessions ever written to), waited for at most ``WAIT_SECONDS``. A model turn takes no lock:
an operator write that meets one is still refused by the store (409 ``run_active``), and so is
one that meets a write of another process (RunActive).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

# Longer than a write takes, even one that waits out SQLite's busy timeout (5 s) once.
WAIT_SECONDS = 10.0


class WaitedTooLong(Exception):
    """The session's earlier operator writes did not finish within the wait."""

    def __init__(self, session_id: str, seconds: float) -> None:
        super().__init__(
            f"session {session_id!r}: another operator's write did not finish within"
            f" {seconds:g} s; try again soon"
        )
        self.session_id = session_id
        self.seconds = seconds


class _Queue:
    """A session's lock and how many requests hold it or wait for it."""

    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


class OperatorWrites:
    """Per-session locks of the admin API's writes (see the module docstring)."""

    def __init__(self, wait: float = WAIT_SECONDS) -> None:
        self._wait = wait
        self._queues: dict[str, _Queue] = {}

    def __len__(self) -> int:
        """The sessions with a write held or waiting."""
        return len(self._queues)

    @asynccontextmanager
    async def one_at_a_time(self, session_id: str) -> AsyncIterator[None]:
        """Hold ``session_id``'s lock, after the writes that came first (first come, first
        served); WaitedTooLong, holding nothing, if they do not finish within the wait."""
        queue = self._queues.get(session_id)
        if queue is None:
            queue = self._queues[session_id] = _Queue()
        queue.users += 1
        try:
            try:
                async with asyncio.timeout(self._wait):
                    await queue.lock.acquire()
            except TimeoutError:
                raise WaitedTooLong(session_id, self._wait) from None
            try:
                yield
            finally:
                queue.lock.release()
        finally:
            queue.users -= 1
            if not queue.users:
                del self._queues[session_id]
