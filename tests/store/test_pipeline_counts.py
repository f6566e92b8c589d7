"""pipeline_counts: the rows behind the /metrics gauges, on both backends."""

from __future__ import annotations

from webhook_bot_gateway.store import OutboxIn, PipelineCounts, Store

from .conftest import FakeClock, Raw
from .pipeline import ACCOUNT, CHANNEL, inbox_of, message, sid


async def test_pipeline_counts_of_an_empty_store_are_empty(store: Store) -> None:
    assert await store.pipeline_counts() == PipelineCounts()


async def test_pipeline_counts_count_pending_and_dead_rows_and_busy_sessions(
    store: Store, clock: FakeClock
) -> None:
    ids = await inbox_of(store, message("a", "a1"), message("a", "a2"), message("b", "b1"))
    await store.fail_inbox(ids[2:], "boom", next_attempt_at=clock(), dead=True)
    replies = [OutboxIn(sid("a"), CHANNEL, ACCOUNT, "a", {"text": f"r{n}"}) for n in range(3)]
    outbox = [await store.enqueue_outbox(reply) for reply in replies]
    await store.outbox_failed(outbox[0].id, error="gone", state="dead")
    await store.outbox_sent(outbox[1].id, ["p1"])
    async with store.turn(sid("b")):
        during = await store.pipeline_counts()
    after = await store.pipeline_counts()

    assert during.inbox == {"pending": 2, "dead": 1}
    assert during.outbox == {(CHANNEL, "pending"): 1, (CHANNEL, "dead"): 1}
    assert during.sessions == {"running": 1}  # idle sessions are not counted
    assert after.sessions == {}  # the turn ended: its session is idle again


async def test_pipeline_counts_see_interrupted_sessions(store: Store, raw: Raw) -> None:
    await inbox_of(store, message("a", "a1"), message("b", "b1"))
    await raw.execute("UPDATE sessions SET status = 'interrupted' WHERE session_id = ?", sid("a"))
    assert (await store.pipeline_counts()).sessions == {"interrupted": 1}
