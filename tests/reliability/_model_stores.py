"""Real stores for the store's state machine (test_store_model.py), with crashes and restarts.

A ``Process`` is the gateway's view of its store across restarts: it opens a store the way
``gateway serve`` does (take the lease, mark interrupted the turns of a dead owner), closes it
the way a clean stop does (drop the lease), and can crash it, between transactions or inside
one, at a statement named in ``CRASH_POINTS``. A crashed process runs no further statement:

- SQLite file: a crash copies the database and its WAL as they are at that instant (what a
  SIGKILL leaves on the disk; uncommitted pages never count) and the next store opens the copy.
  Inside a transaction a TEMP trigger of the store's own connection calls back into Python to
  take the copy, so the crash lands between two statements of the store's own write.
- PostgreSQL: inside a transaction a trigger makes the store's write wait for a lock this test
  holds; then the store's pool is dropped on the client side and its server connections are
  terminated (found by their ``application_name``), so the server rolls the write back and the
  store never gets to run a rollback of its own.
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg

from tests.store.conftest import Backend, FakeClock, Raw
from webhook_bot_gateway.store import SQLiteStore, Store, StoreError
from webhook_bot_gateway.store.postgres import PostgresStore
from webhook_bot_gateway.store.sqlite._conn import Connection

LEASE_SECONDS = 30.0

# The statement each crash point interrupts: timing and event, table, the trigger's condition.
# Each is a write of exactly one pipeline step (no other step writes those rows that way).
CRASH_POINTS: dict[str, tuple[str, str, str]] = {
    "ingest": ("BEFORE INSERT", "deliveries", "TRUE"),
    "intake": ("BEFORE INSERT", "inbox", "TRUE"),
    "begin": ("BEFORE INSERT", "session_events", "NEW.kind = 'turn_started'"),
    "commit": ("BEFORE INSERT", "messages", "TRUE"),
    "fail": ("BEFORE UPDATE", "inbox", "NEW.attempts > OLD.attempts"),
    "delete": ("BEFORE DELETE", "sessions", "TRUE"),
}

GATE = 727_001  # PostgreSQL: the advisory lock a crash point's trigger waits for
STOP_WAIT_SECONDS = 10.0
WAITING_AT_GATE = (
    "SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = $1"
    " AND wait_event_type = 'Lock' AND wait_event = 'advisory'"
)

TERMINATE = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1"
CONNECTED = "SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = $1"


class CrashMissed(AssertionError):
    """The operation ended without reaching the statement the crash was armed for."""


class Process:
    """One database and the store a gateway process has open on it (see the module doc)."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self._store: Store | None = None
        self._raw: Raw | None = None

    @property
    def store(self) -> Store:
        assert self._store is not None, "no store open"
        return self._store

    @property
    def raw(self) -> Raw:
        """The database's rows, read behind the store's back."""
        assert self._raw is not None, "no store open"
        return self._raw

    @property
    def running(self) -> bool:
        """Whether a store is open (not between a crash and the next start)."""
        return self._store is not None

    async def start(self) -> list[str]:
        """Open a store and recover as ``gateway serve`` does; the sessions it interrupted."""
        store = self._store = self._new_store()
        await store.initialize()  # type: ignore[attr-defined]
        self._raw = self._raw or Raw(self._backend(), store)
        await store.renew_lease(LEASE_SECONDS)
        return await store.interrupt_running()

    async def stop(self) -> None:
        """A clean stop: drop the lease, close the store."""
        await self.store.release_lease()
        await self.store.aclose()
        self._store = None

    async def crash(self) -> None:
        """The process dies now, between transactions; ``start`` is the next process."""
        await self._die()
        self.clock.advance(LEASE_SECONDS + 1)  # the dead owner's lease runs out

    async def crash_during(self, point: str, operation: Callable[[], Awaitable[Any]]) -> None:
        """Run ``operation``; the process dies inside its write at ``point``."""
        raise NotImplementedError

    async def aclose(self) -> None:
        if self._store is not None:
            await self._store.aclose()
            self._store = None
        if self._raw is not None:
            await self._raw.close()
            self._raw = None

    def _new_store(self) -> Store:
        raise NotImplementedError

    def _backend(self) -> Backend:
        raise NotImplementedError

    async def _die(self) -> None:
        """The process is gone: drop the store without another statement."""
        raise NotImplementedError


