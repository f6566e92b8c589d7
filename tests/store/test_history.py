"""History: append, branches of the DAG, head moves, latest user text, events."""

from __future__ import annotations

import pytest

from webhook_bot_gateway.store import (
    MessageNotFound,
    NewMessage,
    RunActive,
    SessionNotFound,
    Store,
)

from .conftest import FakeClock

SID = "telegram-support-1"


@pytest.fixture
async def session_store(store: Store) -> Store:
    await store.create_session("telegram", "support", "1", "triage")
    return store


async def test_append_message_chains_after_head_and_moves_it(session_store: Store) -> None:
    first = await session_store.append_message(SID, "user", "hi")
    second = await session_store.append_message(
        SID, "assistant", None, agent="triage", data={"tool_calls": [{"id": "c1"}]}
    )
    assert first.parent_id is None
    assert second.parent_id == first.id
    assert second.text is None
    assert second.data == {"tool_calls": [{"id": "c1"}]}
    assert (await session_store.get_session(SID)).head_id == second.id  # type: ignore[union-attr]


async def test_append_message_bumps_updated_at(session_store: Store, clock: FakeClock) -> None:
    clock.advance(5)
    message = await session_store.append_message(SID, "user", "hi")
    session = await session_store.get_session(SID)
    assert session is not None
    assert session.updated_at == message.created_at


async def test_append_message_rejects_unknown_role(session_store: Store) -> None:
    with pytest.raises(ValueError, match="role"):
        await session_store.append_message(SID, "robot", "hi")  # type: ignore[arg-type]


async def test_a_nul_character_in_a_message_is_refused_alike_on_every_backend(
    session_store: Store,
) -> None:
    """PostgreSQL's text cannot hold U+0000 and SQLite's can: both refuse it, before writing,
    appended alone or in a turn (in its body, not at its commit)."""
    with pytest.raises(ValueError, match="text must not contain a NUL"):
        await session_store.append_message(SID, "user", "a\x00b")
    async with session_store.turn(SID) as turn:
        with pytest.raises(ValueError, match="text must not contain a NUL"):
            turn.append(NewMessage("assistant", "a\x00b"))
    assert await session_store.all_messages(SID) == []


async def test_append_message_raises_for_missing_session(store: Store) -> None:
    with pytest.raises(SessionNotFound):
        await store.append_message(SID, "user", "hi")


async def test_get_branch_returns_root_to_head_oldest_first(session_store: Store) -> None:
    texts = ["a", "b", "c"]
    for text in texts:
        await session_store.append_message(SID, "user", text)
    assert [m.text for m in await session_store.get_branch(SID)] == texts


async def test_get_branch_is_empty_for_new_session(session_store: Store) -> None:
    assert await session_store.get_branch(SID) == []


async def test_get_branch_raises_for_missing_session(store: Store) -> None:
    with pytest.raises(SessionNotFound):
        await store.get_branch(SID)


async def _fork(store: Store) -> tuple[int, int, int]:
    """a -> b, then rewind to a and append c: two branches a-b and a-c."""
    a = await store.append_message(SID, "user", "a")
    b = await store.append_message(SID, "assistant", "b")
    await store.set_active_head(SID, a.id)
    c = await store.append_message(SID, "assistant", "c")
    return a.id, b.id, c.id


async def test_set_active_head_rewinds_and_appends_form_a_new_branch(
    session_store: Store,
) -> None:
    a, b, c = await _fork(session_store)
    assert [m.id for m in await session_store.get_branch(SID)] == [a, c]
    assert [m.id for m in await session_store.get_branch(SID, head_id=b)] == [a, b]
    moved = await session_store.set_active_head(SID, b)
    assert moved.head_id == b
    assert [m.text for m in await session_store.get_branch(SID)] == ["a", "b"]


async def test_set_active_head_refuses_other_sessions_message(session_store: Store) -> None:
    other = await session_store.create_session("telegram", "support", "2", "triage")
    foreign = await session_store.append_message(other.session_id, "user", "x")
    mine = await session_store.append_message(SID, "user", "y")
    with pytest.raises(MessageNotFound) as caught:
        await session_store.set_active_head(SID, foreign.id)
    assert caught.value.code == "unknown_message"
    assert (await session_store.get_session(SID)).head_id == mine.id  # type: ignore[union-attr]


async def test_set_active_head_refuses_unknown_message(session_store: Store) -> None:
    with pytest.raises(MessageNotFound):
        await session_store.set_active_head(SID, 999)


async def test_set_active_head_refuses_while_running(session_store: Store) -> None:
    a = await session_store.append_message(SID, "user", "a")
    await session_store.append_message(SID, "assistant", "b")
    async with session_store.turn(SID):
        with pytest.raises(RunActive) as caught:
            await session_store.set_active_head(SID, a.id)
    assert caught.value.code == "run_active"
    assert [m.text for m in await session_store.get_branch(SID)] == ["a", "b"]


async def test_get_branch_refuses_head_of_another_session(session_store: Store) -> None:
    other = await session_store.create_session("telegram", "support", "2", "triage")
    foreign = await session_store.append_message(other.session_id, "user", "x")
    with pytest.raises(MessageNotFound):
        await session_store.get_branch(SID, head_id=foreign.id)


async def test_latest_user_text_follows_current_branch(session_store: Store) -> None:
    assert await session_store.latest_user_text(SID) is None
    first = await session_store.append_message(SID, "user", "first")
    await session_store.append_message(SID, "assistant", "reply")
    assert await session_store.latest_user_text(SID) == "first"
    await session_store.append_message(SID, "user", "second")
    await session_store.append_message(SID, "assistant", "reply 2")
    assert await session_store.latest_user_text(SID) == "second"
    await session_store.set_active_head(SID, first.id)
    assert await session_store.latest_user_text(SID) == "first"


async def test_latest_user_text_none_without_user_messages(session_store: Store) -> None:
    await session_store.append_message(SID, "system", "be nice")
    assert await session_store.latest_user_text(SID) is None


async def test_record_event_and_list_events_oldest_first(
    session_store: Store, clock: FakeClock
) -> None:
    await session_store.record_event(SID, "handoff", {"to": "human"})
    clock.advance(1)
    await session_store.record_event(SID, "agent_fallback", {"missing": "x"})
    events = await session_store.list_events(SID)
    assert [(e.kind, e.detail) for e in events] == [
        ("handoff", {"to": "human"}),
        ("agent_fallback", {"missing": "x"}),
    ]
    assert events[0].created_at < events[1].created_at


async def test_record_event_raises_for_missing_session(store: Store) -> None:
    with pytest.raises(SessionNotFound):
        await store.record_event(SID, "note")
    with pytest.raises(SessionNotFound):
        await store.list_events(SID)
