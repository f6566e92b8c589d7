"""Retention (``purge_history``): what is older than the cutoff goes, on every backend, in chunks;
kept branches still load, running sessions and pending rows are never touched."""

from __future__ import annotations

import pytest

from webhook_bot_gateway.channels.web import web_dedup_key
from webhook_bot_gateway.store import NewMessage, OutboxIn, QuarantineIn, Store

from .conftest import FakeClock, Raw
from .pipeline import ACCOUNT, AGENT, CHANNEL, inbox_of, message, sid

DAY = 86400.0
KEEP = 7 * DAY
SID = sid("1")
OTHER = sid("2")


async def _new_session(store: Store, chat_id: str = "1") -> str:
    return (await store.create_session(CHANNEL, ACCOUNT, chat_id, AGENT)).session_id


@pytest.mark.parametrize("chunk_size", [1, 1000])
async def test_old_messages_go_and_every_kept_branch_still_loads(
    store: Store, clock: FakeClock, chunk_size: int
) -> None:
    await _new_session(store)
    root = await store.append_message(SID, "user", "old root")
    old_a = await store.append_message(SID, "assistant", "old answer")
    await store.set_active_head(SID, root.id)
    await store.append_message(SID, "assistant", "old other answer")  # a second branch
    clock.advance(10 * DAY)
    new_b = await store.append_message(SID, "user", "new on branch 2")
    await store.set_active_head(SID, old_a.id)
    new_a = await store.append_message(SID, "user", "new on branch 1")

    purged = await store.purge_history(KEEP, chunk_size)

    assert purged.counts["messages"] == 3
    kept = await store.all_messages(SID)
    assert [(m.id, m.parent_id, m.text) for m in kept] == [
        (new_b.id, None, "new on branch 2"),  # its parent went: it is a root now
        (new_a.id, None, "new on branch 1"),
    ]
    assert [m.id for m in await store.get_branch(SID)] == [new_a.id]
    assert [m.id for m in await store.get_branch(SID, head_id=new_b.id)] == [new_b.id]
    assert await store.latest_user_text(SID) == "new on branch 1"
    after = await store.purge_history(KEEP, chunk_size)
    assert after.total == 0  # a second pass finds nothing more


async def test_a_session_left_empty_is_deleted_and_a_recent_one_is_not(
    store: Store, clock: FakeClock
) -> None:
    await _new_session(store)
    await store.append_message(SID, "user", "old text")
    await store.record_event(SID, "note", {"n": 1})
    clock.advance(10 * DAY)
    await _new_session(store, "2")  # recent, with nothing in it yet

    purged = await store.purge_history(KEEP)

    assert await store.get_session(SID) is None
    assert await store.get_session(OTHER) is not None
    assert (purged.counts["messages"], purged.counts["sessions"]) == (1, 1)


async def test_a_web_session_deleted_takes_its_client_ids_with_it(
    store: Store, clock: FakeClock
) -> None:
    """Its user, back with the same session id, sends "c1" again: a new message (docs/data.md).
    A retention shorter than the dedup TTL: the keys are still live when the session goes."""
    web = await store.create_session("web", "", "0f8fe7a2c6b8", AGENT)
    await store.append_message(web.session_id, "user", "old text")
    keys = [web_dedup_key("0f8fe7a2c6b8", "c1"), "whatsapp:wamid.1"]
    assert await store.claim(keys) == set(keys)
    clock.advance(2 * DAY)

    purged = await store.purge_history(DAY)

    assert purged.counts["sessions"] == 1
    assert await store.claim(keys) == {keys[0]}


async def test_a_session_with_only_old_history_but_pending_work_stays_without_a_head(
    store: Store, clock: FakeClock
) -> None:
    await _new_session(store)
    await store.append_message(SID, "user", "old text")
    clock.advance(10 * DAY)
    [pending] = await inbox_of(store, message("1", "wa:new"))

    await store.purge_history(KEEP)

    session = await store.get_session(SID)
    assert session is not None
    assert session.head_id is None
    assert await store.get_branch(SID) == []
    assert [row.id for row in await store.pending_inbox(SID)] == [pending]


