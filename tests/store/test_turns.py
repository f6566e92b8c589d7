"""Turns: buffered writes, one commit; rollback and cancellation leave no trace."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from typing import Any

import asyncpg
import pytest

from webhook_bot_gateway.store import (
    Message,
    NewMessage,
    RunActive,
    SessionDeletedError,
    SessionNotFound,
    SQLiteStore,
    Store,
    StoreError,
    TurnActive,
)

from .conftest import SHARED, SQLITE_ONLY, Backend, FakeClock, Raw

SID = "telegram-support-1"


class Boom(Exception):
    pass


async def session_row(raw: Raw) -> list[tuple[Any, ...]]:
    return await raw.rows("SELECT * FROM sessions WHERE session_id = ?", SID)


async def counts(raw: Raw) -> tuple[int, int]:
    messages = await raw.count("messages")
    # A turn that does not commit still logs that it started and ended (its attempt): not counted.
    events = await raw.value(
        "SELECT count(*) FROM session_events WHERE kind NOT IN ('turn_started', 'turn_cancelled')"
    )
    return messages, events


@pytest.fixture
async def seeded(store: Store, clock: FakeClock) -> Store:
    await store.create_session("telegram", "support", "1", "triage", {"k": "v"})
    await store.append_message(SID, "user", "hello")
    clock.advance(60)
    return store


# On PostgreSQL a turn that merges no metadata commits in one call (``gateway_turn_commit``)
# and one that does in a transaction of several statements: the tests of a commit run both.
MERGING = pytest.mark.parametrize("merging", [True, False], ids=["metadata", "no-metadata"])


def _fill(turn: Any, merging: bool = True) -> None:
    turn.append(NewMessage("assistant", "one", agent="triage"))
    turn.append(NewMessage("tool", "two", data={"call": 1}))
    turn.set_active_agent("billing")
    if merging:
        turn.update_metadata({"x": 1})
    turn.record_event("handoff", {"to": "billing"})


@MERGING
async def test_turn_commits_everything_together(
    seeded: Store, clock: FakeClock, merging: bool
) -> None:
    async with seeded.turn(SID) as turn:
        assert turn.session.status == "running"
        assert [m.text for m in turn.history] == ["hello"]
        _fill(turn, merging)
        assert [m.text for m in turn.pending] == ["one", "two"]
        assert turn.active_agent == "billing"
        assert not turn.committed
    session = await seeded.get_session(SID)
    assert session is not None
    assert session.status == "idle"
    assert session.active_agent == "billing"
    assert session.metadata == ({"k": "v", "x": 1} if merging else {"k": "v"})
    assert session.head_id == turn.committed[-1].id
    assert session.updated_at.timestamp() == clock.now
    branch = await seeded.get_branch(SID)
    assert [m.text for m in branch] == ["hello", "one", "two"]
    assert list(turn.committed) == branch[1:]
    events = await seeded.list_events(SID)
    assert [e.kind for e in events] == ["turn_started", "handoff", "message", "turn_finished"]
    assert [e.seq for e in events] == [1, 2, 3, 4]
    assert events[2].detail == {
        "message_id": turn.committed[0].id,
        "role": "assistant",
        "text": "one",
        "agent": "triage",
        "attachments": [],
    }


async def test_turn_writes_nothing_before_exit(seeded: Store, raw: Raw) -> None:
    before = await counts(raw)
    async with seeded.turn(SID) as turn:
        _fill(turn)
        assert await counts(raw) == before
        assert (await session_row(raw))[0][5] == "running"


async def test_turn_start_leaves_updated_at_alone(seeded: Store, raw: Raw) -> None:
    before = (await session_row(raw))[0]
    async with seeded.turn(SID):
        during = (await session_row(raw))[0]
        # Only the status and the owner change when a turn begins.
        assert during[:5] + during[6:10] == before[:5] + before[6:10]
        assert during[10] == seeded.owner


async def test_turn_exception_leaves_session_byte_for_byte(seeded: Store, raw: Raw) -> None:
    before, before_counts = await session_row(raw), await counts(raw)

    async def failing() -> None:
        async with seeded.turn(SID) as turn:
            _fill(turn)
            raise Boom

    with pytest.raises(Boom):
        await failing()
    assert await session_row(raw) == before
    assert await counts(raw) == before_counts


async def test_turn_cancellation_leaves_session_byte_for_byte(seeded: Store, raw: Raw) -> None:
    before, before_counts = await session_row(raw), await counts(raw)
    entered, never = asyncio.Event(), asyncio.Event()

    async def body() -> None:
        async with seeded.turn(SID) as turn:
            _fill(turn)
            entered.set()
            await never.wait()

    task = asyncio.create_task(body())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await session_row(raw) == before
    assert await counts(raw) == before_counts


async def test_turn_cancelled_while_entering_restores_status(seeded: Store, raw: Raw) -> None:
    before = await session_row(raw)
    reached: list[bool] = []

    async def enter() -> None:
        async with seeded.turn(SID):
            reached.append(True)

    task = asyncio.create_task(enter())
    await seeded.ping()  # the task has run up to its first await: the enter is queued
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await seeded.ping()
    assert reached == []
    assert await session_row(raw) == before
    async with seeded.turn(SID):  # not stuck as open in this process
        pass


@SHARED
async def test_turn_rollback_restores_interrupted_status(
    seeded: Store, raw: Raw, backend: Backend
) -> None:
    scope = seeded.turn(SID)
    await scope.__aenter__()
    await seeded.aclose()  # a crash: the turn never exits
    async with backend.store() as reopened:
        assert await reopened.interrupt_running() == [SID]
        before = await session_row(raw)
        with pytest.raises(Boom):
            async with reopened.turn(SID):
                raise Boom
        assert await session_row(raw) == before
        async with reopened.turn(SID) as turn:
            assert turn.session.status == "running"
        assert (await reopened.get_session(SID)).status == "idle"  # type: ignore[union-attr]


@SHARED
async def test_turn_crash_leaves_running_for_recovery(
    seeded: Store, raw: Raw, backend: Backend
) -> None:
    scope = seeded.turn(SID)
    turn = await scope.__aenter__()
    turn.append(NewMessage("assistant", "never written"))
    await seeded.aclose()
    assert (await session_row(raw))[0][5] == "running"
    async with backend.store() as reopened:
        assert [m.text for m in await reopened.get_branch(SID)] == ["hello"]
        assert await reopened.interrupt_running() == [SID]
        assert (await reopened.get_session(SID)).status == "interrupted"  # type: ignore[union-attr]


@MERGING
async def test_turn_session_deleted_meanwhile_writes_nothing(
    seeded: Store, raw: Raw, merging: bool
) -> None:
    async def deleting() -> None:
        async with seeded.turn(SID) as turn:
            _fill(turn, merging)
            assert await seeded.delete_session(SID)

    with pytest.raises(SessionDeletedError) as caught:
        await deleting()
    assert caught.value.code == "session_deleted"
    assert await counts(raw) == (0, 0)


@MERGING
async def test_turn_session_recreated_meanwhile_writes_nothing(
    seeded: Store, clock: FakeClock, raw: Raw, merging: bool
) -> None:
    async def recreating() -> None:
        async with seeded.turn(SID) as turn:
            _fill(turn, merging)
            await seeded.delete_session(SID)
            clock.advance(1)
            await seeded.create_session("telegram", "support", "1", "triage")

    with pytest.raises(SessionDeletedError):
        await recreating()
    assert await counts(raw) == (0, 0)
    assert (await session_row(raw))[0][5] == "idle"


async def test_turn_refuses_missing_session(store: Store) -> None:
    with pytest.raises(SessionNotFound):
        async with store.turn(SID):
            pass
    await store.create_session("telegram", "support", "1", "triage")
    async with store.turn(SID):  # the failed enter did not leave the id marked open
        pass


async def test_turn_refuses_nested_turn_of_same_session(seeded: Store) -> None:
    async with seeded.turn(SID):
        with pytest.raises(TurnActive) as caught:
            async with seeded.turn(SID):
                pass
    assert caught.value.code == "turn_active"
    async with seeded.turn(SID):
        pass


async def test_turn_refuses_concurrent_turn_of_same_session(seeded: Store) -> None:
    async def one() -> None:
        async with seeded.turn(SID) as turn:
            turn.append(NewMessage("assistant", "x"))

    results = await asyncio.gather(one(), one(), return_exceptions=True)
    assert sum(isinstance(r, TurnActive) for r in results) == 1
    assert sum(r is None for r in results) == 1


async def test_turns_of_different_sessions_run_side_by_side(seeded: Store) -> None:
    await seeded.create_session("telegram", "support", "2", "triage")
    async with seeded.turn(SID) as a, seeded.turn("telegram-support-2") as b:
        a.append(NewMessage("assistant", "a"))
        b.append(NewMessage("assistant", "b"))
    assert [m.text for m in await seeded.get_branch("telegram-support-2")] == ["b"]


@SHARED
async def test_turn_refuses_session_running_in_another_store(
    seeded: Store, backend: Backend
) -> None:
    async with backend.store() as other, seeded.turn(SID):
        with pytest.raises(RunActive):
            async with other.turn(SID):
                pass


async def test_turn_commit_chains_after_messages_appended_meanwhile(seeded: Store) -> None:
    async with seeded.turn(SID) as turn:
        await seeded.append_message(SID, "assistant", "operator reply")
        turn.append(NewMessage("assistant", "model reply"))
    texts = [m.text for m in await seeded.get_branch(SID)]
    assert texts == ["hello", "operator reply", "model reply"]


async def test_turn_keeps_agent_changed_meanwhile_unless_it_sets_one(seeded: Store) -> None:
    async with seeded.turn(SID):
        await seeded.update_session(SID, active_agent="human", metadata={"m": 1})
    session = await seeded.get_session(SID)
    assert session is not None
    assert (session.active_agent, session.metadata) == ("human", {"k": "v", "m": 1})


async def test_turn_rejects_bad_input_in_the_body(seeded: Store) -> None:
    async with seeded.turn(SID) as turn:
        with pytest.raises(ValueError):
            turn.append(NewMessage("robot", "x"))  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            turn.append(NewMessage("user", "x", data={"bad": object()}))
        with pytest.raises(ValueError):
            turn.set_active_agent("")
        with pytest.raises(ValueError):
            turn.record_event("", {})
        with pytest.raises(TypeError):
            turn.update_metadata({"bad": {1, 2}})
        assert turn.pending == ()


async def test_turn_refuses_writes_after_exit(seeded: Store) -> None:
    async with seeded.turn(SID) as turn:
        pass
    with pytest.raises(StoreError):
        turn.append(NewMessage("user", "late"))


@SQLITE_ONLY
async def test_turn_commit_hook_runs_in_the_same_transaction(seeded: SQLiteStore) -> None:
    """SQLite backend: a commit hook (``SQLiteTurn.add_commit_hook``) gets the connection."""
    seen: list[int] = []

    def hook(conn: sqlite3.Connection, committed: Sequence[Message]) -> None:
        seen.extend(m.id for m in committed)
        sql = "UPDATE sessions SET metadata = json_object('hooked', json('true'))"
        conn.execute(sql + " WHERE session_id = ?", (SID,))

    async with seeded.turn(SID) as turn:
        turn.append(NewMessage("assistant", "x"))
        turn.add_commit_hook(hook)
    assert seen == [turn.committed[0].id]
    assert (await seeded.get_session(SID)).metadata == {"hooked": True}  # type: ignore[union-attr]


@SQLITE_ONLY
async def test_turn_failing_commit_hook_writes_nothing_and_restores_status(
    seeded: SQLiteStore, raw: Raw
) -> None:
    """SQLite backend: a commit hook that raises undoes the whole commit."""
    before, before_counts = await session_row(raw), await counts(raw)

    def hook(conn: sqlite3.Connection, committed: Sequence[Message]) -> None:
        raise Boom

    async def hooked() -> None:
        async with seeded.turn(SID) as turn:
            _fill(turn)
            turn.add_commit_hook(hook)

    with pytest.raises(Boom):
        await hooked()
    assert await session_row(raw) == before
    assert await counts(raw) == before_counts


async def test_turn_works_in_memory(store: Store) -> None:
    await store.create_session("telegram", "support", "1", "triage")

    async def failing() -> None:
        async with store.turn(SID) as turn:
            turn.append(NewMessage("user", "x"))
            raise Boom

    with pytest.raises(Boom):
        await failing()
    async with store.turn(SID) as turn:
        turn.append(NewMessage("user", "y"))
    assert [m.text for m in await store.get_branch(SID)] == ["y"]
    assert (await store.get_session(SID)).status == "idle"  # type: ignore[union-attr]


POSTGRES = pytest.mark.parametrize("backend", ["postgres"], indirect=True)


async def _waiting_on_lock(url: str, query: str) -> None:
    """Until a backend runs ``query`` and waits for a lock (PostgreSQL; a connection of its own,
    since a transaction sees one snapshot of ``pg_stat_activity``)."""
    watcher = await asyncpg.connect(url)
    try:
        for _ in range(1000):
            waiting = await watcher.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND query LIKE $1",
                f"%{query}%",
            )
            if waiting:
                return
            await asyncio.sleep(0.01)
    finally:
        await watcher.close()
    raise AssertionError(f"no backend waits on a lock in {query!r}")


@POSTGRES
async def test_turn_cancelled_while_its_begin_waits_is_undone_once_the_begin_commits(
    seeded: Store, raw: Raw, backend: Backend
) -> None:
    """The begin is one call that commits on its own: a cancel while it waits for the session's
    lock waits for its outcome, then puts the status back and logs why."""
    before = await session_row(raw)
    holder = await raw._postgres()
    lock = holder.transaction()
    await lock.start()
    await holder.execute("SELECT 1 FROM sessions WHERE session_id = $1 FOR UPDATE", SID)
    reached: list[bool] = []

    async def enter() -> None:
        async with seeded.turn(SID):
            reached.append(True)

    task = asyncio.create_task(enter())
    await _waiting_on_lock(backend.url, "gateway_turn_enter")
    task.cancel()
    await asyncio.sleep(0)
    await lock.commit()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert reached == []
    assert await session_row(raw) == before
    kinds = await raw.rows(
        "SELECT kind, detail FROM session_events WHERE session_id = $1 ORDER BY seq", SID
    )
    assert [tuple(row) for row in kinds][-2:] == [
        ("turn_started", "{}"),
        ("turn_cancelled", '{"reason":"interrupted"}'),
    ]
    async with seeded.turn(SID):  # neither running nor open in this process
        pass


@POSTGRES
async def test_turn_whose_history_cannot_be_read_begins_nothing(seeded: Store, raw: Raw) -> None:
    """The history is read in the begin's statement (``gateway_turn_enter``): when that read
    fails, the begin is undone with it, as in SQLite's begin transaction; nothing is logged."""
    before, events = await session_row(raw), await raw.count("session_events")
    await raw.execute("ALTER TABLE messages RENAME TO messages_away")
    try:
        with pytest.raises(Exception, match="messages"):
            async with seeded.turn(SID):
                pass
    finally:
        await raw.execute("ALTER TABLE messages_away RENAME TO messages")
    assert await session_row(raw) == before
    assert await raw.count("session_events") == events
    async with seeded.turn(SID) as turn:
        assert [m.text for m in turn.history] == ["hello"]


