"""``gateway migrate-store`` into PostgreSQL is all or nothing: the emptying (``--replace``), the
copy and the count check are one transaction, committed once the counts are verified. A copy
that fails part way (a row the target refuses, counts that differ, the process interrupted or
killed) leaves the target exactly as it was: every row of every table, and the ids it gives
next. It was written in place, a transaction per page: a failure left part of the rows."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import sys
import uuid
from contextlib import closing
from pathlib import Path
from typing import cast

import asyncpg
import pytest

from tests.gateway.test_migrate_store import populate, run_async
from tests.pg import fresh_schema
from webhook_bot_gateway.store import (
    CountMismatch,
    SQLiteStore,
    Store,
    TableAccess,
    copy_store,
    open_store,
)
from webhook_bot_gateway.store._copy import HEADS, PAGE, TABLES, Row, counts

SID = "whatsapp-1555-u1"
EXTRA_KEYS = 2 * PAGE + 500  # processed_messages, copied before inbox: three pages


def tables(store: Store) -> TableAccess:
    return cast(TableAccess, store)


async def snapshot(url: str) -> dict[str, list[Row]]:
    """Every row of every table of the store at ``url``, and each session's head."""
    store = await open_store(url)
    try:
        held = {}
        for table in (*TABLES, HEADS):
            key = "heads" if table is HEADS else table.name
            held[key] = await tables(store).table_page(table, 0, 1_000_000)
        return held
    finally:
        await store.aclose()


def add_keys(path: Path, count: int, prefix: str = "old") -> None:
    """``count`` dedup rows written straight into a SQLite store's file."""
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.executemany(
            "INSERT INTO processed_messages (key, seen_at) VALUES (?, 1.0)",
            ((f"telegram:{prefix}-{n}",) for n in range(count)),
        )


async def sqlite_source(path: Path, *, damaged: bool, keys: int = EXTRA_KEYS) -> str:
    """A SQLite store holding a little of everything and ``keys`` more dedup rows, which take
    pages to copy. ``damaged``: its inbox row has a state no store writes (PRAGMA
    ignore_check_constraints: a damaged file), which PostgreSQL's CHECK refuses; inbox comes
    after sessions, history, events, dedup rows, deliveries and quarantine."""
    url = f"sqlite:///{path}"
    store = await open_store(url)
    try:
        await populate(store)
    finally:
        await store.aclose()
    add_keys(path, keys)
    if damaged:
        with closing(sqlite3.connect(path)) as conn, conn:
            conn.execute("PRAGMA ignore_check_constraints = ON")
            conn.execute("UPDATE inbox SET state = 'bogus'")
    return url


async def populated_target(url: str) -> dict[str, list[Row]]:
    """The deployment already at ``url``: the same sessions as the source and more (a session
    of its own, more history, so ids past the source's); its snapshot."""
    store = await open_store(url)
    try:
        await populate(store)
        await store.get_or_create_session("telegram", "support", "only-in-target", "triage")
        for n in range(5):
            await store.append_message(SID, "user", f"only in the target {n}")
    finally:
        await store.aclose()
    return await snapshot(url)


async def next_message_id(url: str) -> int:
    """The id the target gives a new message (one more row: compare the snapshot first)."""
    store = await open_store(url)
    try:
        return (await store.append_message(SID, "user", "after the failed copy")).id
    finally:
        await store.aclose()


async def test_a_copy_that_fails_leaves_a_replaced_postgresql_target_as_it_was(
    tmp_path: Path,
) -> None:
    source = await sqlite_source(tmp_path / "a.db", damaged=True)
    async with fresh_schema() as url:
        before = await populated_target(url)
        assert len(before["sessions"]) == 3
        assert len(before["processed_messages"]) == 2

        code, out = await run_async("migrate-store", "--from", source, "--to", url, "--replace")
        assert code == 1, out
        after = await snapshot(url)
        assert {name: len(rows) for name, rows in after.items()} == {
            name: len(rows) for name, rows in before.items()
        }
        assert after == before  # not emptied, not half filled: every row, every column
        assert ("telegram-support-only-in-target",) in [row[:1] for row in after["sessions"]]
        # The ids are the target's too: a new message goes past its own old ones.
        assert await next_message_id(url) > max(row[0] for row in before["messages"])

        with closing(sqlite3.connect(tmp_path / "a.db")) as conn, conn:  # mended: it goes in
            conn.execute("UPDATE inbox SET state = 'pending'")
        code, out = await run_async("migrate-store", "--from", source, "--to", url, "--replace")
        assert code == 0, out
        assert "counts verified" in out
        moved = await snapshot(url)
        async with SQLiteStore(tmp_path / "a.db") as copied:
            assert await counts(tables(copied)) == {
                name: len(rows) for name, rows in moved.items() if name != "heads"
            }
        assert len(moved["processed_messages"]) == EXTRA_KEYS + 2


async def test_the_failure_is_one_error_line_without_the_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """PostgreSQL's DETAIL quotes the refused row (a user's text): it is not printed."""
    source = await sqlite_source(tmp_path / "a.db", damaged=True, keys=0)
    with closing(sqlite3.connect(tmp_path / "a.db")) as conn, conn:
        conn.execute("""UPDATE inbox SET event = '{"text": "my card is 4111"}'""")
    async with fresh_schema() as url:
        await populated_target(url)
        capsys.readouterr()
        code, _ = await run_async("migrate-store", "--from", source, "--to", url, "--replace")
    assert code == 1
    assert capsys.readouterr().err == (
        "error: the copy failed: PostgreSQL refused a row of inbox: new row for relation"
        ' "inbox" violates check constraint "inbox_state_check"\n'
    )


