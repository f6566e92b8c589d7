"""One aiosqlite connection; every transaction runs as a single call on its worker thread.

aiosqlite runs each call on one worker thread, in the order the calls were queued. Running a
whole transaction (``BEGIN IMMEDIATE`` .. ``COMMIT``) as *one* call means:

* transactions of this connection can never interleave, so no asyncio lock is needed;
* a cancelled caller cannot leave a transaction open: the call is queued before the first
  suspension point and always runs to its COMMIT or ROLLBACK;
* one thread hop per transaction instead of one per statement (about 2x on small writes);
* writes queued meanwhile share the next transaction and its disk flush (``_group_commit``).

aiosqlite has no public "run this function on the connection thread" call, so this module is
the one place that uses its ``_execute`` and ``_conn``; ``tests/store/test_conn.py`` guards it.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, TypeVar, cast

import aiosqlite

from .._errors import StoreError, UnusableSQLiteFile
from .._private import make_private_file
from ._group_commit import GroupCommit, Touched
from ._schema import check_version, migrate

T = TypeVar("T")
SyncFn = Callable[[sqlite3.Connection], T]
EventListener = Callable[[frozenset[str]], None]

BUSY_TIMEOUT_MS = 5000
MEMORY = ":memory:"
# Primary result codes of a database that cannot be used for now: locked past the busy
# timeout, read-only, the disk full, an I/O error. Anything else is a bug, not an outage.
_UNAVAILABLE = {
    sqlite3.SQLITE_BUSY,
    sqlite3.SQLITE_LOCKED,
    sqlite3.SQLITE_READONLY,
    sqlite3.SQLITE_IOERR,
    sqlite3.SQLITE_FULL,
    sqlite3.SQLITE_CANTOPEN,
    sqlite3.SQLITE_PROTOCOL,
}

# A file that SQLite cannot open, or opens but that is not a database: no retry helps.
_UNUSABLE = {sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_CANTOPEN}


class DatabaseUnavailable(StoreError):
    """SQLite refused the transaction for now (locked, read-only, disk full, I/O error)."""

    code = "store_unavailable"


@contextmanager
def _as_store_error() -> Iterator[None]:
    """Raise an outage of the database as a StoreError, which every pipeline loop survives."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        code = exc.sqlite_errorcode  # None when the module raised it, not SQLite
        if code is None or code & 0xFF not in _UNAVAILABLE:
            raise
        # SQLite's own message names the fault ("database is locked"); it never holds data.
        raise DatabaseUnavailable(f"the SQLite database is unavailable: {exc}") from exc


@contextmanager
def _unusable(path: str) -> Iterator[None]:
    """SQLite's refusal of the file itself as UnusableSQLiteFile (an outage stays one)."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        code = exc.sqlite_errorcode
        if code is None or code & 0xFF not in _UNUSABLE:
            raise
        raise UnusableSQLiteFile(path, str(exc)) from exc  # "file is not a database"


def _make_file(path: str) -> None:
    """The database file, owner-only, unless it exists (SQLite would make it 0644)."""
    if os.path.isdir(path):
        raise UnusableSQLiteFile(path, "it is a folder")
    try:
        make_private_file(Path(path))
    except OSError as exc:  # no such folder, no permission: SQLite's open would fail alike
        raise UnusableSQLiteFile(path, exc.strerror or type(exc).__name__) from exc


def _in_transaction(begin: str, fn: SyncFn[T], conn: sqlite3.Connection) -> T:
    conn.execute(begin)
    try:
        result = fn(conn)
        conn.commit()
    except BaseException:
        if conn.in_transaction:
            conn.rollback()
        raise
    return result


def _watch_events(touched: Touched, conn: sqlite3.Connection) -> None:
    conn.create_function("gateway_event_written", 1, touched.add)
    conn.execute(
        "CREATE TEMP TRIGGER IF NOT EXISTS gateway_event_written AFTER INSERT ON"
        " main.session_events BEGIN SELECT gateway_event_written(NEW.session_id); END"
    )


def _configure(path: str, conn: sqlite3.Connection) -> None:
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys = ON")
    # Deleted rows are overwritten with zeros, not left in free pages: an erasure leaves no copy
    # of a session's messages in the file (docs/data.md).
    conn.execute("PRAGMA secure_delete = ON")
    check_version(conn)  # before WAL: a refused file is left untouched
    if path != MEMORY:
        conn.execute("PRAGMA journal_mode = WAL")
    # FULL: an acknowledged commit survives power loss too (see docs/store.md).
    conn.execute("PRAGMA synchronous = FULL")
    migrate(conn)


class Connection:
    """The store's single connection to one SQLite database."""

    def __init__(self, db: aiosqlite.Connection) -> None:
        self._db = db
        self._closed = False
        self._run = cast(Callable[[Callable[[], Any]], Awaitable[Any]], db._execute)
        self._touched = Touched()
        self.listeners: list[EventListener] = []  # told which sessions got events, after commit
        self.group = GroupCommit(self._on_thread, self._touched, self._tell_listeners)

    @classmethod
    async def open(cls, path: str) -> Connection:
        """Connect, set the PRAGMAs, refuse a too-new schema and apply migrations.

        A new database file is made with mode 0600 (its -wal and -shm files take the same);
        a path SQLite cannot use (a folder, a file that is not a database) is
        UnusableSQLiteFile, with the file left as it was."""
        with _unusable(path):
            if path != MEMORY:
                _make_file(path)
            db = await aiosqlite.connect(path, isolation_level=None)
        conn = cls(db)
        try:
            with _unusable(path):
                await conn.call(partial(_configure, path))
            await conn.call(partial(_watch_events, conn._touched))
        except BaseException:
            await db.close()
            raise
        return conn

    async def call(self, fn: SyncFn[T]) -> T:
        """Run ``fn(connection)`` on the worker thread, outside any explicit transaction."""
        if self._closed:
            raise StoreError("the store is closed")
        with _as_store_error():
            return await self._on_thread(fn)

    async def _on_thread(self, fn: SyncFn[T]) -> T:
        raw = self._db._conn

        def bound() -> T:  # not a partial: aiosqlite logs the callable at DEBUG, and a
            return fn(raw)  # partial's repr would carry webhook bodies and message text

        return cast(T, await self._run(bound))

    async def read(self, fn: SyncFn[T]) -> T:
        """Run ``fn`` in a deferred (read) transaction, so its statements see one snapshot."""
        return await self.call(partial(_in_transaction, "BEGIN", fn))

    async def write(self, fn: SyncFn[T], *, urgent: bool = False) -> T:
        """Run ``fn`` in a ``BEGIN IMMEDIATE`` transaction: committed if it returns.

        Writes queued while a transaction runs share the next one (``_group_commit``), each
        atomic in its own savepoint. After the commit, the listeners hear of every session
        that got events in it. ``urgent``: a webhook waits on it (see ``_group_commit``).
        """
        if self._closed:
            raise StoreError("the store is closed")
        with _as_store_error():
            return cast(T, await self.group.write(fn, urgent=urgent))

    def _tell_listeners(self, touched: frozenset[str]) -> None:
        for listener in list(self.listeners):
            listener(touched)

    async def close(self) -> None:
        """Close the connection once the queued writes have run; idempotent."""
        self._closed = True
        await self.group.drain()
        await self._db.close()