@POSTGRES
async def test_turn_history_is_walked_by_key_with_a_plan_cached_while_the_table_was_small(
    seeded: Store, raw: Raw
) -> None:
    """A connection keeps the plan of ``gateway_turn_enter``'s walk from its first calls: made
    while ``messages`` was small, it must still probe the primary key once the table is large
    (not scan the whole table at every step of the walk)."""
    conn = await raw._postgres()
    enter = "SELECT * FROM gateway_turn_enter($1, 'test', '{}', 0, '{}', $2)"
    idle = "UPDATE sessions SET status = 'idle', owner = NULL WHERE session_id = $1"
    for _ in range(8):  # past PostgreSQL's five custom plans: the cached generic one
        await conn.fetch(enter, SID, 3)
        await conn.execute(idle, SID)
    await conn.execute(
        "INSERT INTO sessions (session_id, channel, account, chat_id, active_agent, created_at,"
        " updated_at) VALUES ('telegram-support-2', 'telegram', 'support', '2', 'triage', 0, 0)"
    )
    await conn.execute(
        "INSERT INTO messages (session_id, role, text, data, created_at)"
        " SELECT 'telegram-support-2', 'user', 'x', '{}', 0 FROM generate_series(1, 5000)"
    )
    async with conn.transaction():
        rows = await conn.fetch(enter, SID, 3)
        scans = await conn.fetchrow(
            "SELECT seq_scan, idx_scan FROM pg_stat_xact_user_tables"
            " WHERE relid = 'messages'::regclass"
        )
    assert [row["m_text"] for row in rows[1:]] == ["hello"]
    assert (scans["seq_scan"], scans["idx_scan"] > 0) == (0, True)
