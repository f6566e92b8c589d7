"""Fixtures: real stores on every backend and a settable clock.

``backend`` is the database of one test: a SQLite file under tmp_path, ``:memory:``, or a fresh
schema on the test PostgreSQL server (skipped when ``GATEWAY_TEST_POSTGRES_URL`` is unset).
``store`` is a store opened on it, so every test of the protocol runs on each backend in turn;
``raw`` reads and writes that database's rows without going through the store.

A test that needs a second store on the same database, or to reopen it (a crash, then a restart),
takes ``@SHARED``: it runs on the file and on PostgreSQL, the backends where a database outlives
its store. Tests of what only SQLite has (PRAGMAs, the aiosqlite connection, group commit, its
migrations, commit hooks) take ``@SQLITE_ONLY`` or use ``db_path`` and ``file_store``, and say
"SQLite backend" in their docstring.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.pg import fresh_schema
from webhook_bot_gateway.store import SQLiteStore, Store
from webhook_bot_gateway.store.postgres import PostgresStore

START = 1_800_000_000.0

BACKENDS = ("file", "memory", "postgres")
# A database that outlives its store and takes several at once: not ``:memory:``.
SHARED = pytest.mark.parametrize("backend", ["file", "postgres"], indirect=True)
# A test of something only the SQLite backend has, through the same fixtures.
SQLITE_ONLY = pytest.mark.parametrize("backend", ["file", "memory"], indirect=True)

Row = tuple[Any, ...]


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Backend:
    """One test's database: which kind it is and how to open (more) stores on it."""

    def __init__(
        self, kind: str, clock: FakeClock, *, path: Path | None = None, url: str | None = None
    ) -> None:
        self.kind = kind
        self.clock = clock
        self.path = path  # the SQLite file ("file" only)
        self.url = url  # the PostgreSQL url, its schema first on the search path ("postgres")

    @property
    def is_sqlite(self) -> bool:
        return self.kind != "postgres"

    def store(self, **options: Any) -> Store:
        """A store on this database, not yet opened (``async with`` it, or ``initialize``).

        For ``memory`` every store is a database of its own: tests that need a second store on
        the same data take ``@SHARED``.
        """
        options.setdefault("clock", self.clock)
        if self.kind == "postgres":
            assert self.url is not None
            return PostgresStore(self.url, **options)
        return SQLiteStore(":memory:" if self.path is None else self.path, **options)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.fixture(params=BACKENDS)
async def backend(
    request: pytest.FixtureRequest, db_path: Path, clock: FakeClock
) -> AsyncIterator[Backend]:
    """Each backend in turn (``@SHARED`` narrows it to the file and PostgreSQL)."""
    kind = request.param
    if kind == "postgres":
        async with fresh_schema() as url:
            yield Backend(kind, clock, url=url)
        return
    yield Backend(kind, clock, path=db_path if kind == "file" else None)


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[Store]:
    """A store on the test's backend: every test of the protocol runs on all of them."""
    async with backend.store() as opened:
        yield opened


@pytest.fixture
async def file_store(db_path: Path, clock: FakeClock) -> AsyncIterator[SQLiteStore]:
    """A SQLite file store, for the tests of the SQLite backend itself."""
    async with SQLiteStore(db_path, clock=clock) as opened:
        yield opened


