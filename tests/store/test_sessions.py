"""Sessions: create, read, update, delete, list, count, interrupt."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from webhook_bot_gateway.store import NewMessage, SessionExistsError, SessionNotFound, Store

from .conftest import START, FakeClock


async def test_create_session_builds_id_and_defaults(store: Store) -> None:
    session = await store.create_session("telegram", "support", "12345", "triage", {"lang": "en"})
    assert session.session_id == "telegram-support-12345"
    assert (session.channel, session.account, session.chat_id) == ("telegram", "support", "12345")
    assert session.active_agent == "triage"
    assert session.status == "idle"
    assert session.head_id is None
    assert session.metadata == {"lang": "en"}
    assert session.created_at == session.updated_at == datetime.fromtimestamp(START, tz=UTC)
    assert session.created_at.tzinfo is UTC


async def test_create_session_keeps_original_chat_id_and_sanitizes_id(store: Store) -> None:
    session = await store.create_session("whatsapp", "555", "US.1349", "triage")
    assert session.session_id == "whatsapp-555-US_1349"
    assert session.chat_id == "US.1349"


async def test_create_session_refuses_existing(store: Store) -> None:
    await store.create_session("telegram", "support", "1", "triage")
    with pytest.raises(SessionExistsError) as caught:
        await store.create_session("telegram", "support", "1", "billing")
    assert caught.value.code == "session_exists"
    assert (await store.get_session("telegram-support-1")).active_agent == "triage"  # type: ignore[union-attr]


async def test_get_session_returns_none_when_missing(store: Store) -> None:
    assert await store.get_session("telegram-support-404") is None


async def test_get_or_create_session_returns_existing_unchanged(store: Store) -> None:
    first = await store.get_or_create_session("telegram", "support", "1", "triage")
    again = await store.get_or_create_session("telegram", "support", "1", "billing")
    assert again == first


async def test_get_or_create_session_is_atomic_under_concurrency(store: Store) -> None:
    results = await asyncio.gather(
        *(store.get_or_create_session("telegram", "support", "1", f"a{i}") for i in range(20))
    )
    assert len({r.active_agent for r in results}) == 1
    assert await store.count_sessions() == 1


async def test_update_session_sets_agent_merges_metadata_and_bumps_time(
    store: Store, clock: FakeClock
) -> None:
    await store.create_session("telegram", "support", "1", "triage", {"a": 1, "b": 2})
    clock.advance(10)
    updated = await store.update_session("telegram-support-1", metadata={"b": 3, "c": 4})
    assert updated.active_agent == "triage"
    assert updated.metadata == {"a": 1, "b": 3, "c": 4}
    assert updated.updated_at == datetime.fromtimestamp(START + 10, tz=UTC)
    updated = await store.update_session("telegram-support-1", active_agent="billing")
    assert updated.active_agent == "billing"
    assert updated.metadata == {"a": 1, "b": 3, "c": 4}


async def test_update_session_raises_when_missing(store: Store) -> None:
    with pytest.raises(SessionNotFound) as caught:
        await store.update_session("telegram-support-404", active_agent="x")
    assert caught.value.code == "unknown_session"


async def test_update_session_rejects_unserializable_metadata(store: Store) -> None:
    await store.create_session("telegram", "support", "1", "triage")
    with pytest.raises(TypeError):
        await store.update_session("telegram-support-1", metadata={"x": object()})


async def test_delete_session_removes_messages_and_events(store: Store) -> None:
    session = await store.create_session("telegram", "support", "1", "triage")
    await store.append_message(session.session_id, "user", "hi")
    await store.record_event(session.session_id, "note", {})
    assert await store.delete_session(session.session_id) is True
    assert await store.get_session(session.session_id) is None
    assert await store.delete_session(session.session_id) is False
    again = await store.create_session("telegram", "support", "1", "triage")
    assert await store.get_branch(again.session_id) == []
    assert await store.list_events(again.session_id) == []


async def test_delete_session_with_long_history(store: Store) -> None:
    session = await store.create_session("telegram", "support", "1", "triage")
    async with store.turn(session.session_id) as turn:
        for i in range(3000):  # deeper than SQLite's trigger recursion limit of 1000
            turn.append(NewMessage("user", str(i)))
    assert await store.delete_session(session.session_id) is True


async def _three_sessions(store: Store, clock: FakeClock) -> None:
    await store.create_session("telegram", "support", "1", "triage")
    clock.advance(1)
    await store.create_session("whatsapp", "555", "2", "billing")
    clock.advance(1)
    await store.create_session("telegram", "support", "3", "billing")


async def test_list_sessions_orders_by_updated_at_desc_then_id(
    store: Store, clock: FakeClock
) -> None:
    await _three_sessions(store, clock)
    ids = [s.session_id for s in await store.list_sessions()]
    assert ids == ["telegram-support-3", "whatsapp-555-2", "telegram-support-1"]
    clock.advance(1)
    await store.append_message("telegram-support-1", "user", "hi")
    ids = [s.session_id for s in await store.list_sessions()]
    assert ids[0] == "telegram-support-1"


async def test_list_sessions_ties_break_by_id(store: Store) -> None:
    for chat in ("b", "c", "a"):
        await store.create_session("web", "x", chat, "triage")
    ids = [s.session_id for s in await store.list_sessions()]
    assert ids == ["web-x-a", "web-x-b", "web-x-c"]


async def test_list_sessions_pages_with_limit_and_offset(store: Store, clock: FakeClock) -> None:
    await _three_sessions(store, clock)
    first = await store.list_sessions(limit=2)
    rest = await store.list_sessions(limit=2, offset=2)
    assert [s.session_id for s in first + rest] == [
        "telegram-support-3",
        "whatsapp-555-2",
        "telegram-support-1",
    ]
    assert await store.list_sessions(limit=2, offset=3) == []


async def test_list_and_count_sessions_filter(store: Store, clock: FakeClock) -> None:
    await _three_sessions(store, clock)
    telegram = await store.list_sessions(channel="telegram")
    assert {s.session_id for s in telegram} == {"telegram-support-1", "telegram-support-3"}
    billing = await store.list_sessions(agent="billing", channel="telegram")
    assert [s.session_id for s in billing] == ["telegram-support-3"]
    assert await store.count_sessions() == 3
    assert await store.count_sessions(channel="telegram") == 2
    assert await store.count_sessions(agent="billing") == 2
    assert await store.count_sessions(status="idle") == 3
    assert await store.count_sessions(status="running") == 0
    assert await store.list_sessions(status="interrupted") == []


async def test_interrupt_running_marks_only_running_sessions(store: Store) -> None:
    await store.create_session("telegram", "support", "1", "triage")
    await store.create_session("telegram", "support", "2", "triage")
    scope = store.turn("telegram-support-2")
    await scope.__aenter__()  # left open, as a crash would leave it
    assert await store.interrupt_running() == ["telegram-support-2"]
    assert (await store.get_session("telegram-support-2")).status == "interrupted"  # type: ignore[union-attr]
    assert (await store.get_session("telegram-support-1")).status == "idle"  # type: ignore[union-attr]
    assert await store.interrupt_running() == []


async def test_ping_answers(store: Store) -> None:
    await store.ping()
