"""Ingest: a batch of deliveries and quarantine items in one transaction, dedup by key."""

from __future__ import annotations

import asyncio

import pytest

from webhook_bot_gateway.store import DeliveryIn, IngestResult, QuarantineIn, SQLiteStore, Store

from .conftest import SHARED, Backend, FakeClock, Raw
from .pipeline import CHANNEL, PIPELINE_TABLES, delivery, statements_of

HOUR = 3600.0


async def test_ingest_mixed_batch_results_in_input_order(store: Store, raw: Raw) -> None:
    await store.claim(["seen-1", "seen-2"])
    batch: list[DeliveryIn | QuarantineIn] = [
        delivery("new-1", "new-2", body=b"first"),
        delivery("seen-1", body=b"duplicate"),
        delivery("seen-2", "new-3", body=b"partial"),
        QuarantineIn("telegram", "support", b"not json", "body is not JSON"),
        delivery("new-4", body=b"last", account="support"),
    ]
    results = await store.ingest(batch)
    assert [r.new_keys for r in results] == [
        {"new-1", "new-2"},
        frozenset(),
        {"new-3"},
        frozenset(),
        {"new-4"},
    ]
    assert results[1] == IngestResult(None, frozenset())
    assert results[3].delivery_id is None
    assert results[3].quarantine_id is not None
    ids = [r.delivery_id for r in results if r.delivery_id is not None]
    assert ids == sorted(ids)
    assert len(set(ids)) == 3
    rows = await raw.rows("SELECT id, channel, account, body, keys FROM deliveries ORDER BY id")
    assert [(r[0], r[2], r[3]) for r in rows] == [
        (ids[0], None, b"first"),
        (ids[1], None, b"partial"),
        (ids[2], "support", b"last"),
    ]
    assert rows[1][4] == '["new-3"]'
    quarantined = await raw.rows("SELECT id, channel, account, body, reason FROM quarantine")
    assert quarantined == [
        (results[3].quarantine_id, "telegram", "support", b"not json", "body is not JSON")
    ]


async def test_ingest_runs_the_batch_in_one_transaction(file_store: SQLiteStore) -> None:
    """SQLite backend: the statements traced on its connection (for every backend, the batch
    is one transaction: see test_ingest_failure_writes_nothing_and_claims_nothing)."""
    batch = [delivery(f"k{i}") for i in range(20)] + [QuarantineIn(CHANNEL, None, b"x", "bad")]
    statements = await statements_of(file_store, lambda: file_store.ingest(batch))
    assert statements.count("BEGIN IMMEDIATE") == 1
    assert statements.count("COMMIT") == 1


async def test_ingest_statement_count_does_not_grow_with_the_batch(
    file_store: SQLiteStore,
) -> None:
    """SQLite backend: the statements traced on its connection."""
    small = await statements_of(file_store, lambda: file_store.ingest([delivery("a")]))
    batch = [delivery(f"b{i}", f"c{i}") for i in range(200)]
    big = await statements_of(file_store, lambda: file_store.ingest(batch))
    # executemany is traced once per row; what matters is that nothing else is per row.
    assert len([s for s in big if not s.startswith("INSERT INTO deliveries")]) == len(
        [s for s in small if not s.startswith("INSERT INTO deliveries")]
    )


async def test_ingest_failure_writes_nothing_and_claims_nothing(store: Store, raw: Raw) -> None:
    await raw.fail_inserts("quarantine")
    before = await raw.dump(*PIPELINE_TABLES, "processed_messages")
    bad = QuarantineIn(CHANNEL, None, b"x", "bad")
    batch: list[DeliveryIn | QuarantineIn] = [delivery("k1"), bad, delivery("k2")]
    with pytest.raises(raw.injected_error, match="injected failure"):
        await store.ingest(batch)
    assert await raw.dump(*PIPELINE_TABLES, "processed_messages") == before
    assert await store.claim(["k1", "k2"]) == {"k1", "k2"}


async def test_ingest_key_repeated_in_a_batch_goes_to_the_first_item(
    store: Store,
) -> None:
    results = await store.ingest(
        [delivery("a", "b"), delivery("b"), delivery("b", "c"), delivery("a", "a")]
    )
    assert [r.new_keys for r in results] == [{"a", "b"}, frozenset(), {"c"}, frozenset()]
    assert [r.delivery_id is None for r in results] == [False, True, False, True]
    assert [d.keys for d in await store.unparsed_deliveries()] == [{"a", "b"}, {"c"}]


