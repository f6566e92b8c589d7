"""Opening a store: reopening with everything there, closing, the schema's constraints (every
backend); PRAGMAs, ``user_version`` and migrations of a file (SQLite backend only: see
test_postgres_schema.py for PostgreSQL's)."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from webhook_bot_gateway.store import (
    DeliveryIn,
    NewMessage,
    OutboxIn,
    SchemaTooNewError,
    SQLiteStore,
    Store,
    StoreError,
)
from webhook_bot_gateway.store.sqlite._schema import LATEST, MIGRATIONS

from .conftest import SHARED, START, Backend, FakeClock, Raw, raw_rows

SID = "telegram-support-1"


def fingerprint(path: Path) -> tuple[str, int]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns


def set_user_version(path: Path, version: int) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.execute(f"PRAGMA user_version = {version}")
        conn.commit()
    finally:
        conn.close()


async def test_open_fresh_file_gets_latest_version(db_path: Path) -> None:
    """SQLite backend."""
    async with SQLiteStore(db_path):
        pass
    assert raw_rows(db_path, "PRAGMA user_version") == [(LATEST,)]
    assert LATEST == len(MIGRATIONS) >= 1


async def test_open_sets_wal_foreign_keys_full_sync_and_busy_timeout(
    file_store: SQLiteStore,
) -> None:
    """SQLite backend."""

    def pragmas(conn: sqlite3.Connection) -> tuple[object, ...]:
        names = ("journal_mode", "foreign_keys", "synchronous", "busy_timeout")
        return tuple(conn.execute(f"PRAGMA {name}").fetchone()[0] for name in names)

    assert await file_store._db.call(pragmas) == ("wal", 1, 2, 5000)


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
async def test_open_memory_skips_wal(store: SQLiteStore) -> None:
    """SQLite backend: WAL needs a file."""
    mode = await store._db.call(lambda conn: conn.execute("PRAGMA journal_mode").fetchone()[0])
    assert mode == "memory"


async def test_open_refuses_newer_schema_and_leaves_file_untouched(db_path: Path) -> None:
    """SQLite backend."""
    async with SQLiteStore(db_path) as store:
        await store.create_session("telegram", "support", "1", "triage")
    set_user_version(db_path, LATEST + 1)
    before = fingerprint(db_path)
    with pytest.raises(SchemaTooNewError) as caught:
        await SQLiteStore.open(db_path)
    assert caught.value.found == LATEST + 1
    assert caught.value.known == LATEST
    assert "newer than this gateway knows" in str(caught.value)
    assert fingerprint(db_path) == before
    assert raw_rows(db_path, "PRAGMA user_version") == [(LATEST + 1,)]


async def test_open_refuses_newer_schema_on_plain_sqlite_file(db_path: Path) -> None:
    """SQLite backend."""
    set_user_version(db_path, 99)
    before = fingerprint(db_path)
    with pytest.raises(SchemaTooNewError):
        async with SQLiteStore(db_path):
            pass
    assert fingerprint(db_path) == before
    assert raw_rows(db_path, "PRAGMA journal_mode") == [("delete",)]


async def test_open_twice_migrates_once(db_path: Path) -> None:
    """SQLite backend."""
    async with SQLiteStore(db_path), SQLiteStore(db_path):
        pass
    assert raw_rows(db_path, "PRAGMA user_version") == [(LATEST,)]


@SHARED
async def test_reopen_keeps_everything(backend: Backend) -> None:
    async with backend.store() as store:
        await store.create_session("telegram", "support", "1", "triage", {"lang": "en"})
        first = await store.append_message(SID, "user", "hi")
        async with store.turn(SID) as turn:
            turn.append(NewMessage("assistant", "hello", agent="triage"))
            turn.set_active_agent("billing")
            turn.record_event("handoff", {"to": "billing"})
        await store.append_message(SID, "user", "branch b")
        await store.set_active_head(SID, turn.committed[0].id)
        assert await store.claim(["wa:1", "tg:2"]) == {"wa:1", "tg:2"}
        session = await store.get_session(SID)
        events = await store.list_events(SID)
        branch = await store.get_branch(SID)
    async with backend.store() as store:
        assert await store.get_session(SID) == session
        assert await store.get_branch(SID) == branch
        assert [m.text for m in branch] == ["hi", "hello"]
        assert branch[0].id == first.id
        assert await store.list_events(SID) == events
        assert await store.claim(["wa:1", "tg:2", "new"]) == {"new"}


async def test_closed_store_refuses_calls(backend: Backend) -> None:
    store = backend.store()
    await store.initialize()  # type: ignore[attr-defined]
    await store.aclose()
    await store.aclose()  # idempotent
    with pytest.raises(StoreError, match="not open"):
        await store.ping()


async def test_turn_on_closed_store_raises_store_error(backend: Backend) -> None:
    store = backend.store()
    await store.initialize()  # type: ignore[attr-defined]
    await store.create_session("telegram", "support", "1", "triage")
    scope = store.turn(SID)
    await store.aclose()
    with pytest.raises(StoreError, match="closed|not open"):
        await scope.__aenter__()


def make_v1_file(path: Path) -> None:
    """SQLite backend: a file as the gateway of schema version 1 left it, with a session and
    its history."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("BEGIN")
        for statement in MIGRATIONS[0]:
            conn.execute(statement)
        conn.execute(
            "INSERT INTO sessions (session_id, channel, account, chat_id, active_agent,"
            " metadata, created_at, updated_at)"
            " VALUES (?, 'telegram', 'support', '1', 'triage', '{\"lang\":\"en\"}', 1.0, 2.0)",
            (SID,),
        )
        conn.execute(
            "INSERT INTO messages (session_id, role, text, data, created_at)"
            " VALUES (?, 'user', 'hi', '{}', 1.5)",
            (SID,),
        )
        conn.execute("UPDATE sessions SET head_id = 1 WHERE session_id = ?", (SID,))
        conn.execute("INSERT INTO processed_messages (key, seen_at) VALUES ('tg:1', ?)", (START,))
        conn.execute("PRAGMA user_version = 1")
        conn.execute("COMMIT")
    finally:
        conn.close()


