"""Raw table access of ``PostgresStore`` for ``store._copy`` (``gateway migrate-store``)."""

from __future__ import annotations

import asyncpg

from .._copy import TABLES, Row, Table
from ._db import Database, noted_events

# Tables whose id is an identity column: after rows came in with their ids, the next id given
# must be past them.
IDENTITY_TABLES = ("messages", "session_events", "deliveries", "quarantine", "inbox", "outbox")


class TableMethods:
    """``store._copy.TableAccess`` on the database; table names come from ``TABLES`` only."""

    @property
    def _db(self) -> Database:
        raise NotImplementedError

    async def table_count(self, table: Table) -> int:
        async def run(conn: asyncpg.Connection) -> int:
            return int(await conn.fetchval(f"SELECT count(*) FROM {table.name}"))

        return await self._db.read(run)

    async def table_page(self, table: Table, offset: int, limit: int) -> list[Row]:
        sql = (
            f"SELECT {table.column_list} FROM {table.name} ORDER BY {table.order}"
            " LIMIT $1 OFFSET $2"
        )

        async def run(conn: asyncpg.Connection) -> list[Row]:
            return [tuple(record) for record in await conn.fetch(sql, limit, offset)]

        return await self._db.read(run)

    async def table_insert(self, table: Table, rows: list[Row]) -> None:
        async def run(conn: asyncpg.Connection) -> None:
            await conn.copy_records_to_table(table.name, records=rows, columns=table.columns)
            if table.name == "session_events":  # the listeners hear of copied events too
                at = table.columns.index("session_id")
                noted_events(str(row[at]) for row in rows)

        await self._db.write(run)

    async def set_heads(self, heads: list[Row]) -> None:
        pairs = [(head_id, session_id) for session_id, head_id in heads]

        async def run(conn: asyncpg.Connection) -> None:
            await conn.executemany("UPDATE sessions SET head_id = $1 WHERE session_id = $2", pairs)

        await self._db.write(run)

    async def clear_tables(self) -> None:
        async def run(conn: asyncpg.Connection) -> None:
            await conn.execute("UPDATE sessions SET head_id = NULL")
            for table in reversed(TABLES):
                await conn.execute(f"DELETE FROM {table.name}")

        await self._db.write(run)

    async def after_copy(self) -> None:
        async def run(conn: asyncpg.Connection) -> None:
            for name in IDENTITY_TABLES:
                await conn.execute(
                    f"SELECT setval(pg_get_serial_sequence('{name}', 'id'),"
                    f" coalesce((SELECT max(id) FROM {name}), 0) + 1, false)"
                )
            # Statistics of the copied rows now, not at autovacuum's next ANALYZE: plans made
            # while the planner still thinks the tables small scan them whole (docs/store.md).
            for table in TABLES:
                await conn.execute(f"ANALYZE {table.name}")

        await self._db.write(run)
