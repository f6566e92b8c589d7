"""A failed delivery status that asks for a retry (``StatusIn.resend_at``) puts the sent reply
back in the outbox from the part that failed, once, on every backend."""

from __future__ import annotations

import itertools
import math

import pytest

from webhook_bot_gateway.store import OutboxItem, ParsedDelivery, StatusIn, Store

from .pipeline import ACCOUNT, AGENT, CHANNEL, delivery, sid
from .test_outbox import queued

LATER = (2_000_000_001.0, 2_000_000_002.0, 2_000_000_003.0)  # after 1, 2, 3 tries


_deliveries = itertools.count()


async def statuses(store: Store, *items: StatusIn) -> None:
    """Record ``items`` through a delivery of their own, as the intake does."""
    [result] = await store.ingest([delivery(f"statuses-{next(_deliveries)}")])
    assert result.delivery_id is not None
    parsed = ParsedDelivery(statuses=items)
    await store.record_parsed(result.delivery_id, parsed, starting_agent=AGENT)


def failed(platform_id: str, resend_at: tuple[float, ...] = LATER) -> StatusIn:
    error = "131056: (Business Account, Consumer Account) pair rate limit hit"
    return StatusIn(CHANNEL, ACCOUNT, platform_id, "failed", error, resend_at)


async def row_of(store: Store, chat_id: str = "a") -> OutboxItem:
    [row] = await store.list_outbox(sid(chat_id))
    return row


async def status_events(store: Store) -> list[dict[str, object]]:
    return [e.detail for e in await store.list_events(sid("a")) if e.kind == "status"]


async def test_a_failed_status_to_retry_makes_the_sent_reply_pending_again(store: Store) -> None:
    [item] = await queued(store)
    await store.outbox_sent(item.id, ["w1"])
    await statuses(store, failed("w1"))
    row = await row_of(store)
    assert (row.state, row.attempts, row.next_attempt_at) == ("pending", 1, LATER[0])
    assert (row.platform_ids, row.payload["skip_parts"], row.delivery_state) == ((), 0, None)
    assert row.error == "131056: (Business Account, Consumer Account) pair rate limit hit"
    assert row.sent_at is None
    assert await store.due_outbox(LATER[0] - 1) == []
    assert [r.id for r in await store.due_outbox(LATER[0])] == [item.id]
    assert (await status_events(store))[-1] == {
        "outbox_id": item.id,
        "state": "failed",
        "error": row.error,
        "resend_at": LATER[0],
        "resend_part": 0,
    }


async def test_a_split_reply_goes_again_from_the_failed_part_and_only_once(store: Store) -> None:
    [item] = await queued(store)
    await store.outbox_sent(item.id, ["w1", "w2", "w3"])
    await statuses(store, failed("w2"), failed("w3"))  # the later part's failure: the same re-send
    await statuses(store, failed("w2"))  # delivered again (another delivery): nothing more
    row = await row_of(store)
    assert (row.state, row.platform_ids, row.payload["skip_parts"]) == ("pending", ("w1",), 1)
    assert len([d for d in await status_events(store) if "resend_at" in d]) == 1
    await statuses(store, StatusIn(CHANNEL, ACCOUNT, "w1", "delivered", None))  # kept part
    assert (await row_of(store)).delivery_state == "delivered"
    await store.outbox_sent(item.id, ["w1", "w2b", "w3b"])  # the sender's next try
    await statuses(store, failed("w3"))  # a late status of the superseded try: nothing
    row = await row_of(store)
    assert (row.state, row.attempts, row.platform_ids) == ("sent", 2, ("w1", "w2b", "w3b"))
    await statuses(store, failed("w3b"))  # the new try fails too: again, after 2 tries
    row = await row_of(store)
    assert (row.state, row.next_attempt_at, row.payload["skip_parts"]) == ("pending", LATER[1], 2)
    assert row.platform_ids == ("w1", "w2b")


async def test_a_reply_out_of_tries_or_failed_for_good_stays_sent_and_failed(store: Store) -> None:
    first, second = await queued(store, count=2)
    await store.outbox_sent(first.id, ["w1"])
    await store.outbox_sent(second.id, ["w2"])
    permanent = StatusIn(CHANNEL, ACCOUNT, "w2", "failed", "131026: Message undeliverable")
    await statuses(store, failed("w1", resend_at=()), permanent)
    rows = await store.list_outbox(sid("a"))
    assert [(r.state, r.delivery_state) for r in rows] == [("sent", "failed")] * 2
    [third] = await queued(store)
    await store.outbox_retry(third.id, next_attempt_at=0.0, error="429")
    await store.outbox_sent(third.id, ["w3"])  # its second try
    await statuses(store, failed("w3", resend_at=LATER[:1]))  # a time for one try only
    row = (await store.list_outbox(sid("a")))[-1]
    assert (row.state, row.delivery_state, row.attempts) == ("sent", "failed", 2)
    assert all("resend_at" not in d for d in await status_events(store))


async def test_a_pending_reply_is_not_re_queued_by_a_status(store: Store) -> None:
    [item] = await queued(store)
    await store.outbox_progress(item.id, skip_parts=1, platform_ids=["w1"])  # still sending
    await statuses(store, failed("w1"))
    row = await row_of(store)
    assert (row.state, row.payload["skip_parts"], row.platform_ids) == ("pending", 1, ("w1",))
    assert row.delivery_state == "failed"


@pytest.mark.parametrize(
    "status",
    [
        StatusIn(CHANNEL, ACCOUNT, "w1", "delivered", None, LATER),
        StatusIn(CHANNEL, ACCOUNT, "w1", "failed", None, (math.inf,)),
        StatusIn(CHANNEL, ACCOUNT, "w1", "failed", None, (True,)),
        StatusIn(CHANNEL, ACCOUNT, "w1", "failed", None, [1.0]),  # type: ignore[arg-type]
    ],
)
async def test_resend_at_is_checked(store: Store, status: StatusIn) -> None:
    [result] = await store.ingest([delivery("status-checked")])
    assert result.delivery_id is not None
    parsed = ParsedDelivery(statuses=(status,))
    with pytest.raises(ValueError, match="resend_at"):
        await store.record_parsed(result.delivery_id, parsed, starting_agent=AGENT)