async def test_migration_1_to_2_keeps_data_and_adds_the_pipeline(
    db_path: Path, clock: FakeClock
) -> None:
    """SQLite backend."""
    make_v1_file(db_path)
    before = raw_rows(db_path, "SELECT * FROM sessions") + raw_rows(
        db_path, "SELECT * FROM messages"
    )
    async with SQLiteStore(db_path, clock=clock) as store:
        assert raw_rows(db_path, "PRAGMA user_version") == [(LATEST,)]
        # The columns version 1 had (later versions add some at the end: owner).
        after = [row[:10] for row in raw_rows(db_path, "SELECT * FROM sessions")]
        assert after + raw_rows(db_path, "SELECT * FROM messages") == before
        assert [m.text for m in await store.get_branch(SID)] == ["hi"]
        assert await store.claim(["tg:1"]) == set()
        await store.enqueue_outbox(OutboxIn(SID, "telegram", "support", "1", {"text": "x"}))
        [result] = await store.ingest([DeliveryIn("telegram", "support", b"{}", ("tg:2",))])
        assert result.delivery_id is not None
    tables = {row[0] for row in raw_rows(db_path, "SELECT name FROM sqlite_master")}
    expected = {"deliveries", "quarantine", "inbox", "outbox", "outbox_platform_ids"}
    assert expected <= tables
    assert {"inbox_session", "inbox_due", "outbox_due", "outbox_session"} <= tables


@pytest.mark.parametrize(
    ("sql", "params"),
    [
        (
            "INSERT INTO inbox (session_id, dedup_key, event, state, next_attempt_at, created_at)"
            " VALUES (?, 'k', '{}', 'running', 0, 0)",
            (SID,),
        ),
        (
            "INSERT INTO outbox (session_id, channel, account, chat_id, payload, state,"
            " next_attempt_at, created_at) VALUES (?, 'c', 'a', '1', '{}', 'lost', 0, 0)",
            (SID,),
        ),
        (
            "INSERT INTO outbox (session_id, channel, account, chat_id, payload,"
            " delivery_state, next_attempt_at, created_at)"
            " VALUES (?, 'c', 'a', '1', '{}', 'seen', 0, 0)",
            (SID,),
        ),
        (
            "INSERT INTO inbox (session_id, dedup_key, event, next_attempt_at, created_at)"
            " VALUES ('telegram-support-nobody', 'k', '{}', 0, 0)",
            (),
        ),
        pytest.param(
            "INSERT INTO inbox (session_id, dedup_key, event, next_attempt_at, created_at)"
            " VALUES (?, 'k', 'not json', 0, 0)",
            (SID,),
            id="json",
        ),
    ],
)
async def test_pipeline_tables_check_states_and_sessions(
    store: Store, raw: Raw, sql: str, params: tuple[str, ...]
) -> None:
    if "not json" in sql and not raw.backend.is_sqlite:
        pytest.skip("the PostgreSQL schema keeps JSON as plain TEXT, with no json_valid CHECK")
    await store.create_session("telegram", "support", "1", "triage")
    before = await raw.dump("inbox", "outbox")
    with pytest.raises(raw.integrity_error):
        await raw.execute(sql, *params)
    assert await raw.dump("inbox", "outbox") == before


