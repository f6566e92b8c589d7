"""Group commit for every write of a connection: the writes queued while one transaction runs
share the next one, each inside its own SAVEPOINT.

A write is still atomic on its own (a write that raises is rolled back to its savepoint, and
only its caller hears of it) and durable when its caller resumes (after the shared COMMIT),
but N writes that arrive together cost one disk flush instead of N. Writes run in the order
they were queued, as before; one whose caller was cancelled still runs (callers rely on it).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

MAX_BATCH = 256  # writes per shared transaction

Write = Callable[[sqlite3.Connection], Any]
Outcome = tuple[bool, Any]  # (ok, result or the exception)


class Touched:
    """Sessions that got events in the transaction under way (worker thread only).

    A TEMP trigger calls ``add`` for every row inserted into ``session_events``, whichever
    statement inserted it, so no write path can forget to wake the watchers.
    """

    def __init__(self) -> None:
        self.sessions: set[str] = set()

    def add(self, session_id: str) -> None:
        self.sessions.add(session_id)

    def take(self) -> frozenset[str]:
        taken = frozenset(self.sessions)
        self.sessions.clear()
        return taken


def run_batch(
    touched: Touched, writes: list[Write], conn: sqlite3.Connection
) -> tuple[list[Outcome], frozenset[str]]:
    """On the worker thread: every write in one BEGIN IMMEDIATE .. COMMIT, each in a savepoint.

    Returns each write's outcome and the sessions that got events. A failing COMMIT raises,
    and then no write of the batch happened.
    """
    touched.take()  # nothing of an earlier, rolled-back transaction may leak into this one
    conn.execute("BEGIN IMMEDIATE")
    try:
        outcomes = [_one(write, conn) for write in writes]
        conn.commit()
    except BaseException:
        if conn.in_transaction:
            conn.rollback()
        touched.take()
        raise
    return outcomes, touched.take()


def _one(write: Write, conn: sqlite3.Connection) -> Outcome:
    conn.execute("SAVEPOINT write")
    try:
        result = write(conn)
    except Exception as exc:  # this write alone is undone; the others go on
        conn.execute("ROLLBACK TO write")
        conn.execute("RELEASE write")
        return False, exc
    conn.execute("RELEASE write")
    return True, result


@dataclass
class _Queued:
    write: Write
    future: asyncio.Future[Any]


class GroupCommit:
    """Queues writes and runs each queue's worth in one transaction, one batch at a time."""

    def __init__(
        self,
        execute: Callable[[Callable[[sqlite3.Connection], Any]], Awaitable[Any]],
        touched: Touched,
        on_events: Callable[[frozenset[str]], None],
    ) -> None:
        self._execute = execute  # runs a function of the connection on its worker thread
        self._touched = touched
        self._on_events = on_events
        self._queue: list[_Queued] = []
        self._urgent: list[_Queued] = []
        self._flusher: asyncio.Task[None] | None = None
        self.batches = 0  # transactions run, for tests and benchmarks
        self.writes = 0

    async def write(self, write: Write, *, urgent: bool = False) -> Any:
        """Queue ``write``; its result once the transaction holding it has committed.

        An ``urgent`` write (a webhook's ack waits on it) goes into the next transaction ahead
        of the others; writes of one kind keep their order. (Capping the others in such a
        transaction, to shorten it, cost the pipeline more flushes than it gave the acks.)
        """
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        (self._urgent if urgent else self._queue).append(_Queued(write, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush(), name="store group commit")
        return await future

    async def drain(self) -> None:
        """Until every queued write has run (before the connection closes)."""
        if self._flusher is not None:
            await asyncio.gather(self._flusher, return_exceptions=True)

    async def _flush(self) -> None:
        try:
            while self._queue or self._urgent:
                await self._commit(self._take())
        except BaseException:
            # Cancelled (the loop is shutting down): nobody will run what is still queued.
            for queued in [*self._urgent, *self._queue]:
                queued.future.cancel()
            self._urgent.clear()
            self._queue.clear()
            raise

    def _take(self) -> list[_Queued]:
        urgent = self._urgent[:MAX_BATCH]
        del self._urgent[:MAX_BATCH]
        room = MAX_BATCH - len(urgent)
        rest = self._queue[:room]
        del self._queue[:room]
        return [*urgent, *rest]

    async def _commit(self, batch: list[_Queued]) -> None:
        writes = [queued.write for queued in batch]
        try:
            outcomes, touched = await self._execute(
                lambda conn: run_batch(self._touched, writes, conn)
            )
        except Exception as exc:  # the COMMIT failed: no write of the batch happened
            for queued in batch:
                if not queued.future.done():
                    queued.future.set_exception(exc)
            return
        except BaseException:
            for queued in batch:
                queued.future.cancel()
            raise
        self.batches += 1
        self.writes += len(batch)
        if touched:
            self._on_events(touched)
        for queued, (ok, value) in zip(batch, outcomes, strict=True):
            if queued.future.done():
                continue  # its caller was cancelled; the write itself committed
            if ok:
                queued.future.set_result(value)
            else:
                queued.future.set_exception(value)
