"""The per-session event log: a gap-free seq, written in the transaction of the change it reports,
heard by watchers only after that transaction commits."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from webhook_bot_gateway.store import (
    AttachmentIn,
    InboxIn,
    NewMessage,
    OutboxIn,
    ParsedDelivery,
    RunActive,
    StatusIn,
    Store,
)

from .conftest import SHARED, Backend, Raw
from .pipeline import ACCOUNT, AGENT, CHANNEL, inbox_of, message, sid

SID = sid("1")


async def kinds(store: Store, session_id: str = SID) -> list[str]:
    return [event.kind for event in await store.list_events(session_id)]


async def test_seq_counts_per_session_without_gaps(store: Store) -> None:
    await inbox_of(store, message("1", "k1"), message("2", "k2"), message("1", "k3"))
    await store.record_event(SID, "note", {"n": 1})
    one = await store.list_events(SID)
    two = await store.list_events(sid("2"))
    assert [e.seq for e in one] == [1, 2, 3]
    assert [e.kind for e in one] == ["message", "message", "note"]
    assert [e.seq for e in two] == [1]


async def test_list_events_after_and_limit(store: Store) -> None:
    await store.create_session(CHANNEL, ACCOUNT, "1", AGENT)
    for n in range(5):
        await store.record_event(SID, "note", {"n": n})
    after = await store.list_events(SID, after=2)
    assert [e.seq for e in after] == [3, 4, 5]
    page = await store.list_events(SID, after=1, limit=2)
    assert [e.detail["n"] for e in page] == [1, 2]
    assert await store.list_events(SID, after=5) == []
    with pytest.raises(ValueError, match="after"):
        await store.list_events(SID, after=-1)


async def test_inbound_message_event_lists_links_and_new_platform_files(
    store: Store, raw: Raw
) -> None:
    await store.create_session(CHANNEL, ACCOUNT, "1", AGENT)
    upload = await store.create_attachment(
        SID, name="a.pdf", content_type="application/pdf", source="upload", size=3
    )
    fetched = AttachmentIn(
        uuid.uuid4().hex, "photo", "image/jpeg", "whatsapp", {"account": ACCOUNT, "media_id": "m1"}
    )
    item = InboxIn(
        CHANNEL,
        ACCOUNT,
        "1",
        "k1",
        {"text": "see", "kind": "image", "message_id": "wamid.1"},
        attachments=(fetched,),
        links=(upload.id,),
    )
    await inbox_of(store, item)
    [event] = [e for e in await store.list_events(SID) if e.kind == "message"]
    assert event.detail == {
        "role": "user",
        "text": "see",
        "agent": None,
        "kind": "image",
        "message_id": "wamid.1",
        "sender_name": None,
        "attachments": [upload.id, fetched.id],
    }
    rows = await raw.rows("SELECT id, state, message_key FROM attachments ORDER BY source")
    assert sorted(rows) == sorted([(upload.id, "ready", "k1"), (fetched.id, "pending", "k1")])
    [pending] = await store.pending_attachments()
    assert pending.media_ref == {"account": ACCOUNT, "media_id": "m1"}


async def test_an_upload_joining_a_message_is_logged_before_it_with_its_name_and_type(
    store: Store,
) -> None:
    """Uploads reach watchers as platform files do: an ``attachment`` event names each file,
    logged ahead of the message that brought it, so a client showing that message knows it."""
    await store.create_session(CHANNEL, ACCOUNT, "1", AGENT)
    picture, notes = [
        await store.create_attachment(SID, name=name, content_type=kind, source="upload", size=n)
        for name, kind, n in (("cat.png", "image/png", 68), ("notes.txt", "text/plain", 5))
    ]
    item = InboxIn(CHANNEL, ACCOUNT, "1", "k1", {"text": "see"}, links=(notes.id, picture.id))
    await inbox_of(store, item)
    events = await store.list_events(SID)
    assert [(e.seq, e.kind) for e in events] == [
        (1, "attachment"),
        (2, "attachment"),
        (3, "message"),
    ]
    assert [e.detail for e in events[:2]] == [
        {
            "id": notes.id,
            "name": "notes.txt",
            "content_type": "text/plain",
            "size": 5,
            "state": "ready",
            "message_key": "k1",
        },
        {
            "id": picture.id,
            "name": "cat.png",
            "content_type": "image/png",
            "size": 68,
            "state": "ready",
            "message_key": "k1",
        },
    ]
    assert events[2].detail["attachments"] == [notes.id, picture.id]


async def test_an_upload_referenced_again_is_not_logged_again(store: Store) -> None:
    await store.create_session(CHANNEL, ACCOUNT, "1", AGENT)
    upload = await store.create_attachment(
        SID, name="a.pdf", content_type="application/pdf", source="upload", size=3
    )
    await inbox_of(store, InboxIn(CHANNEL, ACCOUNT, "1", "k1", {"text": "a"}, links=(upload.id,)))
    await inbox_of(store, InboxIn(CHANNEL, ACCOUNT, "1", "k2", {"text": "b"}, links=(upload.id,)))
    assert await kinds(store) == ["attachment", "message", "message"]


async def test_a_duplicate_message_logs_nothing(store: Store) -> None:
    await inbox_of(store, message("1", "k1"))
    delivery = await store.ingest([])
    assert delivery == []
    again = ParsedDelivery(inbox=(message("1", "k1"),))
    await store.record_parsed(None, again, starting_agent=AGENT)
    assert await kinds(store) == ["message"]


async def test_delivery_status_is_logged_in_the_session_of_the_reply(
    store: Store,
) -> None:
    await store.create_session(CHANNEL, ACCOUNT, "1", AGENT)
    row = await store.enqueue_outbox(OutboxIn(SID, CHANNEL, ACCOUNT, "1", {"text": "x"}))
    await store.outbox_sent(row.id, ["wamid.out"])
    statuses = (
        StatusIn(CHANNEL, ACCOUNT, "wamid.out", "delivered", None),
        StatusIn(CHANNEL, ACCOUNT, "wamid.unknown", "read", None),
    )
    await store.record_parsed(None, ParsedDelivery(statuses=statuses), starting_agent=AGENT)
    events = await store.list_events(SID)
    assert [(e.kind, e.detail) for e in events] == [
        ("status", {"outbox_id": row.id, "state": "sent"}),  # logged by outbox_sent itself
        ("status", {"outbox_id": row.id, "state": "delivered"}),
    ]


async def test_answers_name_their_outbox_row_when_each_has_one(store: Store, raw: Raw) -> None:
    await store.create_session(CHANNEL, ACCOUNT, "1", AGENT)
    async with store.turn(SID) as turn:
        for text in ("one", "two"):
            turn.append(NewMessage("assistant", text, agent=AGENT))
            turn.add_outbox(OutboxIn(SID, CHANNEL, ACCOUNT, "1", {"text": text}))
    rows = [row.id for row in turn.committed_outbox]
    shown = [e.detail for e in await store.list_events(SID) if e.kind == "message"]
    assert [(d["text"], d["outbox_id"]) for d in shown] == list(
        zip(["one", "two"], rows, strict=True)
    )
    # As written, byte for byte, on every backend (PostgreSQL puts the ids in SQL).
    stored = await raw.rows("SELECT detail FROM session_events WHERE kind = 'message' ORDER BY seq")
    assert [detail for (detail,) in stored] == [
        json.dumps(
            {
                "message_id": message.id,
                "role": "assistant",
                "text": message.text,
                "agent": AGENT,
                "attachments": [],
                "outbox_id": row,
            },
            separators=(",", ":"),
        )
        for message, row in zip(turn.committed, rows, strict=True)
    ]


async def test_turn_logs_start_answers_and_finish(store: Store) -> None:
    await store.create_session(CHANNEL, ACCOUNT, "1", AGENT)
    async with store.turn(SID) as turn:
        turn.append(NewMessage("user", "hi"))
        turn.append(NewMessage("assistant", None, data={"tool_calls": []}))
        turn.append(NewMessage("tool", "result"))
        turn.append(NewMessage("assistant", "hello", agent=AGENT, data={"buttons": ["ok"]}))
        turn.append(NewMessage("operator", "from a person", agent="operator"))
    events = await store.list_events(SID)
    assert [e.kind for e in events] == ["turn_started", "message", "message", "turn_finished"]
    assert events[1].detail["buttons"] == ["ok"]
    assert events[2].detail["role"] == "operator"
    assert events[3].detail == {"replies": 2}


async def test_discarded_turn_commits_what_follows_as_cancelled(store: Store) -> None:
    await store.create_session(CHANNEL, ACCOUNT, "1", AGENT)
    async with store.turn(SID) as turn:
        turn.append(NewMessage("assistant", "never", agent=AGENT))
        turn.set_active_agent("billing")
        turn.record_event("agent_changed", {"to": "billing"})
        turn.discard()
        turn.append(NewMessage("user", "kept", data={"cancelled": True}))
    session = await store.get_session(SID)
    assert session is not None
    assert session.active_agent == AGENT
    assert [m.text for m in await store.get_branch(SID)] == ["kept"]
    events = await store.list_events(SID)
    assert [(e.kind, e.detail) for e in events] == [
        ("turn_started", {}),
        ("turn_cancelled", {"reason": "cancelled"}),
    ]


@SHARED
async def test_interrupted_turns_are_logged_as_cancelled(backend: Backend) -> None:
    async with backend.store() as store:
        await store.create_session(CHANNEL, ACCOUNT, "1", AGENT)
        scope = store.turn(SID)
        await scope.__aenter__()  # a process that dies here leaves the session running
    async with backend.store() as store:
        assert await store.interrupt_running() == [SID]
        events = await store.list_events(SID)
    assert [(e.kind, e.detail) for e in events] == [
        ("turn_started", {}),
        ("turn_cancelled", {"reason": "interrupted"}),
    ]


async def test_set_agent_and_rewind_are_logged_in_their_transaction(
    store: Store,
) -> None:
    await store.create_session(CHANNEL, ACCOUNT, "1", AGENT)
    first = await store.append_message(SID, "user", "a")
    await store.append_message(SID, "user", "b")
    await store.set_agent(SID, "human", reason="operator")
    await store.set_agent(SID, "human", reason="operator")  # no change: no event
    await store.set_active_head(SID, first.id)
    events = await store.list_events(SID)
    assert [(e.kind, e.detail) for e in events] == [
        ("agent_changed", {"from": AGENT, "to": "human", "reason": "operator"}),
        ("head_moved", {"message_id": first.id}),
    ]
    async with store.turn(SID):
        with pytest.raises(RunActive):
            await store.set_agent(SID, AGENT, reason="operator")


async def test_watchers_hear_sessions_after_commit_only(store: Store) -> None:
    heard: list[frozenset[str]] = []
    stop = store.watch_events(heard.append)
    await inbox_of(store, message("1", "k1"), message("2", "k2"))
    assert heard == [frozenset({SID, sid("2")})]

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        async with store.turn(SID):
            raise Boom
    # The rollback's own transaction logged turn_cancelled; the turn start was heard too.
    assert heard[1:] == [frozenset({SID}), frozenset({SID})]
    stop()
    await store.record_event(SID, "note")
    assert len(heard) == 3


async def test_events_go_with_their_session(store: Store, raw: Raw) -> None:
    await inbox_of(store, message("1", "k1"))
    await store.create_attachment(SID, name="x", content_type="text/plain", source="upload")
    assert await store.delete_session(SID)
    assert await raw.count("session_events") == 0
    assert await raw.count("attachments") == 0
    # A session created again under the same id starts its log at 1.
    await inbox_of(store, message("1", "k2"))
    assert [e.seq for e in await store.list_events(SID)] == [1]


@SHARED
async def test_concurrent_writers_on_one_database_never_share_a_seq(backend: Backend) -> None:
    async with backend.store() as first, backend.store() as second:
        await first.create_session(CHANNEL, ACCOUNT, "1", AGENT)
        await asyncio.gather(
            *(
                store.record_event(SID, "note", {"n": n})
                for n in range(20)
                for store in (first, second)
            )
        )
        seqs = [e.seq for e in await first.list_events(SID)]
    assert seqs == list(range(1, 41))


async def test_concurrent_writes_of_one_store_never_share_a_seq(store: Store) -> None:
    await store.create_session(CHANNEL, ACCOUNT, "1", AGENT)
    first = await store.append_message(SID, "user", "a")
    await asyncio.gather(
        *(store.record_event(SID, "note", {"n": n}) for n in range(30)),
        *(store.set_active_head(SID, first.id) for _ in range(5)),
    )
    events = await store.list_events(SID)
    assert [e.seq for e in events] == list(range(1, 36))
    assert sorted(e.detail["n"] for e in events if e.kind == "note") == list(range(30))
