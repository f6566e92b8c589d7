"""A pool of asyncpg connections; every call runs in one transaction on one of them.

``read`` runs a function of the connection in a read-only REPEATABLE READ transaction (one
snapshot for all its statements); ``write`` in a READ COMMITTED one, committed if the function
returns. Writes that must not interleave with another process's (a session's event numbers,
its status) take row locks or a per-session advisory lock inside the function.

A trigger on ``session_events`` notes every session that gets an event in a transaction-local
setting; ``write`` reads it just before the COMMIT and, once committed, tells the listeners,
as the SQLite backend's TEMP trigger does. No write path can forget to wake the watchers.

Every pooled connection carries its store's owner in the ``gateway.origin`` setting; the
triggers on ``inbox`` and ``outbox`` put it in their notifications, so a store that listens
(``_work.watch``) can tell other processes' rows from its own.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar, cast

import asyncpg

from .._errors import StoreError
from ._schema import migrate

log = logging.getLogger(__name__)

T = TypeVar("T")
Fn = Callable[[asyncpg.Connection], Awaitable[T]]
EventListener = Callable[[frozenset[str]], None]

TOUCHED = "SELECT current_setting('gateway.touched', true)"
ORIGIN_SETTING = "gateway.origin"  # read by the inbox and outbox triggers (_schema.py)


class StoreUnavailable(StoreError):
    """The database did not answer (connection refused, lost, or timed out)."""

    code = "store_unavailable"


def unavailable(exc: BaseException) -> StoreUnavailable:
    """StoreUnavailable for a connection error, naming its type only."""
    # The exception's text may carry the host or the user; its type says enough to act on.
    return StoreUnavailable(f"the PostgreSQL database did not answer ({type(exc).__name__})")


def _refused(exc: asyncpg.PostgresError) -> StoreError:
    return StoreError(f"PostgreSQL refused the connection: {exc.sqlstate} {type(exc).__name__}")


CONNECTION_ERRORS = (OSError, asyncpg.InterfaceError, asyncpg.PostgresConnectionError)
# Two transactions that locked the same rows in different orders: PostgreSQL rolls one back.
RETRYABLE = (asyncpg.DeadlockDetectedError, asyncpg.SerializationError)
RETRIES = 5


async def connect(url: str, *, connect_timeout: float) -> asyncpg.Connection:
    """One connection of its own, outside the pool (``watch_work`` listens on it); the errors
    of ``Database.open``, without the url."""
    try:
        return await asyncpg.connect(url, timeout=connect_timeout)
    except CONNECTION_ERRORS as exc:
        raise unavailable(exc) from None
    except asyncpg.PostgresError as exc:
        raise _refused(exc) from None


def returned(row: asyncpg.Record | None) -> asyncpg.Record:
    """The row a ``RETURNING`` statement gave under a lock that made it certain."""
    if row is None:
        raise StoreError("a write gave back no row")
    return row


class Database:
    """The store's pool; ``listeners`` hear, after each commit, which sessions got events."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._closed = False
        self.listeners: list[EventListener] = []

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        min_size: int,
        max_size: int,
        connect_timeout: float,
        owner: str = "",
    ) -> Database:
        """Connect, refuse a too-new schema and apply the migrations.

        ``owner`` (the store's) becomes every connection's ``gateway.origin`` setting: the
        notifications of the rows it writes carry it. It is a startup setting of the session,
        not a ``set_config`` at connect: the pool's ``RESET ALL`` at each release would undo that.
        """
        settings = {ORIGIN_SETTING: owner} if owner else None
        try:
            pool = await asyncpg.create_pool(
                url,
                min_size=min_size,
                max_size=max_size,
                timeout=connect_timeout,
                command_timeout=60,
                server_settings=settings,
            )
        except CONNECTION_ERRORS as exc:
            raise unavailable(exc) from None
        except asyncpg.PostgresError as exc:  # e.g. an unknown database or a refused login
            raise _refused(exc) from None
        try:
            async with pool.acquire() as proxy:
                await migrate(cast(asyncpg.Connection, proxy))
        except BaseException:
            await pool.close()
            raise
        return cls(pool)

    async def call(self, fn: Fn[T]) -> T:
        """``fn(connection)`` outside an explicit transaction (each statement its own)."""
        self._check_open()
        try:
            async with self._pool.acquire() as proxy:
                return await fn(cast(asyncpg.Connection, proxy))
        except CONNECTION_ERRORS as exc:
            raise unavailable(exc) from None

    async def read(self, fn: Fn[T]) -> T:
        """``fn`` in a read-only transaction with one snapshot."""
        self._check_open()
        try:
            async with (
                self._pool.acquire() as proxy,
                proxy.transaction(isolation="repeatable_read", readonly=True),
            ):
                return await fn(cast(asyncpg.Connection, proxy))
        except CONNECTION_ERRORS as exc:
            raise unavailable(exc) from None

    async def write(self, fn: Fn[T], *, urgent: bool = False) -> T:
        """``fn`` in a transaction, committed if it returns; then the listeners hear of events.

        ``urgent`` is accepted for the protocol's sake: each write has its own connection here,
        so an ack never queues behind another write's transaction.
        """
        del urgent
        self._check_open()
        for attempt in range(1, RETRIES + 1):
            try:
                async with self._pool.acquire() as proxy, proxy.transaction():
                    result = await fn(cast(asyncpg.Connection, proxy))
                    touched = await proxy.fetchval(TOUCHED)
                break
            except CONNECTION_ERRORS as exc:
                raise unavailable(exc) from None
            except RETRYABLE:  # rolled back whole: the function only wrote to the database
                if attempt == RETRIES:
                    raise
                log.debug("write rolled back by a conflict; trying again (%d)", attempt)
        if touched:
            sessions = frozenset(s for s in touched.split("\n") if s)
            for listener in list(self.listeners):
                listener(sessions)
        return result

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("the store is closed")

    async def close(self) -> None:
        """Close the pool once its connections are released; idempotent."""
        if not self._closed:
            self._closed = True
            await self._pool.close()
