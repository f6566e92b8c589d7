"""SQLite backend: group commit inside the store. Writes that arrive together share one
transaction, each stays atomic on its own, and a SIGKILL never leaves half of a write behind."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from webhook_bot_gateway.store import SessionExistsError, SQLiteStore

from .conftest import raw_rows


async def test_writes_that_arrive_together_share_one_transaction(db_path: Path) -> None:
    async with SQLiteStore(db_path) as store:
        group = store._db.group
        before = group.batches
        await asyncio.gather(
            *(store.create_session("telegram", "support", str(n), "triage") for n in range(50))
        )
        assert (group.batches - before, group.writes) == (1, 50)
    assert raw_rows(db_path, "SELECT count(*) FROM sessions") == [(50,)]


async def test_a_failing_write_is_undone_alone_and_only_its_caller_hears(db_path: Path) -> None:
    class Boom(Exception):
        pass

    def half_then_fail(conn: sqlite3.Connection) -> None:
        conn.execute(
            "INSERT INTO processed_messages (key, seen_at) VALUES ('half', 1)"
        )  # must not survive: the write raises after it
        raise Boom

    async with SQLiteStore(db_path) as store:
        await store.create_session("telegram", "support", "1", "triage")
        results = await asyncio.gather(
            store.claim(["a"]),
            store._db.write(half_then_fail),
            store.create_session("telegram", "support", "1", "triage"),  # exists: refused
            store.claim(["b"]),
            return_exceptions=True,
        )
    assert results[0] == {"a"}
    assert isinstance(results[1], Boom)
    assert isinstance(results[2], SessionExistsError)
    assert results[3] == {"b"}
    keys = raw_rows(db_path, "SELECT key FROM processed_messages ORDER BY key")
    assert keys == [("a",), ("b",)]


async def test_a_cancelled_callers_write_still_commits(db_path: Path) -> None:
    async with SQLiteStore(db_path) as store:
        task = asyncio.create_task(store.claim(["kept"]))
        await asyncio.sleep(0)  # queued, not yet answered
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await store.claim(["after"])  # runs after it: the first has committed by then
    assert raw_rows(db_path, "SELECT key FROM processed_messages ORDER BY key") == [
        ("after",),
        ("kept",),
    ]


WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from webhook_bot_gateway.store import SQLiteStore

    def pair(n):
        def write(conn):
            conn.execute("INSERT INTO processed_messages (key, seen_at) VALUES (?, 1)", (f"{n}a",))
            conn.execute("INSERT INTO processed_messages (key, seen_at) VALUES (?, 1)", (f"{n}b",))
            return n
        return write

    async def main():
        async with SQLiteStore(sys.argv[1]) as store:
            n = 0
            while True:
                done = await asyncio.gather(*(store._db.write(pair(n + i)) for i in range(20)))
                n += len(done)
                print(n, flush=True)

    asyncio.run(main())
    """
)


def test_sigkill_during_batched_commits_leaves_whole_writes_only(db_path: Path) -> None:
    """A process committing batches of two-row writes is killed; every write is whole, and
    every write its caller saw committed is there."""
    command = [sys.executable, "-c", WRITER, str(db_path)]
    repo = Path(__file__).resolve().parents[2]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=repo) as child:
        assert child.stdout is not None
        acknowledged = 0
        for line in child.stdout:  # each line: writes committed so far
            acknowledged = int(line)
            if acknowledged >= 400:
                break
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert acknowledged >= 400, "the writer stopped before it was killed"
    keys = {key for (key,) in raw_rows(db_path, "SELECT key FROM processed_messages")}
    numbers = {int(key[:-1]) for key in keys}
    assert all(f"{n}a" in keys and f"{n}b" in keys for n in numbers)  # no half write
    assert set(range(acknowledged)) <= numbers  # nothing acknowledged was lost


async def test_an_urgent_write_goes_first(db_path: Path) -> None:
    ran: list[str] = []

    def note(name: str) -> Callable[[sqlite3.Connection], None]:
        return lambda conn: ran.append(name)

    async with SQLiteStore(db_path) as store:
        group = store._db.group
        blocker = asyncio.create_task(store._db.write(note("first")))  # a transaction runs
        await asyncio.sleep(0)
        normal = [asyncio.create_task(store._db.write(note(f"n{i}"))) for i in range(40)]
        urgent = asyncio.create_task(store._db.write(note("ack"), urgent=True))
        before = group.batches
        await urgent
        assert group.batches - before <= 2  # the running one, then the ack's own
        await asyncio.gather(blocker, *normal)
    assert ran[0] == "first"
    assert ran[1] == "ack"  # ahead of the 40 queued before it, in the same transaction
    assert ran[2:] == [f"n{i}" for i in range(40)]  # the others in their order
