"""PostgreSQL backend only: opening a database (schema version, migrations under an advisory
lock, a too-new schema refused), connection errors that keep the url to themselves, and the
pool's transactions. What every backend does is tested through the ``store`` fixture."""

from __future__ import annotations

import asyncio
import traceback
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import asyncpg
import pytest

from tests.pg import fresh_schema
from webhook_bot_gateway.store import SchemaTooNewError, SQLiteStore, StoreError
from webhook_bot_gateway.store.postgres import PostgresStore
from webhook_bot_gateway.store.postgres._db import Database
from webhook_bot_gateway.store.postgres._schema import LATEST, MIGRATION_LOCK, MIGRATIONS
from webhook_bot_gateway.store.postgres._sql_sessions import log_event

SID = "telegram-support-1"


@pytest.fixture
async def url() -> AsyncIterator[str]:
    """A fresh, empty schema (no store has opened it yet)."""
    async with fresh_schema() as schema_url:
        yield schema_url


@pytest.fixture
async def admin(url: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection of the test's own to the schema, behind the stores' backs."""
    conn = await asyncpg.connect(url)
    try:
        yield conn
    finally:
        await conn.close()


async def tables(conn: asyncpg.Connection) -> dict[str, list[str]]:
    """Every table of the schema with its columns in order."""
    rows = await conn.fetch(
        "SELECT table_name, column_name FROM information_schema.columns"
        " WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position"
    )
    found: dict[str, list[str]] = {}
    for row in rows:
        found.setdefault(row["table_name"], []).append(row["column_name"])
    return found


async def snapshot(conn: asyncpg.Connection) -> dict[str, Any]:
    """The schema's tables, columns, indexes, triggers and every row: to compare before/after."""
    shape = await tables(conn)
    indexes = await conn.fetch(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()"
        " ORDER BY indexname"
    )
    triggers = await conn.fetch(
        "SELECT tgname FROM pg_trigger JOIN pg_class ON pg_class.oid = tgrelid"
        " WHERE relnamespace = current_schema()::regnamespace AND NOT tgisinternal ORDER BY 1"
    )
    rows = {
        table: [tuple(r) for r in await conn.fetch(f"SELECT * FROM {table} ORDER BY 1")]
        for table in shape
    }
    return {
        "tables": shape,
        "indexes": [tuple(r) for r in indexes],
        "triggers": [r[0] for r in triggers],
        "rows": rows,
    }


async def opened_all(opening: Sequence[Awaitable[PostgresStore]]) -> list[PostgresStore]:
    """Await every open; close the ones that succeeded if any failed, then raise its error."""
    results = await asyncio.gather(*opening, return_exceptions=True)
    stores = [r for r in results if isinstance(r, PostgresStore)]
    failed = [r for r in results if not isinstance(r, PostgresStore)]
    if failed:
        for store in stores:
            await store.aclose()
        raise AssertionError(f"{len(failed)} of {len(results)} opens failed") from failed[0]
    return stores


async def version_rows(conn: asyncpg.Connection) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in await conn.fetch("SELECT one, version FROM gateway_schema")]


# --- schema versions and migrations ----------------------------------------------------------


async def test_new_schema_migrates_to_latest(url: str, admin: asyncpg.Connection) -> None:
    assert await tables(admin) == {}
    async with PostgresStore(url) as store:
        await store.ping()
    assert LATEST == len(MIGRATIONS) >= 1
    assert await version_rows(admin) == [(True, LATEST)]


async def test_new_schema_has_the_sqlite_tables_and_columns(
    url: str, admin: asyncpg.Connection
) -> None:
    """The same tables and columns in the same order: rows copy column for column."""
    async with PostgresStore(url):
        pass
    async with SQLiteStore(":memory:") as lite:

        def sqlite_tables(conn: Any) -> dict[str, list[str]]:
            names = conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
                " AND name NOT LIKE 'sqlite_%' ORDER BY name"
            ).fetchall()
            return {
                name: [col[1] for col in conn.execute(f"PRAGMA table_info({name})")]
                for (name,) in names
            }

        expected = await lite._db.call(sqlite_tables)
    found = await tables(admin)
    assert found.pop("gateway_schema") == ["one", "version"]
    assert found == expected