def raw_rows(path: Path, sql: str, *params: Any) -> list[Row]:
    """Rows of a SQLite file read with the stdlib sqlite3 module, bypassing the store."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def numbered(sql: str) -> str:
    """``sql`` with its ``?`` placeholders as ``$1 .. $n`` (none inside quotes is touched)."""
    count = 0

    def number(match: re.Match[str]) -> str:
        nonlocal count
        if match.group(0) != "?":
            return match.group(0)  # a quoted literal or identifier, kept whole
        count += 1
        return f"${count}"

    return re.sub(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|\?", number, sql)


class Raw:
    """The rows of the store under test, read (and tampered with) behind its back.

    SQLite: the stdlib sqlite3 module on the file, or the store's own connection for
    ``:memory:`` (between its transactions). PostgreSQL: a connection of its own to the test's
    schema; ``?`` placeholders become ``$1 .. $n``. Rows come back as plain tuples.
    """

    def __init__(self, backend: Backend, store: Store) -> None:
        self.backend = backend
        self._store = store
        self._pg: asyncpg.Connection | None = None

    @property
    def injected_error(self) -> type[Exception]:
        """What a statement failed by ``fail_inserts`` raises through the store."""
        return sqlite3.IntegrityError if self.backend.is_sqlite else asyncpg.RaiseError

    @property
    def integrity_error(self) -> type[Exception]:
        """What a statement that breaks a constraint of the schema raises."""
        if self.backend.is_sqlite:
            return sqlite3.IntegrityError
        return asyncpg.IntegrityConstraintViolationError

    async def _sqlite(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        if self.backend.path is None:  # :memory: is reachable only through the store
            return await self._store._db.call(fn)  # type: ignore[attr-defined]
        conn = sqlite3.connect(self.backend.path, isolation_level=None)
        conn.execute("PRAGMA foreign_keys = ON")  # as the store's own connection has it
        try:
            return fn(conn)
        finally:
            conn.close()

    async def _postgres(self) -> asyncpg.Connection:
        if self._pg is None:
            self._pg = await asyncpg.connect(self.backend.url)
        return self._pg

    async def rows(self, sql: str, *params: Any) -> list[Row]:
        """Every row of a query, as tuples."""
        if self.backend.is_sqlite:
            found: list[Row] = await self._sqlite(lambda c: c.execute(sql, params).fetchall())
            return found
        conn = await self._postgres()
        return [tuple(record) for record in await conn.fetch(numbered(sql), *params)]

    async def value(self, sql: str, *params: Any) -> Any:
        """The one value of a one-row, one-column query."""
        [(found,)] = await self.rows(sql, *params)
        return found

    async def count(self, table: str) -> int:
        """How many rows ``table`` holds."""
        return int(await self.value(f"SELECT count(*) FROM {table}"))

    async def dump(self, *tables: str) -> dict[str, list[Row]]:
        """Every row of ``tables``, to compare before and after a refused call."""
        return {table: await self.rows(f"SELECT * FROM {table} ORDER BY 1") for table in tables}

    async def execute(self, sql: str, *params: Any) -> None:
        """Run one statement in a transaction of its own (committed), behind the store."""
        if self.backend.is_sqlite:

            def run(conn: sqlite3.Connection) -> None:
                with conn:
                    conn.execute("BEGIN IMMEDIATE")
                    conn.execute(sql, params)

            await self._sqlite(run)
            return
        conn = await self._postgres()
        await conn.execute(numbered(sql), *params)

    async def fail_inserts(self, table: str) -> None:
        """Make every insert into ``table`` fail, as a disk or constraint error would; the
        store's call then raises ``injected_error`` with "injected failure" in its message."""
        if self.backend.is_sqlite:
            await self.execute(
                f"CREATE TRIGGER fail_{table} BEFORE INSERT ON {table}"
                " BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
            )
            return
        await self.execute(
            f"CREATE FUNCTION fail_{table}() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$"
        )
        await self.execute(
            f"CREATE TRIGGER fail_{table} BEFORE INSERT ON {table}"
            f" FOR EACH ROW EXECUTE FUNCTION fail_{table}()"
        )

    async def close(self) -> None:
        if self._pg is not None:
            await self._pg.close()
            self._pg = None


@pytest.fixture
async def raw(backend: Backend, store: Store) -> AsyncIterator[Raw]:
    """The rows of ``store``'s database, read without the store (see ``Raw``)."""
    reader = Raw(backend, store)
    try:
        yield reader
    finally:
        await reader.close()
