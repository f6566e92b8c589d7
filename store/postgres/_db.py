"""A pool of asyncpg connections; every call runs on one of them, in one transaction.

``read`` runs a function of the connection in a read-only REPEATABLE READ transaction (one
snapshot for all its statements); ``write`` in a READ COMMITTED one, committed if the function
returns. ``query`` and ``write_one`` are for functions that send one statement: it is its own
transaction, so they send no ``BEGIN`` and ``COMMIT``. Writes that must not interleave with
another process's (a session's event numbers, its status) take row locks or a per-session
advisory lock inside the function.

Each ``write`` keeps a per-transaction ``Tx`` (in a context variable, so the statement modules
reach it without another argument): the event helpers of ``_sql_sessions`` note there every
session they insert events for, and once committed ``write`` tells the listeners, as the SQLite
backend's TEMP trigger does. Nothing is read back before the COMMIT. The trigger on
``session_events`` still notes the sessions in the transaction-local ``gateway.touched``
setting; ``Database.verify_events`` (tests) compares the two before each COMMIT, so a path
that inserts events without telling the collector fails there. ``Tx`` also remembers which
sessions' rows the transaction has locked, so a second lock of the same row is not sent.

Every pooled connection carries its store's owner in the ``gateway.origin`` setting; the
triggers on ``inbox`` and ``outbox`` put it in their notifications, so a store that listens
(``_work.watch``) can tell other processes' rows from its own. That startup setting is the only
session state the store keeps (every other setting is transaction-local, every lock a row or
transaction lock, no LISTEN or cursor on a pooled connection), so a connection goes back to the
pool without asyncpg's reset query (``RESET ALL``, ``UNLISTEN *``...): one round trip less
per call. An open transaction is still rolled back by the pool at release.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from typing import TypeVar, cast

import asyncpg

from .._errors import StoreError
from ._pool_log import pool_errors_in_one_line
from ._schema import migrate
from ._url import login_of, unreadable_file

log = logging.getLogger("store.postgres")  # the names operators filter on stay short

T = TypeVar("T")
Fn = Callable[[asyncpg.Connection], Awaitable[T]]
EventListener = Callable[[frozenset[str]], None]

TOUCHED = "SELECT current_setting('gateway.touched', true)"
ORIGIN_SETTING = "gateway.origin"  # read by the inbox and outbox triggers (_schema.py)


class Tx:
    """What one ``Database.write`` transaction has done so far, for the statement modules."""

    __slots__ = ("events", "locked")

    def __init__(self) -> None:
        self.events: set[str] = set()  # sessions that got an event row
        self.locked: set[str] = set()  # sessions whose row this transaction has locked


_TX: ContextVar[Tx | None] = ContextVar("store_postgres_tx", default=None)


def noted_events(session_ids: Iterable[str]) -> None:
    """Tell the running write that these sessions got events (their listeners hear it)."""
    tx = _TX.get()
    if tx is not None:
        tx.events.update(session_ids)


def noted_locked(session_ids: Iterable[str]) -> None:
    """Tell the running write that its transaction now holds these sessions' row locks."""
    tx = _TX.get()
    if tx is not None:
        tx.locked.update(session_ids)


def holds_lock(session_id: str) -> bool:
    """Whether the running write's transaction already locked this session's row."""
    tx = _TX.get()
    return tx is not None and session_id in tx.locked


class _Connection(asyncpg.Connection):
    """A pool connection released without a reset query (see the module docstring)."""

    def get_reset_query(self) -> str:
        return ""


class StoreUnavailable(StoreError):
    """The database did not answer (connection refused, lost, or timed out)."""

    code = "store_unavailable"


# Errors of a server that cannot do the work now, whatever the statement: the standby (or the
# old primary) a failover left the url pointing at, a shutdown, a start, no connection slot.
# Transient like a lost connection: the caller's work is refused as the store being down, and
# the loops that poll, renew the lease and send go on, instead of stopping on a raw asyncpg error.
_CANNOT_SERVE: dict[type[asyncpg.PostgresError], str] = {
    asyncpg.ReadOnlySQLTransactionError: "it is read-only: a standby, or a failover under way",
    asyncpg.AdminShutdownError: "it is shutting down",
    asyncpg.CrashShutdownError: "it is restarting after a crash",
    asyncpg.CannotConnectNowError: "it is starting up or recovering",
    asyncpg.TooManyConnectionsError: "it has no connection slot left (max_connections)",
}
SERVER_CANNOT_SERVE: tuple[type[asyncpg.PostgresError], ...] = tuple(_CANNOT_SERVE)