async def test_opening_again_is_idempotent(url: str, admin: asyncpg.Connection) -> None:
    async with PostgresStore(url) as store:
        await store.create_session("telegram", "support", "1", "triage")
    before = await snapshot(admin)
    async with PostgresStore(url) as again, PostgresStore(url) as third:
        assert await again.get_session(SID) is not None
        assert await third.count_sessions() == 1
    store = PostgresStore(url)
    await store.initialize()
    await store.initialize()  # idempotent on one store too
    await store.aclose()
    assert await snapshot(admin) == before
    assert await version_rows(admin) == [(True, LATEST)]


async def _waiting_for_the_lock(admin: asyncpg.Connection, application: str) -> int:
    waiting: int = await admin.fetchval(
        "SELECT count(*) FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid"
        " WHERE l.locktype = 'advisory' AND NOT l.granted AND a.application_name = $1",
        application,
    )
    return waiting


async def test_stores_opening_together_on_a_new_schema_all_succeed(
    url: str, admin: asyncpg.Connection
) -> None:
    """Each migration runs under an advisory lock: the stores that wait for it find the schema
    migrated by the first and go on; none fails on a table another one created."""
    application = f"gw-test-{uuid.uuid4().hex[:8]}"
    tagged = f"{url}&application_name={application}"
    count = 4
    holder = await asyncpg.connect(url)
    opening: list[asyncio.Task[PostgresStore]] = []
    try:
        await holder.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK)
        opening = [asyncio.create_task(PostgresStore.open(tagged)) for _ in range(count)]
        deadline = asyncio.get_running_loop().time() + 30
        while await _waiting_for_the_lock(admin, application) < count:  # all queued on it
            assert asyncio.get_running_loop().time() < deadline, "the opens never met the lock"
            assert not any(task.done() for task in opening), "an open did not wait for the lock"
        await holder.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK)
        stores = await opened_all(opening)
    finally:
        await holder.close()
        for task in opening:
            task.cancel()
    try:
        for n, store in enumerate(stores):
            await store.create_session("telegram", "support", str(n), "triage")
        assert await stores[0].count_sessions() == count
    finally:
        for store in stores:
            await store.aclose()
    assert await version_rows(admin) == [(True, LATEST)]


async def test_stores_racing_to_open_a_new_schema_all_succeed(
    url: str, admin: asyncpg.Connection
) -> None:
    stores = await opened_all([PostgresStore.open(url) for _ in range(6)])
    try:
        assert [await store.count_sessions() for store in stores] == [0] * 6
    finally:
        for store in stores:
            await store.aclose()
    assert await version_rows(admin) == [(True, LATEST)]


async def test_newer_schema_is_refused_and_left_untouched(
    url: str, admin: asyncpg.Connection
) -> None:
    async with PostgresStore(url) as store:
        await store.create_session("telegram", "support", "1", "triage")
    await admin.execute("UPDATE gateway_schema SET version = $1", LATEST + 1)
    before = await snapshot(admin)
    with pytest.raises(SchemaTooNewError) as caught:
        await PostgresStore.open(url)
    assert (caught.value.found, caught.value.known) == (LATEST + 1, LATEST)
    assert "newer than this gateway knows" in str(caught.value)
    with pytest.raises(SchemaTooNewError):
        async with PostgresStore(url):
            pass
    assert await snapshot(admin) == before


async def test_newer_schema_without_tables_gets_none(url: str, admin: asyncpg.Connection) -> None:
    """A database a newer gateway has only just claimed: nothing of ours is created in it."""
    await admin.execute(
        "CREATE TABLE gateway_schema (one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),"
        " version INTEGER NOT NULL)"
    )
    await admin.execute("INSERT INTO gateway_schema (version) VALUES (99)")
    before = await snapshot(admin)
    with pytest.raises(SchemaTooNewError) as caught:
        await PostgresStore.open(url)
    assert caught.value.found == 99
    assert await snapshot(admin) == before


