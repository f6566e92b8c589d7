"""The connection a store listens on (``_work.watch``), opened again whenever it is lost.

A database restart or a failover cuts it as it cuts the pool's. The pool reconnects on its own;
this connection is opened again here, after a short wait that grows while the server stays
away. Meanwhile the dispatcher's and the sender's polls still find other processes' work, and a
cancel relayed to this process goes unanswered (its asker answers 503: try again).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import asyncpg

from ._db import CONNECTION_ERRORS, connect, unavailable

log = logging.getLogger("store.postgres")

# Seconds waited before each try to listen again; the last one repeats while the server is away.
RETRY_SECONDS = (0.0, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)

Handlers = dict[str, Callable[..., None]]  # channel -> asyncpg notification listener


class Listening:
    """``open`` connects and listens on every channel of ``heard``; a connection lost later is
    replaced in the background, until ``close``."""

    def __init__(self, url: str, heard: Handlers, connect_timeout: float) -> None:
        self._url = url
        self._heard = heard
        self._timeout = connect_timeout
        self._conn: asyncpg.Connection | None = None
        self._again: asyncio.Task[None] | None = None
        self._closing = False

    async def open(self) -> None:
        """Connect and listen; StoreUnavailable (or ``connect``'s StoreError) if it cannot."""
        conn = await connect(self._url, connect_timeout=self._timeout)
        try:
            conn.add_termination_listener(self._lost)
            for channel, listener in self._heard.items():
                await conn.add_listener(channel, listener)
        except BaseException as exc:
            conn.remove_termination_listener(self._lost)
            conn.terminate()
            if isinstance(exc, CONNECTION_ERRORS):
                raise unavailable(exc) from None
            raise
        self._conn = conn

    def _lost(self, conn: object) -> None:
        if self._closing or conn is not self._conn:
            return
        self._conn = None
        log.warning(
            "lost the PostgreSQL connection that hears of other processes' work and of the"
            " cancels they relay; connecting again (the polls still find the work, only later)"
        )
        self._again = asyncio.get_running_loop().create_task(self._listen_again())

    async def _listen_again(self) -> None:
        attempt = 0
        while True:
            await asyncio.sleep(RETRY_SECONDS[min(attempt, len(RETRY_SECONDS) - 1)])
            attempt += 1
            try:
                await self.open()
            except Exception as exc:  # StoreError, or whatever asyncpg raised: the next try
                log.debug("listening again failed (%s); try %d", type(exc).__name__, attempt)
                continue
            log.info("listening again for other processes' work (after %d tries)", attempt)
            return

    async def close(self) -> None:
        """Stop listening (and trying to) and close the connection."""
        self._closing = True
        if self._again is not None:
            self._again.cancel()
            await asyncio.gather(self._again, return_exceptions=True)
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.remove_termination_listener(self._lost)
            await _close(conn, self._heard, self._timeout)


async def _close(conn: asyncpg.Connection, heard: Handlers, close_timeout: float) -> None:
    """Stop listening and close; a connection that fails to close is dropped (the exception of
    the ``async with`` body, if any, is the one that matters)."""
    if conn.is_closed():
        return  # lost meanwhile
    try:
        for channel, listener in heard.items():
            await conn.remove_listener(channel, listener)
        await conn.close(timeout=close_timeout)
    except Exception as exc:
        conn.terminate()
        log.debug("closing the listening connection failed (%s)", type(exc).__name__)
    except BaseException:
        conn.terminate()
        raise
