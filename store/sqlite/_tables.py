"""Raw table access of ``SQLiteStore`` for ``store._copy`` (``gateway migrate-store``)."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from typing import TypeVar

from .._copy import TABLES, Row, Table, TableWriter
from ._conn import Connection

T = TypeVar("T")


def _placeholders(table: Table) -> str:
    return ", ".join("?" for _ in table.columns)


class TableMethods:
    """``store._copy.TableAccess`` on the SQLite file, and its own ``TableWriter``; table names
    come from ``TABLES`` only."""

    @property
    def _db(self) -> Connection:
        raise NotImplementedError

    async def table_count(self, table: Table) -> int:
        def run(conn: sqlite3.Connection) -> int:
            return int(conn.execute(f"SELECT count(*) FROM {table.name}").fetchone()[0])

        return await self._db.read(run)

    async def table_page(self, table: Table, offset: int, limit: int) -> list[Row]:
        sql = (
            f"SELECT {table.column_list} FROM {table.name} ORDER BY {table.order} LIMIT ? OFFSET ?"
        )
        return await self._db.read(lambda conn: conn.execute(sql, (limit, offset)).fetchall())

    async def table_insert(self, table: Table, rows: list[Row]) -> None:
        sql = f"INSERT INTO {table.name} ({table.column_list}) VALUES ({_placeholders(table)})"
        await self._db.write(lambda conn: conn.executemany(sql, rows))

    async def set_heads(self, heads: list[Row]) -> None:
        pairs = [(head_id, session_id) for session_id, head_id in heads]
        sql = "UPDATE sessions SET head_id = ? WHERE session_id = ?"
        await self._db.write(lambda conn: conn.executemany(sql, pairs))

    async def clear_tables(self) -> None:
        def run(conn: sqlite3.Connection) -> None:
            conn.execute("UPDATE sessions SET head_id = NULL")
            for table in reversed(TABLES):
                conn.execute(f"DELETE FROM {table.name}")

        await self._db.write(run)

    async def after_copy(self) -> None:
        """Nothing: AUTOINCREMENT moved each table's sequence past the ids inserted."""

    async def copying(self, fn: Callable[[TableWriter], Awaitable[T]]) -> T:
        """``fn`` on this store, each write its own transaction: ``gateway migrate-store``
        copies into a new file and renames it over the target once the counts are verified."""
        return await fn(self)
