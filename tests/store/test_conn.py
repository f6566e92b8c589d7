"""SQLite backend: the connection wrapper, whole transactions as one call on aiosqlite's worker
thread (PostgreSQL's pool: test_postgres_schema.py)."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from webhook_bot_gateway.store import SQLiteStore
from webhook_bot_gateway.store.sqlite._conn import Connection

from .conftest import raw_rows


class Boom(Exception):
    pass


@pytest.fixture
async def conn(db_path: Path) -> AsyncIterator[Connection]:
    opened = await Connection.open(str(db_path))
    yield opened
    await opened.close()


async def test_call_runs_on_the_connection_thread(conn: Connection) -> None:
    def where(db: sqlite3.Connection) -> int:
        return threading.get_ident()

    assert await conn.call(where) != threading.get_ident()


async def test_write_commits_when_fn_returns(conn: Connection, db_path: Path) -> None:
    def insert(db: sqlite3.Connection) -> bool:
        db.execute("INSERT INTO processed_messages VALUES ('k', 1)")
        return db.in_transaction

    assert await conn.write(insert) is True
    assert raw_rows(db_path, "SELECT key FROM processed_messages") == [("k",)]


async def test_write_rolls_back_and_leaves_no_transaction_open(
    conn: Connection, db_path: Path
) -> None:
    def fail(db: sqlite3.Connection) -> None:
        db.execute("INSERT INTO processed_messages VALUES ('k', 1)")
        raise Boom

    with pytest.raises(Boom):
        await conn.write(fail)
    assert await conn.call(lambda db: db.in_transaction) is False
    assert raw_rows(db_path, "SELECT count(*) FROM processed_messages") == [(0,)]


async def test_cancelled_write_still_commits_whole(conn: Connection, db_path: Path) -> None:
    def insert(db: sqlite3.Connection) -> None:
        db.execute("INSERT INTO processed_messages VALUES ('a', 1)")
        db.execute("INSERT INTO processed_messages VALUES ('b', 1)")

    task = asyncio.create_task(conn.write(insert))
    await conn.call(lambda db: None)  # meanwhile the task starts and queues its write
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await conn.call(lambda db: None)
    assert raw_rows(db_path, "SELECT count(*) FROM processed_messages") == [(2,)]
    assert await conn.call(lambda db: db.in_transaction) is False


async def test_conn_debug_log_of_aiosqlite_carries_no_row_data(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="aiosqlite")
    async with SQLiteStore(tmp_path / "log.db") as store:
        session = await store.create_session("telegram", "support", "7", "triage")
        await store.append_message(session.session_id, "user", "SECRET-USER-TEXT")
        await store.claim(["SECRET-DEDUP-KEY"])
    assert caplog.records, "aiosqlite logged nothing at DEBUG: the test sees nothing"
    assert "SECRET-USER-TEXT" not in caplog.text
    assert "SECRET-DEDUP-KEY" not in caplog.text