async def _v1_schema(conn: asyncpg.Connection) -> None:
    """The schema as the first PostgreSQL release left it: version 1, and rows in it."""
    async with conn.transaction():
        await conn.execute(
            "CREATE TABLE gateway_schema (one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),"
            " version INTEGER NOT NULL)"
        )
        for statement in MIGRATIONS[0]:
            await conn.execute(statement)
        await conn.execute("INSERT INTO gateway_schema (version) VALUES (1)")
    session = (
        "INSERT INTO sessions (session_id, channel, account, chat_id, active_agent, status,"
        " created_at, updated_at) VALUES ($1, 'telegram', 'support', $2, 'triage', $3, 1, 2)"
    )
    await conn.execute(session, SID, "1", "running")  # a turn a V1 process never finished
    await conn.execute(session, "telegram-support-2", "2", "idle")
    await conn.execute(
        "INSERT INTO messages (session_id, role, text, created_at) VALUES ($1, 'user', 'hi', 1)",
        SID,
    )
    await conn.execute("UPDATE sessions SET head_id = 1 WHERE session_id = $1", SID)
    await conn.execute(
        "INSERT INTO session_events (session_id, kind, created_at, seq)"
        " VALUES ($1, 'turn_started', 1, 1)",
        SID,
    )
    await conn.execute("INSERT INTO processed_messages VALUES ('k1', 1)")
    await conn.execute(
        "INSERT INTO inbox (session_id, dedup_key, event, next_attempt_at, created_at)"
        " VALUES ($1, 'k1', '{\"text\": \"hi\"}', 1, 1)",
        SID,
    )
    await conn.execute(
        "INSERT INTO outbox (session_id, channel, account, chat_id, payload, next_attempt_at,"
        " created_at) VALUES ($1, 'telegram', 'support', $2, $3, 1, 1)",
        "telegram-support-2",
        "2",
        '{"chat_id": "2", "text": "hello"}',
    )


async def _rows(conn: asyncpg.Connection, table: str) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in await conn.fetch(f"SELECT * FROM {table} ORDER BY 1")]


async def test_v1_schema_with_rows_migrates_to_v2_keeping_them(
    url: str, admin: asyncpg.Connection
) -> None:
    """V2 (ownership): the leases table, sessions.owner, the outbox claim columns and the
    notification triggers; every row stays, the new columns NULL."""
    await _v1_schema(admin)
    before = await snapshot(admin)
    async with PostgresStore(url) as store:
        assert await version_rows(admin) == [(True, LATEST)]
        after = await snapshot(admin)
        assert before["rows"].pop("gateway_schema") == [(True, 1)]
        for table, rows in before["rows"].items():
            added = {"sessions": 1, "outbox": 2, "inbox": 1}.get(table, 0)  # inbox: V12
            kept = [row[: len(row) - added] for row in after["rows"][table]]
            assert kept == rows, table
            assert all(row[len(row) - added :] == (None,) * added for row in after["rows"][table])
        assert set(before["indexes"]) <= set(after["indexes"])
        assert after["tables"]["sessions"][-1:] == ["owner"]
        assert after["tables"]["outbox"][-2:] == ["claimed_by", "claimed_until"]
        assert after["tables"]["inbox"][-1:] == ["cancelled_at"]
        assert after["tables"]["leases"] == ["owner", "expires_at"]
        assert after["rows"]["leases"] == []
        assert set(after["triggers"]) - set(before["triggers"]) == {
            "gateway_inbox_written",
            "gateway_outbox_written",
        }
        # The old rows work as new ones: the V1 process's turn has no owner, so no lease.
        await store.renew_lease(60)
        assert await store.interrupt_running() == [SID]
        [row] = await store.due_outbox(2.0)
        assert await store.claim_outbox(row.id, 30)
        assert [item.id for item in await store.pending_inbox(SID)] == [1]
        async with store.turn(SID, inbox_ids=[1]) as turn:
            turn.complete_inbox([1])
        assert await store.pending_inbox(SID) == []
    assert [row[0] for row in await _rows(admin, "leases")] == [store.owner]


# --- connection errors -----------------------------------------------------------------------


def _everything_shown(exc: BaseException) -> str:
    """What a log of the error would show: its text, repr and traceback (with the chain)."""
    return "\n".join([str(exc), repr(exc), *traceback.format_exception(exc)])