async def test_a_running_session_is_not_touched_until_its_turn_ends(
    store: Store, clock: FakeClock
) -> None:
    await _new_session(store)
    old = await store.append_message(SID, "user", "old text")
    await store.record_event(SID, "note", {"n": 1})
    clock.advance(10 * DAY)
    async with store.turn(SID) as turn:
        during = await store.purge_history(KEEP)
        turn.append(NewMessage("assistant", "answer"))
    assert (during.counts["messages"], during.counts["session_events"]) == (0, 0)
    texts = [m.text for m in await store.get_branch(SID)]
    assert texts == ["old text", "answer"]  # the turn committed on the history it read

    await store.purge_history(KEEP)

    [answer] = await store.get_branch(SID)
    assert (answer.text, answer.parent_id) == ("answer", None)
    assert old.id not in [m.id for m in await store.all_messages(SID)]


async def test_old_events_go_but_the_newest_stays_so_seq_goes_on(
    store: Store, clock: FakeClock
) -> None:
    await _new_session(store)
    for n in range(3):
        await store.record_event(SID, "note", {"n": n})
    clock.advance(10 * DAY)
    await store.append_message(SID, "user", "recent")  # the session is not empty

    purged = await store.purge_history(KEEP)

    assert purged.counts["session_events"] == 2
    assert [(e.seq, e.detail) for e in await store.list_events(SID)] == [(3, {"n": 2})]
    assert (await store.record_event(SID, "note", {"n": 3})).seq == 4


async def test_finished_pipeline_rows_go_and_pending_ones_stay(
    store: Store, clock: FakeClock, raw: Raw
) -> None:
    done, pending, dead = await inbox_of(
        store, message("1", "wa:1"), message("1", "wa:2"), message("1", "wa:3")
    )
    async with store.turn(SID, inbox_ids=[done]) as turn:
        turn.complete_inbox([done])
    await store.fail_inbox([dead], "boom", next_attempt_at=clock.now, dead=True)
    sent = await store.enqueue_outbox(OutboxIn(SID, CHANNEL, ACCOUNT, "1", {"text": "a"}))
    await store.outbox_sent(sent.id, ["p1"])
    failed = await store.enqueue_outbox(OutboxIn(SID, CHANNEL, ACCOUNT, "1", {"text": "b"}))
    await store.outbox_failed(failed.id, error="no", state="dead")
    waiting = await store.enqueue_outbox(OutboxIn(SID, CHANNEL, ACCOUNT, "1", {"text": "c"}))
    await store.ingest([QuarantineIn(CHANNEL, None, b"old junk", "unreadable")])
    clock.advance(10 * DAY)
    await store.ingest([QuarantineIn(CHANNEL, None, b"new junk", "unreadable")])

    purged = await store.purge_history(KEEP)

    assert [row[0] for row in await raw.rows("SELECT id FROM inbox ORDER BY id")] == [pending]
    assert [row[0] for row in await raw.rows("SELECT id FROM outbox ORDER BY id")] == [waiting.id]
    assert await raw.count("outbox_platform_ids") == 0
    assert [bytes(q.body) for q in await store.list_quarantine()] == [b"new junk"]
    assert (purged.counts["inbox"], purged.counts["outbox"], purged.counts["quarantine"]) == (
        2,
        2,
        1,
    )


async def test_old_attachment_rows_go_and_are_named_for_their_files(
    store: Store, clock: FakeClock
) -> None:
    await _new_session(store)
    old = await store.create_attachment(SID, name="a.pdf", content_type="x/y", source="upload")
    downloading = await store.create_attachment(
        SID, name="b.jpg", content_type="image/jpeg", source="whatsapp", state="pending"
    )
    clock.advance(10 * DAY)
    new = await store.create_attachment(SID, name="c.pdf", content_type="x/y", source="upload")

    purged = await store.purge_history(KEEP)

    assert purged.attachments == ((SID, old.id),)
    assert {a.id for a in await store.list_attachments(SID)} == {downloading.id, new.id}


@pytest.mark.parametrize(("age", "chunk"), [(-1.0, 10), (float("nan"), 10), (DAY, 0)])
async def test_bad_arguments_are_refused_before_anything_goes(
    store: Store, clock: FakeClock, raw: Raw, age: float, chunk: int
) -> None:
    await _new_session(store)
    await store.append_message(SID, "user", "old text")
    clock.advance(10 * DAY)
    before = await raw.dump("sessions", "messages", "session_events")
    with pytest.raises(ValueError):
        await store.purge_history(age, chunk)
    assert await raw.dump("sessions", "messages", "session_events") == before
