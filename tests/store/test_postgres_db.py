"""The PostgreSQL store's connections: one that asyncpg left with a statement half sent is not
handed to the next caller; a server that cannot serve now (read-only, shutting down) is the
store being unavailable, as a lost connection is."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from tests.pg import fresh_schema
from webhook_bot_gateway.store import open_store
from webhook_bot_gateway.store.postgres._db import Database, StoreUnavailable

Run = Callable[[Database, Callable[[asyncpg.Connection], Awaitable[Any]]], Awaitable[Any]]


@pytest.fixture
async def db() -> AsyncIterator[Database]:
    async with fresh_schema() as url:  # skipped without GATEWAY_TEST_POSTGRES_URL
        opened = await Database.open(url, min_size=1, max_size=1, connect_timeout=5)
        try:
            yield opened
        finally:
            await opened.close()


@pytest.mark.parametrize("path", ["call", "query", "write_one"])
async def test_a_connection_after_an_argument_asyncpg_cannot_encode_serves_the_next_read(
    db: Database, path: str
) -> None:
    """asyncpg cannot encode 2**64 as a bigint, after sending part of the new statement; with
    that connection (the pool's only one) pooled again, the next read failed on the server
    with ActiveSQLTransactionError."""
    with pytest.raises(asyncpg.DataError, match="invalid input for query argument"):
        await getattr(db, path)(lambda conn: conn.fetch("SELECT $1::bigint", 2**64))
    assert await db.read(lambda conn: conn.fetchval("SELECT 41 + 1")) == 42


async def test_the_pools_reconnect_warnings_are_one_line_each(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """While the server restarts, asyncpg's pool warns a few times a second that it failed to
    restore its floor connections, each with a whole traceback: one line each once a store
    opened, naming the error."""
    caplog.set_level(logging.WARNING, logger="asyncpg.pool")
    try:
        raise ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 5432)")
    except ConnectionRefusedError:
        logging.getLogger("asyncpg.pool").warning(
            "Failed to restore the pool connection floor; retrying", exc_info=True
        )
    [record] = caplog.records
    assert record.exc_info is None
    assert record.getMessage() == (
        "Failed to restore the pool connection floor; retrying (ConnectionRefusedError:"
        " [Errno 111] Connect call failed ('127.0.0.1', 5432))"
    )


# A server error that says the server cannot do any work now, raised by the server itself.
CANNOT_SERVE = [
    ("25006", "read-only: a standby, or a failover under way"),
    ("57P01", "shutting down"),
    ("57P03", "starting up or recovering"),
    ("53300", "no connection slot left"),
]


def raising(sqlstate: str) -> Callable[[asyncpg.Connection], Awaitable[Any]]:
    statement = f"DO $$ BEGIN RAISE EXCEPTION 'refused' USING ERRCODE = '{sqlstate}'; END $$"
    return lambda conn: conn.execute(statement)


@pytest.mark.parametrize(
    ("path", "sqlstate", "why"),
    [
        (path, sqlstate, why)
        for path in ("call", "read", "write", "write_one")
        for sqlstate, why in CANNOT_SERVE
        # read's own transaction is read-only: a write there is its caller's error
        if (path, sqlstate) != ("read", "25006")
    ],
)
async def test_a_server_that_cannot_serve_now_is_the_store_unavailable(
    db: Database, path: str, sqlstate: str, why: str
) -> None:
    """After a failover the pool's new connections may reach the old primary, now a read-only
    standby; a server shutting down or starting refuses work too. Raised as asyncpg's own
    errors, they stopped the loops that catch StoreError: the dispatcher's polls and the
    lease's renewals, for the rest of the process's life. Now they are the store being down."""
    with pytest.raises(StoreUnavailable) as caught:
        await getattr(db, path)(raising(sqlstate))
    assert why in str(caught.value)
    assert sqlstate in str(caught.value)
    assert await db.read(lambda conn: conn.fetchval("SELECT 41 + 1")) == 42


async def test_another_server_error_is_not_the_store_unavailable(db: Database) -> None:
    with pytest.raises(asyncpg.CheckViolationError):
        await db.write(raising("23514"))


async def test_a_lease_renewed_on_a_read_only_server_is_the_store_unavailable() -> None:
    """The renewal that stopped for good on a standby: a StoreError, which the lease's loop
    logs and tries again."""
    async with fresh_schema() as url:
        store = await open_store(url)
        try:
            await store.renew_lease(15)
            admin = await asyncpg.connect(url)
            try:
                await admin.execute(
                    "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
                    " RAISE EXCEPTION 'cannot execute UPDATE in a read-only transaction'"
                    " USING ERRCODE = '25006'; END $$;"
                    " CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON leases"
                    " FOR EACH ROW EXECUTE FUNCTION refuse()"
                )
            finally:
                await admin.close()
            with pytest.raises(StoreUnavailable, match="read-only"):
                await store.renew_lease(15)
        finally:
            await store.aclose()


@pytest.mark.parametrize("path", ["call", "write", "write_one"])
async def test_a_connection_to_a_server_that_cannot_serve_is_not_pooled_again(
    db: Database, path: str
) -> None:
    """A connection that reached a read-only standby (a multi-host url, or a name that still
    pointed at the old primary during a failover) would fail every call it served, for as long
    as the pool kept it busy: it is closed, and the pool connects anew."""
    pid = "SELECT pg_backend_pid()"
    before = await db.call(lambda conn: conn.fetchval(pid))
    with pytest.raises(StoreUnavailable):
        await getattr(db, path)(raising("25006"))
    assert await db.call(lambda conn: conn.fetchval(pid)) != before  # the pool's only one
