"""The background purge: expired dedup keys and finished pipeline rows go, the rest stays."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gateway._purge import Purger
from store import OutboxIn, SQLiteStore

from .pipeline_helpers import FakeClock, add_inbox, inbound, rows

HOUR = 3600.0


async def test_purger_deletes_expired_keys_and_old_finished_rows_only(tmp_path: Path) -> None:
    db = tmp_path / "gateway.db"
    clock = FakeClock()
    async with SQLiteStore(db, dedup_ttl_hours=1, clock=clock) as store:
        await store.claim(["old-key"])
        [sid] = await add_inbox(store, inbound("hi", n=1))
        [row] = await store.pending_inbox(sid)
        async with store.turn(sid) as turn:
            turn.complete_inbox([row.id])
        item = await store.enqueue_outbox(OutboxIn(sid, "telegram", "support", "42", {"t": 1}))
        await store.outbox_sent(item.id, ["1"])
        pending = await store.enqueue_outbox(OutboxIn(sid, "telegram", "support", "42", {"t": 2}))
        clock.now += 2 * HOUR
        await store.claim(["new-key"])
        purger = Purger(store, interval=HOUR, keep_seconds=HOUR)
        assert await purger.purge_once() == (1, 2)
        assert await purger.purge_once() == (0, 0)
    assert rows(db, "SELECT key FROM processed_messages") == [("new-key",)]
    assert rows(db, "SELECT count(*) FROM inbox") == [(0,)]
    assert rows(db, "SELECT id FROM outbox") == [(pending.id,)]  # unsent rows are never purged


async def test_purger_run_purges_at_once_and_stops_when_told(tmp_path: Path) -> None:
    db = tmp_path / "gateway.db"
    clock = FakeClock()
    async with SQLiteStore(db, dedup_ttl_hours=1, clock=clock) as store:
        await store.claim(["old-key"])
        clock.now += 2 * HOUR
        purger = Purger(store, interval=HOUR, keep_seconds=HOUR)
        task = asyncio.create_task(purger.run())
        try:
            for _ in range(500):  # bounded: the first purge runs at once, not after an hour
                if rows(db, "SELECT count(*) FROM processed_messages") == [(0,)]:
                    break
                await asyncio.sleep(0.01)
            assert rows(db, "SELECT count(*) FROM processed_messages") == [(0,)]
        finally:
            purger.stop()
            await asyncio.wait_for(task, 5)  # stop() ends the hour's wait at once
