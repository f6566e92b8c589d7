"""Fixtures: real stores (a SQLite file under tmp_path, ``:memory:``, and a fresh schema on the
test PostgreSQL server) and a settable clock."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from store import SQLiteStore, Store
from store.postgres import PostgresStore
from tests.pg import fresh_schema

START = 1_800_000_000.0


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def raw_rows(path: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Rows read with the stdlib sqlite3 module, bypassing the store."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.fixture(params=["file", "memory", "postgres"])
async def store(
    request: pytest.FixtureRequest, db_path: Path, clock: FakeClock
) -> AsyncIterator[Store]:
    """Each backend in turn: every test of the protocol runs on all of them."""
    if request.param == "postgres":
        async with fresh_schema() as url, PostgresStore(url, clock=clock) as opened:
            yield opened
        return
    path = ":memory:" if request.param == "memory" else db_path
    async with SQLiteStore(path, clock=clock) as opened:
        yield opened


@pytest.fixture
async def file_store(db_path: Path, clock: FakeClock) -> AsyncIterator[SQLiteStore]:
    async with SQLiteStore(db_path, clock=clock) as opened:
        yield opened
