"""Attachment rows: created for a session, found only through it, finished once, gone with it."""

from __future__ import annotations

import pytest

from store import AttachmentNotFound, SessionNotFound, SQLiteStore

from .pipeline import ACCOUNT, AGENT, CHANNEL, sid

SID = sid("1")
OTHER = sid("2")


async def _sessions(store: SQLiteStore) -> None:
    await store.create_session(CHANNEL, ACCOUNT, "1", AGENT)
    await store.create_session(CHANNEL, ACCOUNT, "2", AGENT)


async def test_create_get_and_list(store: SQLiteStore) -> None:
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


async def test_finish_records_the_outcome_and_logs_it(store: SQLiteStore) -> None:
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


async def test_refusals_name_the_field(store: SQLiteStore) -> None:
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
