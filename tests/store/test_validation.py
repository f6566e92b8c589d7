"""Every method that takes a session id refuses a malformed one before any lookup."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from store import InvalidSessionId, SQLiteStore

BAD_IDS: list[Any] = ["", "x" * 129, "has space", "slash/id", "dot.id", "ünï", None, 42, b"id"]

Call = Callable[[SQLiteStore, Any], Awaitable[object]]


async def _turn(store: SQLiteStore, sid: Any) -> None:
    async with store.turn(sid):
        pass


CALLS: dict[str, Call] = {
    "get_session": lambda s, sid: s.get_session(sid),
    "update_session": lambda s, sid: s.update_session(sid, active_agent="a"),
    "delete_session": lambda s, sid: s.delete_session(sid),
    "get_branch": lambda s, sid: s.get_branch(sid),
    "append_message": lambda s, sid: s.append_message(sid, "user", "x"),
    "set_active_head": lambda s, sid: s.set_active_head(sid, 1),
    "latest_user_text": lambda s, sid: s.latest_user_text(sid),
    "record_event": lambda s, sid: s.record_event(sid, "k"),
    "list_events": lambda s, sid: s.list_events(sid),
    "turn": _turn,
}


@pytest.mark.parametrize("method", sorted(CALLS))
@pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
async def test_methods_reject_invalid_session_id_before_lookup(method: str, bad: Any) -> None:
    store = SQLiteStore(":memory:")  # never opened: a lookup would raise StoreError instead
    with pytest.raises(InvalidSessionId) as caught:
        await CALLS[method](store, bad)
    assert isinstance(caught.value, ValueError)
    assert caught.value.code == "invalid_session_id"


async def test_valid_id_of_128_characters_is_accepted(store: SQLiteStore) -> None:
    assert await store.get_session("x" * 128) is None


@pytest.mark.parametrize(
    ("limit", "offset"), [(0, 0), (-1, 0), (1001, 0), (10, -1), (True, 0), (1.5, 0), (10, "0")]
)
async def test_list_sessions_rejects_bad_limit_or_offset(
    store: SQLiteStore, limit: Any, offset: Any
) -> None:
    with pytest.raises(ValueError):
        await store.list_sessions(limit=limit, offset=offset)


async def test_list_and_count_reject_unknown_status(store: SQLiteStore) -> None:
    with pytest.raises(ValueError, match="status"):
        await store.list_sessions(status="busy")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="status"):
        await store.count_sessions(status="busy")  # type: ignore[arg-type]


@pytest.mark.parametrize("head", [0, -1, True, "1"])
async def test_get_branch_and_set_active_head_reject_bad_message_ids(
    store: SQLiteStore, head: Any
) -> None:
    await store.create_session("telegram", "support", "1", "triage")
    with pytest.raises(ValueError):
        await store.get_branch("telegram-support-1", head_id=head)
    with pytest.raises(ValueError):
        await store.set_active_head("telegram-support-1", head)


@pytest.mark.parametrize(
    "args",
    [
        ("telegram", "support", "1", ""),
        ("telegram", "support", 1, "triage"),
        ("telegram", "x" * 130, "1", "triage"),
    ],
)
async def test_create_session_rejects_bad_parts(store: SQLiteStore, args: tuple[Any, ...]) -> None:
    with pytest.raises(ValueError):
        await store.create_session(*args)
    with pytest.raises(ValueError):
        await store.get_or_create_session(*args)
    assert await store.count_sessions() == 0


async def test_update_session_rejects_empty_agent(store: SQLiteStore) -> None:
    await store.create_session("telegram", "support", "1", "triage")
    with pytest.raises(ValueError):
        await store.update_session("telegram-support-1", active_agent="")


async def test_record_event_rejects_empty_kind(store: SQLiteStore) -> None:
    await store.create_session("telegram", "support", "1", "triage")
    with pytest.raises(ValueError):
        await store.record_event("telegram-support-1", "")
