"""Error texts the store records quote what a platform or a model answered; PostgreSQL's text
holds no NUL character, so on every backend a NUL in them is stored as U+FFFD, and the failure
they describe is recorded (refused, it would be retried or re-sent for ever)."""

from __future__ import annotations

import re

import pytest

from webhook_bot_gateway.store import (
    OutboxIn,
    OutboxItem,
    ParsedDelivery,
    QuarantineIn,
    StatusIn,
    Store,
)

from .conftest import FakeClock
from .pipeline import ACCOUNT, AGENT, CHANNEL, delivery, inbox_of, message, sid

SID = sid("a")
NUL = "broken\x00answer"
STORED = "broken\ufffdanswer"


async def queued(store: Store) -> OutboxItem:
    await store.get_or_create_session(CHANNEL, ACCOUNT, "a", AGENT)
    return await store.enqueue_outbox(OutboxIn(SID, CHANNEL, ACCOUNT, "a", {"text": "m"}))


async def test_a_failed_turns_error_with_a_nul_is_recorded(store: Store, clock: FakeClock) -> None:
    ids = await inbox_of(store, message("a", "k1"))
    await store.fail_inbox(ids, NUL, next_attempt_at=clock.now + 2, dead=False)
    [row] = await store.pending_inbox(SID)
    assert (row.attempts, row.error) == (1, STORED)
    await store.fail_inbox(ids, NUL, next_attempt_at=clock.now, dead=True)
    [dead] = await store.list_dead_inbox()
    assert dead.error == STORED


async def test_a_sends_retry_and_failure_with_a_nul_are_recorded(
    store: Store, clock: FakeClock
) -> None:
    item = await queued(store)
    await store.outbox_retry(item.id, next_attempt_at=clock.now, error=NUL)
    [row] = await store.list_outbox(SID)
    assert (row.state, row.attempts, row.error) == ("pending", 1, STORED)
    await store.outbox_redirect(item.id, chat_id="b", error=NUL)
    [row] = await store.list_outbox(SID)
    assert (row.chat_id, row.error) == ("b", STORED)
    await store.outbox_failed(item.id, error=NUL, state="failed")
    [row] = await store.list_outbox(SID)
    assert (row.state, row.error) == ("failed", STORED)


async def test_a_downloads_error_with_a_nul_is_recorded(store: Store) -> None:
    await store.get_or_create_session(CHANNEL, ACCOUNT, "a", AGENT)
    made = await store.create_attachment(
        SID, name="photo", content_type="image/jpeg", source="telegram", state="pending"
    )
    done = await store.finish_attachment(made.id, state="failed", error=NUL)
    assert (done.state, done.error) == ("failed", STORED)


async def test_a_delivery_status_error_with_a_nul_is_recorded(store: Store) -> None:
    item = await queued(store)
    await store.outbox_sent(item.id, ["wamid.out"])
    failed = StatusIn(CHANNEL, ACCOUNT, "wamid.out", "failed", NUL)
    await store.record_parsed(None, ParsedDelivery(statuses=(failed,)), starting_agent=AGENT)
    [row] = await store.list_outbox(SID)
    assert (row.delivery_state, row.error) == ("failed", STORED)
    details = [e.detail for e in await store.list_events(SID) if e.kind == "status"]
    assert details[-1] == {"outbox_id": item.id, "state": "failed", "error": STORED}


async def test_a_handoff_reason_with_a_nul_is_recorded(store: Store) -> None:
    await store.get_or_create_session(CHANNEL, ACCOUNT, "a", AGENT)
    await store.set_agent(SID, "billing", reason=NUL)
    [event] = await store.list_events(SID)
    assert event.detail == {"from": AGENT, "to": "billing", "reason": STORED}


async def test_a_quarantine_reason_with_a_nul_is_recorded(store: Store) -> None:
    """The reason may quote the body that could not be read: the body is kept whole."""
    body = b'{"entry": "\\u0000"}'
    [result] = await store.ingest([QuarantineIn(CHANNEL, ACCOUNT, body, NUL)])
    [kept] = await store.list_quarantine()
    assert (kept.id, kept.reason, kept.body) == (result.quarantine_id, STORED, body)


async def test_a_parse_failure_with_a_nul_is_recorded(store: Store) -> None:
    [result] = await store.ingest([delivery("k1")])
    assert result.delivery_id is not None
    failed = ParsedDelivery(failure=NUL)
    await store.record_parsed(result.delivery_id, failed, starting_agent=AGENT)
    [kept] = await store.list_quarantine()
    assert kept.reason == STORED
    assert await store.unparsed_deliveries() == []


@pytest.mark.parametrize(
    ("field", "item"),
    [
        ("InboxIn.chat_id", message("a\x00b", "k1")),
        ("InboxIn.dedup_key", message("a", "k\x001")),
        ("StatusIn.platform_message_id", StatusIn(CHANNEL, ACCOUNT, "w\x00", "read", None)),
    ],
)
async def test_a_nul_in_an_identifier_is_refused_naming_the_field(
    store: Store, field: str, item: object
) -> None:
    """Ids and names are refused alike on every backend (the intake quarantines the delivery);
    nothing of the delivery is written."""
    key = "inbox" if field.startswith("InboxIn") else "statuses"
    with pytest.raises(ValueError, match=f"{re.escape(field)} must not contain a NUL"):
        await store.record_parsed(None, ParsedDelivery(**{key: (item,)}), starting_agent=AGENT)
    assert await store.list_sessions() == []
    assert await store.pending_sessions() == []


async def test_a_nul_in_a_chat_id_is_refused_when_a_session_is_made(store: Store) -> None:
    with pytest.raises(ValueError, match="chat_id must not contain a NUL"):
        await store.create_session(CHANNEL, ACCOUNT, "a\x00b", AGENT)
    assert await store.list_sessions() == []


async def test_a_sends_platform_id_with_a_nul_is_recorded_and_the_row_is_sent(
    store: Store,
) -> None:
    """The platform answered a send already made: refused, the row would stay pending and the
    reply go out again."""
    item = await queued(store)
    await store.outbox_sent(item.id, [NUL])
    [row] = await store.list_outbox(SID)
    assert (row.state, row.platform_ids) == ("sent", (STORED,))


async def test_a_dedup_key_with_a_nul_is_claimed_once(store: Store) -> None:
    """A platform's message id: stored as the other outside texts, so its redelivery is still a
    duplicate (refused, the delivery could never be acknowledged)."""
    assert await store.claim([NUL]) == {STORED}
    assert await store.claim([NUL, STORED]) == set()
    [result] = await store.ingest([delivery(NUL)])
    assert result.new_keys == frozenset()  # claimed above: a duplicate
    [fresh] = await store.ingest([delivery("k\x002")])
    assert fresh.new_keys == frozenset({"k\ufffd2"})
    assert fresh.delivery_id is not None