def unavailable(exc: BaseException) -> StoreUnavailable:
    """StoreUnavailable for a connection error, naming its type only, or for a server that
    cannot serve now (``SERVER_CANNOT_SERVE``), naming its SQLSTATE and why."""
    # The exception's text may carry the host or the user; its type says enough to act on.
    name = type(exc).__name__
    if isinstance(exc, SERVER_CANNOT_SERVE):
        why = next(text for kind, text in _CANNOT_SERVE.items() if isinstance(exc, kind))
        return StoreUnavailable(
            f"the PostgreSQL server cannot do the work now: {why} ({exc.sqlstate} {name})"
        )
    return StoreUnavailable(f"the PostgreSQL database did not answer ({name})")


async def _unpooled_if_half_sent(fn: Fn[T], conn: asyncpg.Connection) -> T:
    """``fn(conn)``; a connection it leaves with a statement half sent is closed, not pooled.

    asyncpg (0.32) raises a plain ``DataError`` when it cannot encode an argument of a
    statement it is preparing (an integer past 64 bits), after sending part of it outside a
    transaction: the connection's next transaction with an isolation level then fails on the
    server (ActiveSQLTransactionError). The pool replaces a closed connection.
    """
    try:
        return await fn(conn)
    except asyncpg.DataError as exc:
        if type(exc) is asyncpg.DataError:  # the server's own are subclasses, and end cleanly
            conn.terminate()
        raise


def _refused(exc: asyncpg.PostgresError, url: str) -> StoreError:
    """The server's refusal of a new connection, in words: which role or database."""
    role, database = login_of(url)
    if isinstance(exc, asyncpg.InvalidPasswordError):
        why = f"the PostgreSQL server refused the login for role {role!r}: wrong or no password"
    elif isinstance(exc, asyncpg.InvalidAuthorizationSpecificationError):
        why = (
            f"the PostgreSQL server refused the login for role {role!r}: no such role, or"
            " pg_hba.conf does not let it in"
        )
    elif isinstance(exc, asyncpg.InvalidCatalogNameError):
        why = f"database {database!r} does not exist on the PostgreSQL server"
    else:
        why = "PostgreSQL refused the connection"
    # The server's own text is left out: it may name the client's address.
    return StoreError(f"{why} ({exc.sqlstate} {type(exc).__name__})")


@contextmanager
def _connecting(url: str) -> Iterator[None]:
    """The failures of a first connection as StoreErrors, without the url."""
    try:
        yield
    except asyncpg.ClientConfigurationError as exc:  # e.g. sslmode=verify-full, no root.crt
        first = str(exc).splitlines()[0]  # the next lines are a HINT
        raise StoreError(f"asyncpg cannot use the PostgreSQL url's settings: {first}") from None
    except asyncpg.ProtocolViolationError as exc:
        if ORIGIN_SETTING not in str(exc):
            raise unavailable(exc) from None
        # PgBouncer: "unsupported startup parameter: gateway.origin", in any pool mode.
        raise StoreError(
            f"the server refused the {ORIGIN_SETTING} startup setting ({exc.sqlstate}"
            f" {type(exc).__name__}): a connection pooler such as PgBouncer is in front of"
            " PostgreSQL; the url must reach PostgreSQL itself"
            " (docs/deployment.md#pool-sizes)"
        ) from None
    except CONNECTION_ERRORS as exc:
        unreadable = unreadable_file(url)
        if unreadable is not None:
            message = f"the PostgreSQL url names a file that cannot be read: {unreadable}"
            raise StoreError(message) from None
        raise unavailable(exc) from None
    except asyncpg.PostgresError as exc:  # e.g. an unknown database or a refused login
        raise _refused(exc, url) from None


CONNECTION_ERRORS = (OSError, asyncpg.InterfaceError, asyncpg.PostgresConnectionError)
# What a call on an open pool reports as StoreUnavailable. Not in ``read``: its transaction
# is read-only itself, so a ReadOnlySQLTransactionError there is a write it must not hold.
UNAVAILABLE: tuple[type[BaseException], ...] = (*CONNECTION_ERRORS, *SERVER_CANNOT_SERVE)
_READ_CANNOT_SERVE = tuple(
    kind for kind in SERVER_CANNOT_SERVE if kind is not asyncpg.ReadOnlySQLTransactionError
)
_READ_UNAVAILABLE: tuple[type[BaseException], ...] = (*CONNECTION_ERRORS, *_READ_CANNOT_SERVE)
# Two transactions that locked the same rows in different orders: PostgreSQL rolls one back.
RETRYABLE = (asyncpg.DeadlockDetectedError, asyncpg.SerializationError)
RETRIES = 5


async def connect(url: str, *, connect_timeout: float) -> asyncpg.Connection:
    """One connection of its own, outside the pool (``watch_work`` listens on it); the errors
    of ``Database.open``, without the url."""
    with _connecting(url):
        conn: asyncpg.Connection = await asyncpg.connect(url, timeout=connect_timeout)
    return conn


def returned(row: asyncpg.Record | None) -> asyncpg.Record:
    """The row a ``RETURNING`` statement gave under a lock that made it certain."""
    if row is None:
        raise StoreError("a write gave back no row")
    return row


