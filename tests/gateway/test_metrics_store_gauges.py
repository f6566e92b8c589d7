"""The gauges /metrics reads from the store: their values, the cache, and a slow or closed store.

On a real SQLite file; the store is made slow by holding its one connection's thread.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from webhook_bot_gateway.gateway._metrics import STORE_ERRORS, Metrics
from webhook_bot_gateway.gateway._store_gauges import INBOX_ROWS, OUTBOX_ROWS, SESSIONS, StoreGauges
from webhook_bot_gateway.store import OutboxIn, SQLiteStore

from .pipeline_helpers import FakeClock, add_inbox, inbound

TTL = 5.0


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    opened = await SQLiteStore.open(tmp_path / "gateway.db")
    yield opened
    await opened.aclose()


def gauges_of(store: SQLiteStore, clock: FakeClock, timeout: float = 5.0) -> StoreGauges:
    return StoreGauges(
        store, Metrics(), ["telegram", "whatsapp"], clock=clock, ttl=TTL, timeout=timeout
    )


def values(gauges: StoreGauges) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in gauges.collect()
        for sample in family.samples
    }


def pending(gauges: StoreGauges) -> float:
    return values(gauges)[(INBOX_ROWS, (("state", "pending"),))]


async def test_gauges_show_every_label_set_and_the_stores_counts(store: SQLiteStore) -> None:
    await add_inbox(store, inbound("a", n=1), inbound("b", n=2, chat_id="43"))
    session = "telegram-support-42"
    await store.enqueue_outbox(OutboxIn(session, "telegram", "support", "42", {"text": "hi"}))
    gauges = gauges_of(store, FakeClock())
    await gauges.refresh()
    assert values(gauges) == {
        (INBOX_ROWS, (("state", "pending"),)): 2,
        (INBOX_ROWS, (("state", "dead"),)): 0,
        (OUTBOX_ROWS, (("channel", "telegram"), ("state", "dead"))): 0,
        (OUTBOX_ROWS, (("channel", "telegram"), ("state", "pending"))): 1,
        (OUTBOX_ROWS, (("channel", "whatsapp"), ("state", "dead"))): 0,
        (OUTBOX_ROWS, (("channel", "whatsapp"), ("state", "pending"))): 0,
        (SESSIONS, (("status", "running"),)): 0,
        (SESSIONS, (("status", "interrupted"),)): 0,
    }


async def test_the_counts_are_read_again_only_after_the_ttl(store: SQLiteStore) -> None:
    clock = FakeClock()
    gauges = gauges_of(store, clock)
    await gauges.refresh()
    await add_inbox(store, inbound("a", n=1))
    await gauges.refresh()
    assert pending(gauges) == 0  # cached: a scrape within the TTL costs no read
    clock.now += TTL
    await gauges.refresh()
    assert pending(gauges) == 1


async def test_a_closed_store_leaves_the_last_values_and_counts_an_error(
    tmp_path: Path,
) -> None:
    store = await SQLiteStore.open(tmp_path / "gateway.db")
    await add_inbox(store, inbound("a", n=1))
    clock, metrics = FakeClock(), Metrics()
    gauges = StoreGauges(store, metrics, ["telegram"], clock=clock, ttl=TTL)
    await gauges.refresh()
    await store.aclose()
    clock.now += TTL
    await gauges.refresh()
    assert pending(gauges) == 1
    assert metrics.value(STORE_ERRORS, component="metrics") == 1


async def test_a_slow_store_does_not_hold_the_scrape(store: SQLiteStore) -> None:
    """While the store's thread is busy the scrape answers with the last values; the read it
    started finishes later and serves the next scrape."""
    clock, metrics = FakeClock(), Metrics()
    gauges = StoreGauges(store, metrics, ["telegram"], clock=clock, ttl=TTL, timeout=0.05)
    await gauges.refresh()
    await add_inbox(store, inbound("a", n=1))
    busy, release = threading.Event(), threading.Event()

    def hold(conn: sqlite3.Connection) -> None:
        busy.set()
        release.wait(30)

    holding = asyncio.create_task(store._db.call(hold))
    await asyncio.to_thread(busy.wait, 30)
    clock.now += TTL
    await gauges.refresh()  # returns while the store is still held
    assert pending(gauges) == 0
    assert metrics.value(STORE_ERRORS, component="metrics") == 1
    release.set()
    await holding
    await gauges.refresh()  # joins the read already under way
    assert pending(gauges) == 1
