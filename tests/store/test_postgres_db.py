"""The PostgreSQL store's connections: one that asyncpg left with a statement half sent is not
handed to the next caller."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from tests.pg import fresh_schema
from webhook_bot_gateway.store.postgres._db import Database

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