async def _verify(conn: asyncpg.Connection, tx: Tx) -> None:
    """AssertionError unless the trigger saw events for exactly the sessions ``tx`` noted."""
    touched = await conn.fetchval(TOUCHED)
    written = {s for s in (touched or "").split("\n") if s}
    if written != tx.events:
        raise AssertionError(f"event rows for {sorted(written)}, noted {sorted(tx.events)}")


class Database:
    """The store's pool; ``listeners`` hear, after each commit, which sessions got events."""

    # Tests: before each COMMIT, check the sessions noted for events against the trigger's.
    verify_events = False

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
        not a ``set_config`` at connect, so it would survive a ``RESET ALL`` too (none is sent at
        release any more: see the module docstring).
        """
        settings = {ORIGIN_SETTING: owner} if owner else None
        pool_errors_in_one_line()
        with _connecting(url):
            pool = await asyncpg.create_pool(
                url,
                min_size=min_size,
                max_size=max_size,
                timeout=connect_timeout,
                command_timeout=60,
                server_settings=settings,
                connection_class=_Connection,
            )
        try:
            async with pool.acquire() as proxy:
                await migrate(cast(asyncpg.Connection, proxy))
        except BaseException as exc:
            await pool.close()
            if isinstance(exc, UNAVAILABLE):  # e.g. a standby: the migrations cannot write
                raise unavailable(exc) from None
            raise
        return cls(pool)

    async def call(self, fn: Fn[T]) -> T:
        """``fn(connection)`` outside an explicit transaction (each statement its own)."""
        self._check_open()
        try:
            async with self._acquired() as conn:
                return await _unpooled_if_half_sent(fn, conn)
        except UNAVAILABLE as exc:
            raise unavailable(exc) from None

    async def query(self, fn: Fn[T]) -> T:
        """``fn`` that sends ONE read-only statement: no transaction around it (a statement
        sees one snapshot of its own), so no ``BEGIN`` and ``COMMIT`` round trips."""
        return await self.call(fn)

    async def read(self, fn: Fn[T]) -> T:
        """``fn`` in a read-only transaction with one snapshot."""
        self._check_open()
        try:
            async with (
                self._acquired(_READ_CANNOT_SERVE) as conn,
                conn.transaction(isolation="repeatable_read", readonly=True),
            ):
                return await fn(conn)
        except _READ_UNAVAILABLE as exc:
            raise unavailable(exc) from None

    async def write(self, fn: Fn[T], *, urgent: bool = False) -> T:
        """``fn`` in a transaction, committed if it returns; then the listeners hear of events.

        ``urgent`` is accepted for the protocol's sake: each write has its own connection here,
        so an ack never queues behind another write's transaction.
        """
        del urgent
        return await self._write(fn, one_statement=False)

    async def write_one(self, fn: Fn[T]) -> T:
        """``write`` for ``fn`` that sends ONE data-modifying statement (and reads only if it
        failed): no transaction around it, since a statement commits on its own, whole or not
        at all; so no ``BEGIN`` and ``COMMIT`` round trips. (With ``verify_events`` on it runs
        in a transaction, where the trigger's setting can be read before the COMMIT.)"""
        return await self._write(fn, one_statement=not self.verify_events)

    async def _write(self, fn: Fn[T], *, one_statement: bool) -> T:
        self._check_open()
        for attempt in range(1, RETRIES + 1):
            try:
                tx = Tx()
                token = _TX.set(tx)
                try:
                    async with self._acquired() as conn:
                        if one_statement:
                            result = await _unpooled_if_half_sent(fn, conn)
                        else:
                            async with conn.transaction():
                                result = await fn(conn)
                                if self.verify_events:
                                    await _verify(conn, tx)
                finally:
                    _TX.reset(token)
                break
            except UNAVAILABLE as exc:
                raise unavailable(exc) from None
            except RETRYABLE:  # rolled back whole: the function only wrote to the database
                if attempt == RETRIES:
                    raise
                log.debug("write rolled back by a conflict; trying again (%d)", attempt)
        if tx.events:
            sessions = frozenset(tx.events)
            for listener in list(self.listeners):
                listener(sessions)
        return result

    @asynccontextmanager
    async def _acquired(
        self, cannot_serve: tuple[type[asyncpg.PostgresError], ...] = SERVER_CANNOT_SERVE
    ) -> AsyncIterator[asyncpg.Connection]:
        """A pool connection; one whose server cannot serve now (``cannot_serve``: a standby
        reached during a failover, say) is closed rather than pooled again, so the pool's next
        connection may reach the primary."""
        async with self._pool.acquire() as proxy:
            conn = cast(asyncpg.Connection, proxy)
            try:
                yield conn
            except cannot_serve:
                conn.terminate()
                raise

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("the store is closed")

    async def close(self) -> None:
        """Close the pool once its connections are released; idempotent."""
        if not self._closed:
            self._closed = True
            await self._pool.close()