async def test_a_copy_that_fails_leaves_an_empty_postgresql_target_empty(tmp_path: Path) -> None:
    source = await sqlite_source(tmp_path / "a.db", damaged=True)
    async with fresh_schema() as url:
        await (await open_store(url)).aclose()  # an empty store
        code, out = await run_async("migrate-store", "--from", source, "--to", url)
        assert code == 1, out
        assert all(rows == [] for rows in (await snapshot(url)).values())

        with closing(sqlite3.connect(tmp_path / "a.db")) as conn, conn:
            conn.execute("UPDATE inbox SET state = 'pending'")
        # Still empty: taken without --replace.
        code, out = await run_async("migrate-store", "--from", source, "--to", url)
        assert code == 0, out
        assert len((await snapshot(url))["processed_messages"]) == EXTRA_KEYS + 2


async def test_counts_that_differ_leave_the_postgresql_target_as_it_was(tmp_path: Path) -> None:
    """A source written to during the copy (a gateway still running on it): the check at the
    end fails, after the identity sequences were moved to the copied rows' ids and ANALYZE ran;
    all of it is undone (a sequence's ``setval`` would not be: the next message id would be one
    the target's old rows hold)."""
    await sqlite_source(tmp_path / "a.db", damaged=False)
    written: list[str] = []

    def meanwhile(table: str, rows: int) -> None:
        # A lease row comes in after the source's counts were taken, before leases are copied.
        if table == "processed_messages" and not written:
            with closing(sqlite3.connect(tmp_path / "a.db")) as conn, conn:
                conn.execute("INSERT INTO leases (owner, expires_at) VALUES ('other', 1.0)")
            written.append(table)

    async with fresh_schema() as url, SQLiteStore(tmp_path / "a.db") as source:
        before = await populated_target(url)
        target = await open_store(url)
        try:
            with pytest.raises(CountMismatch, match="leases: 0 -> 1"):
                await copy_store(tables(source), tables(target), replace=True, progress=meanwhile)
        finally:
            await target.aclose()
        assert written
        assert await snapshot(url) == before
        assert await next_message_id(url) > max(row[0] for row in before["messages"])


async def until_seen(
    url: str, application: str, process: asyncio.subprocess.Process, where: str, what: str
) -> None:
    """Until pg_stat_activity shows the command's connection ``where`` (an SQL condition)."""
    conn = await asyncpg.connect(url)
    deadline = asyncio.get_running_loop().time() + 30
    try:
        while asyncio.get_running_loop().time() < deadline:
            query = f"SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND {where}"
            if await conn.fetchval(query, application):
                return
            if process.returncode is not None:
                break
            await asyncio.sleep(0.005)
    finally:
        await conn.close()
    raise AssertionError(f"{what} was not seen (exit {process.returncode})")


def _sigint_as_at_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
async def test_an_interrupted_copy_leaves_the_postgresql_target_as_it_was(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """Ctrl-C (the command's task cancelled: it rolls back) or SIGKILL (the connection drops:
    PostgreSQL rolls back) while the dedup rows are being copied, after --replace emptied
    the target and sessions, history and events went in. The copy is held there for certain:
    another transaction has inserted, uncommitted, the last dedup key of the source, so the
    COPY of its page waits on that key's unique check until the signal has done its work
    (waiting for the COPY to be seen instead raced with a copy that finished first)."""
    source = await sqlite_source(tmp_path / "a.db", damaged=False, keys=0)
    add_keys(tmp_path / "a.db", 60 * PAGE, prefix="many")
    application = f"migrate-{uuid.uuid4().hex[:8]}"
    async with fresh_schema() as url:
        before = await populated_target(url)
        blocker = await asyncpg.connect(url)
        held = blocker.transaction()
        await held.start()
        last_key = max(f"telegram:many-{n}" for n in range(60 * PAGE))
        await blocker.execute(
            "INSERT INTO processed_messages (key, seen_at) VALUES ($1, 1.0)", last_key
        )
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "webhook_bot_gateway",
            "migrate-store",
            "--from",
            source,
            "--to",
            f"{url}&application_name={application}",
            "--replace",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            # A shell that starts a job with & (CI does) has it ignore SIGINT, and the ignoring
            # is inherited; the command is run here as a terminal would run it.
            preexec_fn=_sigint_as_at_a_terminal,
        )
        try:
            copying = "query LIKE 'COPY%processed_messages%' AND wait_event_type = 'Lock'"
            await until_seen(url, application, process, copying, "the copy held on the key")
            process.send_signal(sig)
            output, _ = await asyncio.wait_for(process.communicate(), timeout=60)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
            await held.rollback()
            await blocker.close()
        if sig == signal.SIGINT:  # one line, as shells expect of Ctrl-C: no traceback
            assert process.returncode == 130, output.decode()
            assert output.splitlines()[-1] == b"error: interrupted"
            assert b"Traceback" not in output
        else:
            assert process.returncode == -signal.SIGKILL
        assert b"counts verified" not in output
        assert await snapshot(url) == before
        assert await next_message_id(url) > max(row[0] for row in before["messages"])