async def test_ingest_then_claim_sees_the_keys(store: Store) -> None:
    await store.ingest([delivery("a")])
    assert await store.claim(["a", "b"]) == {"b"}
    assert [r.new_keys for r in await store.ingest([delivery("a", "b")])] == [frozenset()]


async def test_ingest_50_concurrent_same_delivery_one_row(store: Store, raw: Raw) -> None:
    results = await asyncio.gather(*(store.ingest([delivery("k1", "k2")]) for _ in range(50)))
    winners = [batch[0] for batch in results if batch[0].delivery_id is not None]
    assert len(winners) == 1
    assert winners[0].new_keys == {"k1", "k2"}
    assert await raw.count("deliveries") == 1


@SHARED
async def test_ingest_concurrent_across_two_stores_one_row(
    store: Store, backend: Backend, raw: Raw
) -> None:
    async with backend.store() as other:
        calls = [(store if i % 2 else other).ingest([delivery("k")]) for i in range(20)]
        results = await asyncio.gather(*calls)
    assert sum(batch[0].delivery_id is not None for batch in results) == 1
    assert await raw.count("deliveries") == 1


async def test_ingest_key_expired_by_ttl_is_new_again(store: Store, clock: FakeClock) -> None:
    [first] = await store.ingest([delivery("k")])
    clock.advance(192 * HOUR)
    [again] = await store.ingest([delivery("k")])
    clock.advance(1)
    [expired] = await store.ingest([delivery("k")])
    assert first.delivery_id is not None
    assert again.delivery_id is None
    assert expired.delivery_id is not None
    assert expired.new_keys == {"k"}


async def test_ingest_empty_batch_does_not_touch_the_database(backend: Backend) -> None:
    store = backend.store()  # never opened: any DB access would raise
    assert await store.ingest([]) == []


async def test_unparsed_deliveries_oldest_first_with_limit(store: Store, clock: FakeClock) -> None:
    for i in range(3):
        await store.ingest([delivery(f"k{i}", body=f"body {i}".encode())])
        clock.advance(1)
    found = await store.unparsed_deliveries()
    assert [d.body for d in found] == [b"body 0", b"body 1", b"body 2"]
    assert [d.received_at.timestamp() for d in found] == [
        clock.now - 3,
        clock.now - 2,
        clock.now - 1,
    ]
    assert [d.id for d in await store.unparsed_deliveries(limit=2)] == [found[0].id, found[1].id]
    assert found[0].channel == CHANNEL
    assert found[0].account is None


@pytest.mark.parametrize(
    ("item", "field"),
    [
        (DeliveryIn(CHANNEL, None, b"x", ()), "DeliveryIn.keys"),
        (DeliveryIn(CHANNEL, None, b"x", ["k"]), "DeliveryIn.keys"),  # type: ignore[arg-type]
        (DeliveryIn(CHANNEL, None, b"x", ("k", "")), "DeliveryIn.keys"),
        (DeliveryIn(CHANNEL, None, "x", ("k",)), "DeliveryIn.body"),  # type: ignore[arg-type]
        (DeliveryIn("", None, b"x", ("k",)), "DeliveryIn.channel"),
        (DeliveryIn(CHANNEL, "", b"x", ("k",)), "DeliveryIn.account"),
        (QuarantineIn(CHANNEL, None, b"x", ""), "QuarantineIn.reason"),
        (QuarantineIn(CHANNEL, None, None, "r"), "QuarantineIn.body"),  # type: ignore[arg-type]
        ("k", "DeliveryIn and QuarantineIn"),
    ],
)
async def test_ingest_rejects_bad_items_and_writes_nothing(
    store: Store, raw: Raw, item: object, field: str
) -> None:
    with pytest.raises(ValueError, match=field):
        await store.ingest([delivery("ok"), item])  # type: ignore[list-item]
    assert await raw.count("deliveries") == await raw.count("processed_messages") == 0


async def test_unparsed_deliveries_rejects_bad_limit(store: Store) -> None:
    with pytest.raises(ValueError, match="limit"):
        await store.unparsed_deliveries(limit=0)
