"""Every method that takes a session id refuses a malformed one before any lookup; bad
arguments are refused on every backend."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from webhook_bot_gateway.store import InvalidSessionId, SQLiteStore, Store
from webhook_bot_gateway.store.postgres import PostgresStore

BAD_IDS: list[Any] = ["", "x" * 129, "has space", "slash/id", "dot.id", "ünï", None, 42, b"id"]

Call = Callable[[Store, Any], Awaitable[object]]


async def _turn(store: Store, sid: Any) -> None:
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
    "set_agent": lambda s, sid: s.set_agent(sid, "a", reason="r"),
    "turn": _turn,
    "create_attachment": lambda s, sid: s.create_attachment(
        sid, name="x", content_type="text/plain", source="upload"
    ),
    "get_attachment": lambda s, sid: s.get_attachment(sid, "0" * 32),
    "list_attachments": lambda s, sid: s.list_attachments(sid),
    "pending_inbox": lambda s, sid: s.pending_inbox(sid),
    "list_outbox": lambda s, sid: s.list_outbox(sid),
}

# Never opened: a lookup would raise StoreError instead (the PostgreSQL url is never dialled).
UNOPENED: dict[str, Callable[[], Store]] = {
    "sqlite": lambda: SQLiteStore(":memory:"),
    "postgres": lambda: PostgresStore("postgresql://never@127.0.0.1:1/never"),
}


@pytest.mark.parametrize("kind", sorted(UNOPENED))
@pytest.mark.parametrize("method", sorted(CALLS))
@pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
async def test_methods_reject_invalid_session_id_before_lookup(
    kind: str, method: str, bad: Any
) -> None:
    store = UNOPENED[kind]()
    with pytest.raises(InvalidSessionId) as caught:
        await CALLS[method](store, bad)
    assert isinstance(caught.value, ValueError)
    assert caught.value.code == "invalid_session_id"


async def test_valid_id_of_128_characters_is_accepted(store: Store) -> None:
    assert await store.get_session("x" * 128) is None


@pytest.mark.parametrize(
    ("limit", "offset"), [(0, 0), (-1, 0), (1001, 0), (10, -1), (True, 0), (1.5, 0), (10, "0")]
)
async def test_list_sessions_rejects_bad_limit_or_offset(
    store: Store, limit: Any, offset: Any
) -> None:
    with pytest.raises(ValueError):
        await store.list_sessions(limit=limit, offset=offset)


@pytest.mark.parametrize("field", ["channel", "agent", "search"])
async def test_list_and_count_refuse_a_nul_in_a_filter_on_every_backend(
    store: Store, field: str
) -> None:
    """PostgreSQL's text holds no NUL: refused on SQLite too, where it matched everything."""
    await store.create_session("telegram", "support", "1", "triage")
    with pytest.raises(ValueError, match=f"{field} must not contain a NUL"):
        await store.list_sessions(**{field: "a\x00"})
    with pytest.raises(ValueError, match=f"{field} must not contain a NUL"):
        await store.count_sessions(**{field: "\x00"})


async def test_list_and_count_reject_unknown_status(store: Store) -> None:
    with pytest.raises(ValueError, match="status"):
        await store.list_sessions(status="busy")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="status"):
        await store.count_sessions(status="busy")  # type: ignore[arg-type]


@pytest.mark.parametrize("head", [0, -1, True, "1"])
async def test_get_branch_and_set_active_head_reject_bad_message_ids(
    store: Store, head: Any
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
async def test_create_session_rejects_bad_parts(store: Store, args: tuple[Any, ...]) -> None:
    with pytest.raises(ValueError):
        await store.create_session(*args)
    with pytest.raises(ValueError):
        await store.get_or_create_session(*args)
    assert await store.count_sessions() == 0


async def test_update_session_rejects_empty_agent(store: Store) -> None:
    await store.create_session("telegram", "support", "1", "triage")
    with pytest.raises(ValueError):
        await store.update_session("telegram-support-1", active_agent="")


async def test_record_event_rejects_empty_kind(store: Store) -> None:
    await store.create_session("telegram", "support", "1", "triage")
    with pytest.raises(ValueError):
        await store.record_event("telegram-support-1", "")


BIG = 2**63  # one past what SQLite's INTEGER and PostgreSQL's BIGINT hold

BIG_CALLS: dict[str, tuple[str, Callable[[Store], Awaitable[object]]]] = {
    "list_sessions": ("offset", lambda s: s.list_sessions(limit=10, offset=BIG)),
    "fail_inbox": ("ids", lambda s: s.fail_inbox([BIG], "e", next_attempt_at=1.0, dead=False)),
    "list_events": ("after", lambda s: s.list_events("telegram-bot-1", after=BIG)),
    "get_branch": ("head_id", lambda s: s.get_branch("telegram-bot-1", head_id=BIG)),
    "set_active_head": ("message_id", lambda s: s.set_active_head("telegram-bot-1", BIG)),
    "outbox_sent": ("outbox_id", lambda s: s.outbox_sent(BIG, ["x"])),
    "claim_outbox": ("outbox_id", lambda s: s.claim_outbox(BIG, 10)),
    "get_quarantine": ("quarantine_id", lambda s: s.get_quarantine(BIG)),
    "purge_finished": ("chunk_size", lambda s: s.purge_finished(1, chunk_size=BIG)),
}


@pytest.mark.parametrize("method", sorted(BIG_CALLS))
async def test_an_integer_past_64_bits_is_refused_naming_the_field(
    store: Store, method: str
) -> None:
    """Not SQLite's OverflowError or asyncpg's DataError, which differed and named nothing;
    the store stays usable after it."""
    field, call = BIG_CALLS[method]
    with pytest.raises(ValueError, match=f"^{field} must be at most {BIG - 1} "):
        await call(store)
    assert await store.get_quarantine(1) is None
    assert await store.list_sessions() == []