def make_v6_file(path: Path) -> None:
    """SQLite backend: a file as the gateway of schema version 6 left it: a session killed in a
    turn (running, with no owner), its history, an inbox row and an outbox row."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("BEGIN")
        for migration in MIGRATIONS[:6]:
            for statement in migration:
                conn.execute(statement)
        conn.execute(
            "INSERT INTO sessions (session_id, channel, account, chat_id, active_agent, status,"
            " metadata, created_at, updated_at)"
            " VALUES (?, 'telegram', 'support', '1', 'triage', 'running', '{}', 1.0, 2.0)",
            (SID,),
        )
        conn.execute(
            "INSERT INTO messages (session_id, role, text, data, created_at)"
            " VALUES (?, 'user', 'hi', '{}', 1.5)",
            (SID,),
        )
        conn.execute("UPDATE sessions SET head_id = 1 WHERE session_id = ?", (SID,))
        conn.execute(
            "INSERT INTO inbox (session_id, dedup_key, event, next_attempt_at, created_at)"
            " VALUES (?, 'tg:1', '{\"text\":\"hi\"}', 1.0, 1.0)",
            (SID,),
        )
        conn.execute(
            "INSERT INTO outbox (session_id, channel, account, chat_id, payload, next_attempt_at,"
            " created_at) VALUES (?, 'telegram', 'support', '1', '{\"text\":\"x\"}', 1.0, 1.0)",
            (SID,),
        )
        conn.execute("PRAGMA user_version = 6")
        conn.execute("COMMIT")
    finally:
        conn.close()


async def test_migration_6_to_7_keeps_rows_and_adds_ownership(
    db_path: Path, clock: FakeClock
) -> None:
    """SQLite backend: the rows stay as they were, the new columns start NULL, and a turn left
    running before owners existed is taken by the first ``interrupt_running``."""
    make_v6_file(db_path)
    tables = ("sessions", "messages", "inbox", "outbox")
    before = {table: raw_rows(db_path, f"SELECT * FROM {table}") for table in tables}
    async with SQLiteStore(db_path, clock=clock) as store:
        assert raw_rows(db_path, "PRAGMA user_version") == [(LATEST,)]
        assert raw_rows(db_path, "SELECT * FROM sessions") == [
            row + (None,) for row in before["sessions"]
        ]
        assert raw_rows(db_path, "SELECT * FROM outbox") == [
            row + (None, None) for row in before["outbox"]
        ]
        assert raw_rows(db_path, "SELECT * FROM messages") == before["messages"]
        assert raw_rows(db_path, "SELECT * FROM inbox") == [
            row + (None,)
            for row in before["inbox"]  # cancelled_at (version 10)
        ]
        assert raw_rows(db_path, "SELECT * FROM leases") == []
        await store.renew_lease(30)
        assert await store.interrupt_running() == [SID]
        [inbox] = await store.pending_inbox(SID)
        async with store.turn(SID, inbox_ids=[inbox.id]) as turn:
            turn.complete_inbox([inbox.id])
        [outbox] = await store.due_outbox(clock.now)
        assert await store.claim_outbox(outbox.id, 60)
    assert raw_rows(db_path, "SELECT status, owner FROM sessions") == [("idle", None)]
    assert raw_rows(db_path, "SELECT owner FROM leases") == [(store.owner,)]


async def test_migration_7_to_8_gives_operator_replies_their_own_role(
    db_path: Path, clock: FakeClock
) -> None:
    """SQLite backend: an operator's reply stored as an assistant message of agent operator
    (schema 7) becomes role operator; new ones are accepted, other roles still refused."""
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        for migration in MIGRATIONS[:7]:
            for statement in migration:
                conn.execute(statement)
        conn.execute(
            "INSERT INTO sessions (session_id, channel, account, chat_id, active_agent,"
            " created_at, updated_at) VALUES (?, 'telegram', 'support', '1', 'human', 1, 1)",
            (SID,),
        )
        conn.execute(
            "INSERT INTO messages (session_id, role, text, agent, data, created_at) VALUES"
            " (?, 'assistant', 'from a person', 'operator', '{\"operator\": \"Alice\"}', 1),"
            " (?, 'assistant', 'from a bot', 'triage', '{}', 2)",
            (SID, SID),
        )
        conn.execute("PRAGMA user_version = 7")
        conn.execute("COMMIT")
    finally:
        conn.close()
    async with SQLiteStore(db_path, clock=clock) as store:
        assert raw_rows(db_path, "PRAGMA user_version") == [(LATEST,)]
        rows = raw_rows(db_path, "SELECT role, text FROM messages ORDER BY id")
        assert rows == [("operator", "from a person"), ("assistant", "from a bot")]
        added = await store.append_message(SID, "operator", "again", agent="operator")
        assert added.role == "operator"
    assert raw_rows(db_path, "PRAGMA integrity_check") == [("ok",)]
    conn = sqlite3.connect(db_path)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            conn.execute(
                "INSERT INTO messages (session_id, role, created_at) VALUES (?, 'robot', 1)",
                (SID,),
            )
    finally:
        conn.close()