async def _open_and_close(url: str) -> None:
    async with PostgresStore(url):
        pass


@pytest.mark.parametrize("opening", [PostgresStore.open, _open_and_close])
async def test_unreachable_server_gives_a_store_error_without_the_url(
    opening: Callable[[str], Awaitable[object]],
) -> None:
    url = "postgresql://u:s3cret@127.0.0.1:1/db"  # nothing listens on port 1
    with pytest.raises(StoreError) as caught:
        await opening(url)
    shown = _everything_shown(caught.value)
    assert "s3cret" not in shown
    assert url not in shown
    assert "u:s3cret" not in shown
    assert "did not answer" in str(caught.value)


async def test_refused_login_gives_a_store_error_without_the_url() -> None:
    """The server answers, but there is no such database: refused, naming the database (not a
    secret, and what to fix) but not the url (tests/store/test_postgres_url.py)."""
    from tests.pg import server_url

    base = server_url()
    name = f"no_such_db_{uuid.uuid4().hex[:8]}"
    head, _, _ = base.partition("?")
    url = head.rsplit("/", 1)[0] + "/" + name
    with pytest.raises(StoreError) as caught:
        await PostgresStore.open(url)
    shown = _everything_shown(caught.value)
    assert f"database '{name}' does not exist" in str(caught.value)
    assert url not in shown


async def test_unopened_and_closed_stores_refuse_calls(url: str) -> None:
    store = PostgresStore(url)
    with pytest.raises(StoreError, match="not open"):
        await store.ping()
    await store.initialize()
    await store.ping()
    await store.aclose()
    await store.aclose()  # idempotent
    with pytest.raises(StoreError, match="not open"):
        await store.ping()


@pytest.mark.parametrize("pool_size", [0, -1, True, 1.5])
def test_pool_size_must_be_a_positive_integer(pool_size: Any) -> None:
    with pytest.raises(ValueError, match="pool_size"):
        PostgresStore("postgresql://never@127.0.0.1:1/never", pool_size=pool_size)


# --- the pool's transactions -----------------------------------------------------------------


@pytest.fixture
async def database(url: str) -> AsyncIterator[Database]:
    opened = await Database.open(url, min_size=1, max_size=3, connect_timeout=10)
    try:
        yield opened
    finally:
        await opened.close()


class Boom(Exception):
    pass


async def test_write_commits_when_fn_returns(database: Database, admin: asyncpg.Connection) -> None:
    async def insert(conn: asyncpg.Connection) -> str:
        await conn.execute("INSERT INTO processed_messages VALUES ('k', 1)")
        return "done"

    assert await database.write(insert) == "done"
    assert [tuple(r) for r in await admin.fetch("SELECT key FROM processed_messages")] == [("k",)]


async def test_write_rolls_back_whole_on_an_exception(
    database: Database, admin: asyncpg.Connection
) -> None:
    async def fail(conn: asyncpg.Connection) -> None:
        await conn.execute("INSERT INTO processed_messages VALUES ('a', 1)")
        await conn.execute("INSERT INTO processed_messages VALUES ('b', 1)")
        raise Boom

    with pytest.raises(Boom):
        await database.write(fail)
    assert await admin.fetchval("SELECT count(*) FROM processed_messages") == 0


async def test_read_is_read_only_and_sees_one_snapshot(
    database: Database, admin: asyncpg.Connection
) -> None:
    async def write_in_read(conn: asyncpg.Connection) -> None:
        await conn.execute("INSERT INTO processed_messages VALUES ('k', 1)")

    with pytest.raises(asyncpg.ReadOnlySQLTransactionError):
        await database.read(write_in_read)

    async def twice(conn: asyncpg.Connection) -> tuple[int, int]:
        first = await conn.fetchval("SELECT count(*) FROM processed_messages")
        await admin.execute("INSERT INTO processed_messages VALUES ('meanwhile', 1)")
        second = await conn.fetchval("SELECT count(*) FROM processed_messages")
        return first, second

    assert await database.read(twice) == (0, 0)
    assert await admin.fetchval("SELECT count(*) FROM processed_messages") == 1


