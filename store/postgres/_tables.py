"""Raw table access of ``PostgresStore`` for ``store._copy`` (``gateway migrate-store``).

As a source, each call reads in a read transaction of its own. As a target, ``copying`` runs
the whole copy on one connection in ONE transaction: the emptying (``--replace``), every page,
the heads, the identity sequences, ANALYZE and the final count check. It commits only when the
copy returns, so any failure (a source that cannot be read, a row the target refuses, counts
that differ, a cancelled task) rolls it all back, and a process that dies before the COMMIT
leaves it to the server, which rolls back a transaction whose connection is gone: the target
holds exactly what it held before. The rows still go in pages (``store._copy.PAGE``), one
statement each, so memory stays bounded; only the transaction is long.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import asyncpg

from .._copy import TABLES, Row, Table, TableWriter
from .._errors import StoreError
from ._db import TOUCHED, Database

T = TypeVar("T")

# Tables whose id is an identity column: after rows came in with their ids, the next id given
# must be past them.
IDENTITY_TABLES = ("messages", "session_events", "deliveries", "quarantine", "inbox", "outbox")

# The trigger on session_events appends each row's session to this transaction-local setting
# (tests compare it with what the store noted), copying the whole text each time: over the many
# pages of one transaction that grows quadratic (120,000 events: 400 s instead of 5). The copy
# empties it after each page.
FORGET_TOUCHED = "SELECT set_config('gateway.touched', '', true)"


async def _count(conn: asyncpg.Connection, table: Table) -> int:
    return int(await conn.fetchval(f"SELECT count(*) FROM {table.name}"))


async def _page(conn: asyncpg.Connection, table: Table, offset: int, limit: int) -> list[Row]:
    sql = f"SELECT {table.column_list} FROM {table.name} ORDER BY {table.order} LIMIT $1 OFFSET $2"
    return [tuple(record) for record in await conn.fetch(sql, limit, offset)]


async def _insert(conn: asyncpg.Connection, table: Table, rows: list[Row]) -> None:
    await conn.copy_records_to_table(table.name, records=rows, columns=table.columns)


async def _set_heads(conn: asyncpg.Connection, heads: list[Row]) -> None:
    pairs = [(head_id, session_id) for session_id, head_id in heads]
    await conn.executemany("UPDATE sessions SET head_id = $1 WHERE session_id = $2", pairs)


async def _clear(conn: asyncpg.Connection) -> None:
    await conn.execute("UPDATE sessions SET head_id = NULL")
    for table in reversed(TABLES):
        await conn.execute(f"DELETE FROM {table.name}")


async def _after_copy(conn: asyncpg.Connection) -> None:
    for name in IDENTITY_TABLES:
        # RESTART, not setval(): a sequence's setval is not undone by a ROLLBACK, and would
        # leave a target whose copy failed giving ids its old rows hold. RESTART is.
        after = await conn.fetchval(f"SELECT coalesce(max(id), 0) + 1 FROM {name}")
        await conn.execute(f"ALTER TABLE {name} ALTER COLUMN id RESTART WITH {int(after)}")
    # Statistics of the copied rows now, not at autovacuum's next ANALYZE: plans made while
    # the planner still thinks the tables small scan them whole (docs/store.md).
    for table in TABLES:
        await conn.execute(f"ANALYZE {table.name}")


# What a row the target cannot take raises: PostgreSQL's errors (a constraint, a NUL in a text),
# or asyncpg's own when it cannot encode a value (a damaged SQLite file's BLOB in a TEXT column).
REFUSED = (asyncpg.PostgresError, TypeError, ValueError, OverflowError)


def _refused(what: str, exc: Exception) -> StoreError:
    """The error naming what was refused and why, in one line without the values: PostgreSQL's
    DETAIL, which ``str(exc)`` adds, quotes the row (a user's text, say)."""
    if isinstance(exc, asyncpg.PostgresError):
        return StoreError(f"PostgreSQL refused {what}: {exc.args[0] if exc.args else ''}")
    return StoreError(f"PostgreSQL cannot hold {what}: {type(exc).__name__}: {exc}")


def _event_sessions(table: Table, rows: list[Row]) -> set[str]:
    """The sessions ``rows`` of ``table`` add events to (none unless it is session_events)."""
    if table.name != "session_events":
        return set()
    at = table.columns.index("session_id")
    return {str(row[at]) for row in rows}


class TableMethods:
    """``store._copy.TableAccess`` on the database; table names come from ``TABLES`` only.

    A read is a transaction of its own; every write goes through ``copying``."""

    @property
    def _db(self) -> Database:
        raise NotImplementedError

    async def table_count(self, table: Table) -> int:
        return await self._db.read(lambda conn: _count(conn, table))

    async def table_page(self, table: Table, offset: int, limit: int) -> list[Row]:
        return await self._db.read(lambda conn: _page(conn, table, offset, limit))

    async def copying(self, fn: Callable[[TableWriter], Awaitable[T]]) -> T:
        """``fn`` on one connection in one transaction, committed only if it returns; then
        the listeners hear which sessions got events."""
        db = self._db

        async def run(conn: asyncpg.Connection) -> tuple[T, set[str]]:
            into = CopyTransaction(conn, verify=db.verify_events, listened=bool(db.listeners))
            async with conn.transaction():
                result = await fn(into)
            return result, into.heard

        result, heard = await db.call(run)
        if heard:
            for listener in list(db.listeners):
                listener(frozenset(heard))
        return result


class CopyTransaction:
    """The ``TableWriter`` of the copy's transaction: every call on its one connection."""

    def __init__(self, conn: asyncpg.Connection, *, verify: bool, listened: bool) -> None:
        self._conn = conn
        self._verify = verify  # Database.verify_events (tests)
        self._listened = listened
        # The sessions that got events, for the listeners after the COMMIT; kept only when
        # someone listens (migrate-store does not), so memory stays bounded.
        self.heard: set[str] = set()

    async def table_count(self, table: Table) -> int:
        return await _count(self._conn, table)

    async def table_page(self, table: Table, offset: int, limit: int) -> list[Row]:
        return await _page(self._conn, table, offset, limit)

    async def table_insert(self, table: Table, rows: list[Row]) -> None:
        try:
            await _insert(self._conn, table, rows)
        except REFUSED as exc:
            raise _refused(f"a row of {table.name}", exc) from exc
        sessions = _event_sessions(table, rows)
        if sessions:
            await self._forget_touched(sessions)
            if self._listened:
                self.heard.update(sessions)

    async def set_heads(self, heads: list[Row]) -> None:
        try:
            await _set_heads(self._conn, heads)
        except REFUSED as exc:
            raise _refused("a session's head", exc) from exc

    async def clear_tables(self) -> None:
        await _clear(self._conn)

    async def after_copy(self) -> None:
        await _after_copy(self._conn)

    async def _forget_touched(self, sessions: set[str]) -> None:
        """Empty the trigger's setting (see FORGET_TOUCHED), after checking it named exactly
        ``sessions`` when ``verify``: the check ``Database.write`` makes before each COMMIT."""
        if self._verify:
            touched = await self._conn.fetchval(TOUCHED)
            written = {s for s in (touched or "").split("\n") if s}
            if written != sessions:
                raise AssertionError(f"event rows for {sorted(written)}, noted {sorted(sessions)}")
        await self._conn.execute(FORGET_TOUCHED)
