"""Attachment rows: created for a session, found only through it, finished once, gone with it."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from webhook_bot_gateway.store import (
    AttachmentIn,
    AttachmentNotFound,
    InboxIn,
    SessionNotFound,
    Store,
)

from .conftest import FakeClock, Raw
from .pipeline import ACCOUNT, AGENT, CHANNEL, inbox_of, sid

SID = sid("1")
OTHER = sid("2")


async def _sessions(store: Store) -> None:
    await store.create_session(CHANNEL, ACCOUNT, "1", AGENT)
    await store.create_session(CHANNEL, ACCOUNT, "2", AGENT)


async def test_create_get_and_list(store: Store) -> None:
    await _sessions(store)
    made = await store.create_attachment(
        SID, name="r.pdf", content_type="application/pdf", source="upload", size=10
    )
    assert len(made.id) == 32
    assert (made.state, made.size, made.message_key) == ("ready", 10, None)
    assert await store.get_attachment(SID, made.id) == made
    assert await store.get_attachment(OTHER, made.id) is None  # ids do not cross sessions
    assert await store.list_attachments(SID) == [made]
    assert await store.list_attachments(OTHER) == []


async def test_finish_records_the_outcome_and_logs_it(store: Store) -> None:
    await _sessions(store)
    made = await store.create_attachment(
        SID, name="photo", content_type="image/jpeg", source="telegram", state="pending"
    )
    assert await store.pending_attachments() == [made]
    done = await store.finish_attachment(made.id, state="failed", error="private_address")
    assert (done.state, done.error) == ("failed", "private_address")
    assert await store.pending_attachments() == []
    [event] = await store.list_events(SID)
    assert event.kind == "attachment"
    assert event.detail["state"] == "failed"


async def test_refusals_name_the_field(store: Store) -> None:
    await _sessions(store)
    with pytest.raises(SessionNotFound):
        await store.create_attachment(
            sid("9"), name="x", content_type="text/plain", source="upload"
        )
    with pytest.raises(ValueError, match="source"):
        await store.create_attachment(SID, name="x", content_type="text/plain", source="ftp")
    with pytest.raises(ValueError, match="content_type"):
        await store.create_attachment(SID, name="x", content_type="", source="upload")
    with pytest.raises(ValueError, match="32 hex"):
        await store.get_attachment(SID, "../../etc/passwd")
    with pytest.raises(AttachmentNotFound):
        await store.finish_attachment("0" * 32, state="ready")
    with pytest.raises(ValueError, match="state"):
        await store.finish_attachment("0" * 32, state="pending")
    assert await store.list_attachments(SID) == []


async def test_caller_made_ids_are_kept_and_listings_are_oldest_first(
    store: Store, clock: FakeClock
) -> None:
    await _sessions(store)

    async def made(attachment_id: str) -> str:
        row = await store.create_attachment(
            SID, name="f", content_type="text/plain", source="upload", attachment_id=attachment_id
        )
        assert row.id == attachment_id
        return row.id

    oldest = await made("f" * 32)
    clock.advance(1)
    ties = [await made(i * 32) for i in ("b", "a", "A")]
    # created_at first, then the id byte by byte: "A" < "a" < "b" (as SQLite compares them)
    listed = [a.id for a in await store.list_attachments(SID)]
    assert listed == [oldest, "A" * 32, "a" * 32, "b" * 32]
    assert [a.id for a in await store.message_attachments(["none"])] == []
    assert await store.get_attachment(SID, "A" * 32) is not None
    assert await store.get_attachment(SID, "c" * 32) is None
    assert set(ties) == {"A" * 32, "a" * 32, "b" * 32}


async def test_list_attachments_of_unknown_session_raises(store: Store) -> None:
    with pytest.raises(SessionNotFound):
        await store.list_attachments(sid("9"))


async def test_inbound_files_and_links_are_found_by_message(store: Store, raw: Raw) -> None:
    await _sessions(store)
    upload = await store.create_attachment(
        SID, name="a.pdf", content_type="application/pdf", source="upload", size=3
    )
    taken = await store.create_attachment(
        SID, name="b.pdf", content_type="application/pdf", source="upload", message_key="k0"
    )
    foreign = await store.create_attachment(
        OTHER, name="c.pdf", content_type="application/pdf", source="upload"
    )
    fetched = AttachmentIn(uuid.uuid4().hex, "photo", "image/jpeg", "whatsapp", {"media_id": "m"})
    item = InboxIn(
        CHANNEL,
        ACCOUNT,
        "1",
        "k1",
        {"text": "see"},
        attachments=(fetched,),
        links=(upload.id, taken.id, foreign.id),  # only this session's, not yet linked, move
    )
    await inbox_of(store, item)
    found = await store.message_attachments(["k1", "nothing"])
    assert {a.id for a in found} == {upload.id, fetched.id}
    assert [a.id for a in await store.message_attachments(["k0"])] == [taken.id]
    assert await store.message_attachments([]) == []
    keys = await raw.rows("SELECT id, message_key FROM attachments")
    assert sorted(keys) == sorted(
        [(upload.id, "k1"), (taken.id, "k0"), (foreign.id, None), (fetched.id, "k1")]
    )
    [pending] = await store.pending_attachments()
    assert (pending.id, pending.state, pending.media_ref) == (
        fetched.id,
        "pending",
        {"media_id": "m"},
    )
    with pytest.raises(ValueError, match="message_keys"):
        await store.message_attachments(["k1", ""])


async def test_pending_attachments_oldest_first_with_limit(store: Store, clock: FakeClock) -> None:
    await _sessions(store)
    made = []
    for n in range(3):
        made.append(
            await store.create_attachment(
                OTHER if n % 2 else SID,
                name=f"f{n}",
                content_type="image/jpeg",
                source="telegram",
                state="pending",
            )
        )
        clock.advance(1)
    await store.create_attachment(SID, name="done", content_type="text/plain", source="upload")
    assert await store.pending_attachments() == made
    assert await store.pending_attachments(limit=2) == made[:2]
    with pytest.raises(ValueError, match="limit"):
        await store.pending_attachments(limit=0)


async def test_finish_keeps_the_type_unless_told_and_logs_the_detail(store: Store) -> None:
    await _sessions(store)
    made = await store.create_attachment(
        SID,
        name="v",
        content_type="application/octet-stream",
        source="whatsapp",
        state="pending",
        message_key="k1",
    )
    done = await store.finish_attachment(made.id, state="ready", size=42)
    assert (done.state, done.size, done.content_type, done.error) == (
        "ready",
        42,
        "application/octet-stream",
        None,
    )
    typed = await store.finish_attachment(made.id, state="ready", size=7, content_type="video/mp4")
    assert (typed.size, typed.content_type) == (7, "video/mp4")
    assert await store.get_attachment(SID, made.id) == typed
    events = await store.list_events(SID)
    assert [e.detail for e in events] == [
        {
            "id": made.id,
            "name": "v",
            "content_type": content_type,
            "size": size,
            "state": "ready",
            "message_key": "k1",
        }
        for content_type, size in (("application/octet-stream", 42), ("video/mp4", 7))
    ]


async def test_downloads_finishing_together_log_one_gap_free_seq(store: Store) -> None:
    await _sessions(store)
    made = [
        await store.create_attachment(
            SID, name=f"f{n}", content_type="image/jpeg", source="telegram", state="pending"
        )
        for n in range(20)
    ]
    await store.record_event(SID, "note")
    done = await asyncio.gather(
        *(store.finish_attachment(a.id, state="ready", size=n) for n, a in enumerate(made))
    )
    assert [a.size for a in done] == list(range(20))
    events = await store.list_events(SID)
    assert [e.seq for e in events] == list(range(1, 22))
    assert sorted(e.detail["id"] for e in events[1:]) == sorted(a.id for a in made)
    assert await store.pending_attachments() == []


async def test_attachments_of_a_session_being_deleted_are_never_left_behind(
    store: Store, raw: Raw
) -> None:
    """Creating attachments while their session is deleted: each one either lands before the
    delete (and goes with the session) or is refused; none outlives it."""
    await _sessions(store)

    async def create(n: int) -> object:
        return await store.create_attachment(
            SID, name=f"f{n}", content_type="text/plain", source="upload"
        )

    results = await asyncio.gather(
        *(create(n) for n in range(30)),
        store.delete_session(SID),
        *(create(n) for n in range(30, 60)),
        return_exceptions=True,
    )
    assert results[30] is True
    refused = [r for r in results if isinstance(r, BaseException)]
    assert all(isinstance(r, SessionNotFound) for r in refused), refused
    assert await raw.rows("SELECT id FROM attachments WHERE session_id = ?", SID) == []
    assert await raw.count("session_events") == 0


async def test_refused_calls_write_nothing(store: Store, raw: Raw) -> None:
    await _sessions(store)
    made = await store.create_attachment(
        SID, name="x", content_type="text/plain", source="telegram", state="pending"
    )
    before = await raw.dump("attachments", "session_events")
    with pytest.raises(ValueError, match="name"):
        await store.create_attachment(SID, name="x" * 256, content_type="t/p", source="upload")
    with pytest.raises(ValueError, match="size"):
        await store.create_attachment(SID, name="x", content_type="t/p", source="upload", size=-1)
    with pytest.raises(ValueError, match="size"):
        await store.finish_attachment(made.id, state="ready", size=-1)
    with pytest.raises(ValueError, match="32 hex"):
        await store.finish_attachment("g" * 32, state="ready")
    with pytest.raises(SessionNotFound):
        await store.create_attachment(sid("9"), name="x", content_type="t/p", source="upload")
    assert await raw.dump("attachments", "session_events") == before