async def test_listeners_hear_committed_events_only(
    database: Database, admin: asyncpg.Connection
) -> None:
    await admin.execute(
        "INSERT INTO sessions (session_id, channel, account, chat_id, active_agent, created_at,"
        " updated_at) VALUES ($1, 'telegram', 'support', '1', 'triage', 0, 0)",
        SID,
    )
    heard: list[frozenset[str]] = []
    database.listeners.append(heard.append)

    async def event(conn: asyncpg.Connection) -> None:
        # Through the event helpers, which tell the write (test_postgres_events.py)
        await log_event(conn, SID, "x", "{}", 0)

    async def event_then_fail(conn: asyncpg.Connection) -> None:
        await event(conn)
        raise Boom

    with pytest.raises(Boom):
        await database.write(event_then_fail)
    assert heard == []
    await database.write(event)
    assert heard == [frozenset({SID})]

    async def nothing(conn: asyncpg.Connection) -> None:
        await conn.execute("INSERT INTO processed_messages VALUES ('k', 1)")

    await database.write(nothing)
    assert heard == [frozenset({SID})]  # a write without events tells nobody


async def test_closed_database_refuses_calls(database: Database) -> None:
    await database.close()
    await database.close()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        await database.call(lambda conn: conn.fetchval("SELECT 1"))


async def test_v3_schema_migrates_operator_replies_to_their_own_role(
    url: str, admin: asyncpg.Connection
) -> None:
    """V4: an operator's reply stored as an assistant message of agent operator becomes role
    operator; the CHECK accepts operator and still refuses an unknown role."""
    async with admin.transaction():
        await admin.execute(
            "CREATE TABLE gateway_schema (one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),"
            " version INTEGER NOT NULL)"
        )
        for migration in MIGRATIONS[:3]:
            for statement in migration:
                await admin.execute(statement)
        await admin.execute("INSERT INTO gateway_schema (version) VALUES (3)")
    await admin.execute(
        "INSERT INTO sessions (session_id, channel, account, chat_id, active_agent,"
        " created_at, updated_at) VALUES ($1, 'telegram', 'support', '1', 'human', 1, 1)",
        SID,
    )
    await admin.execute(
        "INSERT INTO messages (session_id, role, text, agent, created_at) VALUES"
        " ($1, 'assistant', 'from a person', 'operator', 1),"
        " ($1, 'assistant', 'from a bot', 'triage', 2)",
        SID,
    )
    async with PostgresStore(url) as store:
        assert await version_rows(admin) == [(True, LATEST)]
        rows = await admin.fetch("SELECT role, text FROM messages ORDER BY id")
        assert [tuple(row) for row in rows] == [
            ("operator", "from a person"),
            ("assistant", "from a bot"),
        ]
        added = await store.append_message(SID, "operator", "again", agent="operator")
        assert added.role == "operator"
    with pytest.raises(asyncpg.CheckViolationError):
        await admin.execute(
            "INSERT INTO messages (session_id, role, created_at) VALUES ($1, 'robot', 1)", SID
        )


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ('["a\\"b", "x,y", "{}", "[1]", "é"]', ['a"b', "x,y", "{}", "[1]", "é"]),
        (
            "[1.50, -0.0, 1e5, 1733470000.123456, 7]",
            ["1.50", "0.0", "100000", "1733470000.123456", "7"],
        ),
        ('[null, "", "  "]', [None, "", "  "]),
        ("[]", []),
        (None, []),
    ],
)
async def test_gateway_texts_reads_a_json_array_as_text_in_order(
    url: str, admin: asyncpg.Connection, given: str | None, expected: list[str | None]
) -> None:
    """The _many functions read every list argument so (schema 10 gave it a body the planner
    inlines): what jsonb_array_elements_text gives, in order, and {} for none."""
    async with PostgresStore(url) as store:
        await store.ping()
    assert await admin.fetchval("SELECT gateway_texts($1::jsonb)", given) == expected
    same = "SELECT ARRAY(SELECT jsonb_array_elements_text($1::jsonb))"
    assert await admin.fetchval(same, given) == expected
