"""GroupCommitWriter on a real SQLite file: batching, order, errors to every waiter, flush."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from webhook_bot_gateway.gateway._pipeline._writer import GroupCommitWriter, WriterClosed
from webhook_bot_gateway.store import (
    Delivery,
    DeliveryIn,
    IngestResult,
    QuarantineIn,
    SQLiteStore,
    StoreError,
)

LONG = 30.0  # a window no test waits out: batches close because they are full or flushed


def delivery(*keys: str) -> DeliveryIn:
    return DeliveryIn("whatsapp", None, f"body {keys}".encode(), keys)


def count(path: Path, table: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    finally:
        conn.close()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "gateway.db"


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[SQLiteStore]:
    async with SQLiteStore(db_path) as opened:
        yield opened


class Wakes:
    def __init__(self) -> None:
        self.count = 0
        self.stored: list[Delivery] = []

    def __call__(self, stored: Sequence[Delivery]) -> None:
        self.count += 1
        self.stored += stored


async def started(store: SQLiteStore, *, window: float, max_batch: int) -> GroupCommitWriter:
    writer = GroupCommitWriter(store, window=window, max_batch=max_batch)
    writer.start()
    return writer


async def test_writer_commits_concurrent_submits_in_one_transaction(
    store: SQLiteStore, db_path: Path
) -> None:
    writer = await started(store, window=LONG, max_batch=20)
    try:
        results = await asyncio.gather(*(writer.submit(delivery(f"k{i}")) for i in range(20)))
    finally:
        await writer.aclose()
    assert writer.batches == 1
    assert all(r.delivery_id is not None for r in results)
    assert count(db_path, "deliveries") == 20


async def test_writer_without_a_window_still_shares_transactions(store: SQLiteStore) -> None:
    writer = await started(store, window=0, max_batch=256)
    try:
        await asyncio.gather(*(writer.submit(delivery(f"k{i}")) for i in range(50)))
    finally:
        await writer.aclose()
    assert writer.items == 50
    assert writer.batches < 50


async def test_writer_splits_batches_at_max_batch_without_waiting_the_window(
    store: SQLiteStore,
) -> None:
    writer = await started(store, window=LONG, max_batch=3)
    try:
        await asyncio.gather(*(writer.submit(delivery(f"k{i}")) for i in range(7)))
    finally:
        await writer.aclose()
    # 3 + 3 + 1: what queued while a commit ran goes next, with no wait for company
    assert (writer.batches, writer.items) == (3, 7)


async def test_writer_lets_a_lone_item_wait_for_company(store: SQLiteStore) -> None:
    writer = await started(store, window=LONG, max_batch=2)
    try:
        first = asyncio.ensure_future(writer.submit(delivery("alone")))
        await asyncio.sleep(0)  # the writer takes the lone item and waits for company
        second = await writer.submit(delivery("company"))
        assert (await first).delivery_id is not None
        assert second.delivery_id is not None
    finally:
        await writer.aclose()
    assert writer.batches == 1


async def test_writer_results_follow_submission_order(store: SQLiteStore) -> None:
    writer = await started(store, window=LONG, max_batch=4)
    try:
        first, second, third, fourth = await asyncio.gather(
            writer.submit(delivery("a", "b")),
            writer.submit(delivery("b", "c")),
            writer.submit(QuarantineIn("telegram", "support", b"??", "body is not JSON")),
            writer.submit(delivery("a", "c")),
        )
    finally:
        await writer.aclose()
    assert first.new_keys == {"a", "b"}
    assert second.new_keys == {"c"}
    assert third.quarantine_id is not None
    assert third.delivery_id is None
    assert fourth == IngestResult(delivery_id=None, new_keys=frozenset())
    assert first.delivery_id is not None
    assert second.delivery_id is not None
    assert first.delivery_id < second.delivery_id


async def test_writer_gives_a_store_error_to_every_waiter(store: SQLiteStore) -> None:
    writer = await started(store, window=0, max_batch=3)
    try:
        await store.aclose()  # a real failure underneath the writer
        outcomes = await asyncio.gather(
            *(writer.submit(delivery(f"k{i}")) for i in range(3)), return_exceptions=True
        )
        assert all(isinstance(o, Exception) for o in outcomes)
        assert len({type(o) for o in outcomes}) == 1
        again = await asyncio.gather(writer.submit(delivery("later")), return_exceptions=True)
        assert not isinstance(again[0], WriterClosed)  # the writer survived the failure
    finally:
        await writer.aclose()


async def test_writer_gives_an_item_the_store_refuses_its_own_error_only(
    store: SQLiteStore, db_path: Path
) -> None:
    """Refused input (here a dedup key that is empty) fails its own submit with the store's
    ValueError; the items that shared its commit are committed one by one, as before."""
    writer = await started(store, window=LONG, max_batch=3)
    try:
        outcomes = await asyncio.gather(
            writer.submit(delivery("k1")),
            writer.submit(delivery("")),
            writer.submit(delivery("k3")),
            return_exceptions=True,
        )
    finally:
        await writer.aclose()
    first, refused, third = outcomes
    assert isinstance(refused, ValueError)
    assert "DeliveryIn.keys" in str(refused)
    assert isinstance(first, IngestResult)
    assert isinstance(third, IngestResult)
    assert (first.new_keys, third.new_keys) == ({"k1"}, {"k3"})
    assert count(db_path, "deliveries") == 2


async def test_writer_flushes_queued_items_on_close(store: SQLiteStore, db_path: Path) -> None:
    writer = await started(store, window=LONG, max_batch=100)
    waiting = [asyncio.ensure_future(writer.submit(delivery(f"k{i}"))) for i in range(5)]
    await asyncio.sleep(0)  # let the submits queue; the writer now waits for company
    await writer.aclose()
    results = [await task for task in waiting]
    assert all(r.delivery_id is not None for r in results)
    assert count(db_path, "deliveries") == 5
    with pytest.raises(WriterClosed):
        await writer.submit(delivery("late"))


async def test_writer_wakes_the_intake_only_for_new_deliveries(store: SQLiteStore) -> None:
    wakes = Wakes()
    writer = GroupCommitWriter(store, window=0, max_batch=10, on_delivery=wakes)
    writer.start()
    try:
        await writer.submit(QuarantineIn("whatsapp", None, b"x", "not JSON"))
        assert wakes.count == 0
        await writer.submit(delivery("k"))
        assert wakes.count == 1
        await writer.submit(delivery("k"))  # a duplicate stores nothing
        assert wakes.count == 1
    finally:
        await writer.aclose()
    # What was handed over is what the intake would read back.
    [handed] = wakes.stored
    [read] = await store.unparsed_deliveries()
    assert (handed.id, handed.channel, handed.account, handed.body, handed.keys) == (
        read.id,
        read.channel,
        read.account,
        read.body,
        read.keys,
    )


async def test_writer_refuses_submits_before_start(store: SQLiteStore) -> None:
    writer = GroupCommitWriter(store, window=0, max_batch=10)
    with pytest.raises(WriterClosed):
        await writer.submit(delivery("k"))


async def test_writer_names_why_the_store_failed_in_its_warning(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """ "ingest of 3 item(s) failed: StoreUnavailable" said nothing of why (a read-only server
    after a failover, a full disk): the store's own words are in the line now."""

    async def unavailable(items: Any) -> Any:
        raise StoreError("the database is read-only now (SQLSTATE 25006)")

    monkeypatch.setattr(store, "ingest", unavailable)
    writer = await started(store, window=0, max_batch=3)
    try:
        with caplog.at_level(logging.WARNING, logger="gateway.writer"):
            await asyncio.gather(
                *(writer.submit(delivery(f"k{i}")) for i in range(3)), return_exceptions=True
            )
    finally:
        await writer.aclose()
    assert any(
        "failed: StoreError: the database is read-only now (SQLSTATE 25006)" in message
        for message in caplog.messages
    )