class SQLiteProcess(Process):
    """A SQLite file; after a crash the next store opens the copy the crash left."""

    def __init__(self, clock: FakeClock, root: Path) -> None:
        super().__init__(clock)
        self._root = root
        self._generation = 0
        self._path = self._new_path()
        self._snapshot: Path | None = None  # where the last crash left the files

    def _new_path(self) -> Path:
        self._generation += 1
        folder = self._root / str(self._generation)
        folder.mkdir()
        return folder / "store.db"

    def _new_store(self) -> Store:
        if self._snapshot is not None:
            shutil.rmtree(self._path.parent)  # the dead process's files: nobody reads them
            self._path, self._snapshot = self._snapshot, None
            self._raw = None  # it reads the file by its path
        return SQLiteStore(self._path, clock=self.clock)

    def _backend(self) -> Backend:
        return Backend("file", self.clock, path=self._path)

    def _copy_files(self, *_: object) -> None:
        """What a SIGKILL now would leave: the database file and its WAL, byte for byte (run on
        the store's thread, between its transactions or inside one)."""
        target = self._new_path()
        for suffix in ("", "-wal"):
            source = Path(f"{self._path}{suffix}")
            if source.exists():
                shutil.copyfile(source, Path(f"{target}{suffix}"))
        self._snapshot = target

    def _connection(self) -> Connection:
        store = self.store
        assert isinstance(store, SQLiteStore)
        return store._db

    async def crash(self) -> None:
        await self._connection().call(self._copy_files)
        await super().crash()

    async def crash_during(self, point: str, operation: Callable[[], Awaitable[Any]]) -> None:
        """The files are copied at ``point`` by a TEMP trigger (it goes with the connection);
        the write then goes on in the old files, which nobody opens again."""
        timing, table, when = CRASH_POINTS[point]

        def arm(conn: sqlite3.Connection) -> None:
            conn.create_function("model_crash", 0, self._copy_files)
            conn.execute(
                f"CREATE TEMP TRIGGER model_crash {timing} ON main.{table}"
                f" WHEN {when} BEGIN SELECT model_crash(); END"
            )

        await self._connection().call(arm)
        try:
            await operation()
        except StoreError:
            pass  # the dead process would not have seen it
        if self._snapshot is None:
            raise CrashMissed(f"{point}: the operation ended before the crash point")
        await super().crash()

    async def _die(self) -> None:
        await self.store.aclose()  # on the old files: the copy is the crashed process's disk
        self._store = None


class PostgresProcess(Process):
    """A schema of its own, emptied at the first start; a crash drops the store's connections."""

    def __init__(self, clock: FakeClock, url: str) -> None:
        super().__init__(clock)
        self._url = url
        self._name = ""
        self._admin: asyncpg.Connection | None = None

    async def start(self) -> list[str]:
        if self._admin is None:
            self._admin = await asyncpg.connect(self._url)
            await _empty_schema(self._admin)
        return await super().start()

    @property
    def admin(self) -> asyncpg.Connection:
        assert self._admin is not None
        return self._admin

    def _new_store(self) -> Store:
        self._name = f"model-{uuid.uuid4().hex[:12]}"  # how a crash finds its connections
        return PostgresStore(f"{self._url}&application_name={self._name}", clock=self.clock)

    def _backend(self) -> Backend:
        return Backend("postgres", self.clock, url=self._url)

    async def crash_during(self, point: str, operation: Callable[[], Awaitable[Any]]) -> None:
        """The write stops at ``point`` (its trigger waits for a lock this test holds), and
        the process dies there."""
        timing, table, when = CRASH_POINTS[point]
        await self.admin.execute("SELECT pg_advisory_lock($1)", GATE)
        await self.admin.execute(
            "CREATE OR REPLACE FUNCTION model_crash() RETURNS trigger LANGUAGE plpgsql AS $$"
            f" BEGIN PERFORM pg_advisory_xact_lock({GATE});"
            " IF TG_OP = 'DELETE' THEN RETURN OLD; END IF; RETURN NEW; END $$"
        )
        await self.admin.execute(
            f"CREATE TRIGGER model_crash {timing} ON {table} FOR EACH ROW"
            f" WHEN ({when}) EXECUTE FUNCTION model_crash()"
        )
        task = asyncio.ensure_future(operation())
        try:
            await self._until_stopped(point, task)
            await super().crash()
        finally:
            await self.admin.execute(f"DROP TRIGGER model_crash ON {table}")
            await self.admin.execute("SELECT pg_advisory_unlock($1)", GATE)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _until_stopped(self, point: str, task: asyncio.Future[Any]) -> None:
        """Until a connection of the store waits at the trigger; CrashMissed if the operation
        ended first."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STOP_WAIT_SECONDS
        while not await self.admin.fetchval(WAITING_AT_GATE, self._name):
            if task.done():
                raise CrashMissed(f"{point}: the operation ended before the crash point")
            if loop.time() > deadline:
                raise AssertionError(f"{point}: no write reached the crash point in time")
            await asyncio.sleep(0.002)  # a poll of the server, bounded by the deadline

    async def _die(self) -> None:
        store = self.store
        assert isinstance(store, PostgresStore)
        store._db._pool.terminate()  # the client side first: no statement can follow
        store._database = None  # abandoned, as a killed process leaves it
        self._store = None
        await self.admin.fetch(TERMINATE, self._name)
        # Until the server has rolled back what they held (the next start must not skip a
        # session row they locked); pg_terminate_backend's own wait polls every 100 ms.
        deadline = asyncio.get_running_loop().time() + STOP_WAIT_SECONDS
        while await self.admin.fetchval(CONNECTED, self._name):
            assert asyncio.get_running_loop().time() < deadline, "the connections lived on"
            await asyncio.sleep(0.002)

    async def aclose(self) -> None:
        await super().aclose()
        if self._admin is not None:
            await self._admin.close()
            self._admin = None


async def _empty_schema(conn: asyncpg.Connection) -> None:
    """Empty every table of the connection's schema but its version: the test's examples share
    one schema (migrating a new one for each would cost more than the example)."""
    tables = await conn.fetch(
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        " AND tablename <> 'gateway_schema'"
    )
    if tables:
        names = ", ".join(f'"{row["tablename"]}"' for row in tables)
        await conn.execute(f"TRUNCATE {names} RESTART IDENTITY CASCADE")


def new_process(kind: str, clock: FakeClock, where: str) -> Process:
    """A process on a new SQLite file in the folder ``where``, or on the PostgreSQL url."""
    if kind == "file":
        return SQLiteProcess(clock, Path(tempfile.mkdtemp(dir=where)))
    return PostgresProcess(clock, where)
