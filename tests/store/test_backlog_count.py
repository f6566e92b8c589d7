"""backlog_count: stored deliveries not yet parsed plus pending inbox rows, nothing else."""

from __future__ import annotations

from webhook_bot_gateway.store import ParsedDelivery, QuarantineIn, Store

from .conftest import FakeClock
from .pipeline import AGENT, CHANNEL, delivery, inbox_of, message


async def test_backlog_count_of_an_empty_store_is_zero(store: Store) -> None:
    assert await store.backlog_count() == 0


async def test_backlog_count_adds_stored_deliveries_and_pending_inbox_rows(
    store: Store, clock: FakeClock
) -> None:
    await store.ingest([delivery("d1"), delivery("d2")])
    assert await store.backlog_count() == 2  # not parsed yet
    ids = await inbox_of(store, message("a", "a1"), message("a", "a2"), message("b", "b1"))
    assert await store.backlog_count() == 2 + 3  # the parsed delivery left, its rows came
    async with store.turn("whatsapp-15550001-a") as turn:
        turn.complete_inbox(ids[:1])
    assert await store.backlog_count() == 2 + 2  # done rows are answered
    await store.fail_inbox(ids[1:2], "boom", next_attempt_at=clock() + 60, dead=False)
    assert await store.backlog_count() == 2 + 2  # a row in backoff still waits for its answer
    await store.fail_inbox(ids[1:2], "boom", next_attempt_at=clock(), dead=True)
    assert await store.backlog_count() == 2 + 1  # a dead row waits for nobody


async def test_backlog_count_leaves_out_quarantine_and_duplicates(store: Store) -> None:
    quarantined = QuarantineIn(CHANNEL, None, b"not json", "not JSON")
    await store.ingest([delivery("k1"), delivery("k1"), quarantined])
    assert await store.backlog_count() == 1
    [found] = await store.unparsed_deliveries()
    await store.record_parsed(found.id, ParsedDelivery(), starting_agent=AGENT)
    assert await store.backlog_count() == 0  # parsed into nothing: nothing waits
