"""The dedup guard: claim atomically once per TTL; purge expired rows in chunks."""

from __future__ import annotations

import asyncio
import logging

import pytest

from webhook_bot_gateway.store import Store

from .conftest import SHARED, Backend, FakeClock, Raw

HOUR = 3600.0


async def test_claim_returns_only_new_keys(store: Store) -> None:
    assert await store.claim(["a", "b"]) == {"a", "b"}
    assert await store.claim(["b", "c"]) == {"c"}
    assert await store.claim(["a", "b", "c"]) == set()


async def test_claim_counts_duplicates_within_a_call_once(store: Store) -> None:
    assert await store.claim(["a", "a", "b", "a"]) == {"a", "b"}
    assert await store.claim(iter(["b", "b"])) == set()


async def test_claim_empty_input_returns_empty_set(store: Store) -> None:
    assert await store.claim([]) == set()


async def test_claim_empty_input_does_not_touch_the_database(backend: Backend) -> None:
    store = backend.store()  # never opened: any DB access would raise
    assert await store.claim([]) == set()


async def test_claim_rejects_bad_keys(store: Store) -> None:
    with pytest.raises(ValueError):
        await store.claim("abc")
    with pytest.raises(ValueError):
        await store.claim(["ok", ""])
    with pytest.raises(ValueError):
        await store.claim(["ok", 5])  # type: ignore[list-item]
    assert await store.claim(["ok"]) == {"ok"}  # nothing of a refused call was recorded


async def test_claim_large_batch_spans_statements(store: Store) -> None:
    keys = [f"k{i}" for i in range(2500)]
    assert await store.claim(keys) == set(keys)
    assert await store.claim([*keys, "new"]) == {"new"}


async def test_claim_race_50_concurrent_one_winner(store: Store) -> None:
    results = await asyncio.gather(*(store.claim(["k"]) for _ in range(50)))
    assert sum(r == {"k"} for r in results) == 1
    assert sum(r == set() for r in results) == 49


@SHARED
async def test_claim_race_across_two_stores_one_winner(store: Store, backend: Backend) -> None:
    async with backend.store() as other:
        a, b = store, other
        for round_ in range(5):
            key = f"k{round_}"
            claims = [(a if i % 2 else b).claim([key, f"{key}-{i}"]) for i in range(50)]
            results = await asyncio.gather(*claims)
            assert sum(key in r for r in results) == 1
            assert all(f"{key}-{i}" in r for i, r in enumerate(results))


async def test_claim_expired_key_can_be_claimed_again(store: Store, clock: FakeClock) -> None:
    assert await store.claim(["k"]) == {"k"}
    clock.advance(192 * HOUR)
    assert await store.claim(["k"]) == set()  # exactly at the TTL: still remembered
    clock.advance(1)
    assert await store.claim(["k"]) == {"k"}
    assert await store.claim(["k"]) == set()  # the new claim starts a new TTL


async def test_claim_ttl_follows_setting(backend: Backend, clock: FakeClock) -> None:
    async with backend.store(dedup_ttl_hours=1) as store:
        assert await store.claim(["k"]) == {"k"}
        clock.advance(HOUR + 1)
        assert await store.claim(["k"]) == {"k"}


@pytest.mark.parametrize("hours", [0, -1, "192", True])
def test_store_rejects_bad_ttl(backend: Backend, hours: object) -> None:
    with pytest.raises(ValueError, match="dedup_ttl_hours"):
        backend.store(dedup_ttl_hours=hours)


async def test_purge_deletes_only_expired_rows_in_chunks(
    store: Store, clock: FakeClock, raw: Raw, caplog: pytest.LogCaptureFixture
) -> None:
    await store.claim([f"old{i}" for i in range(25)])
    clock.advance(100 * HOUR)
    await store.claim([f"new{i}" for i in range(5)])
    clock.advance(93 * HOUR)  # old: 193 h, expired; new: 93 h, live
    with caplog.at_level(logging.DEBUG, logger="store"):
        assert await store.purge(chunk_size=10) == 25
    chunks = [r.getMessage() for r in caplog.records if "purged" in r.getMessage()]
    assert chunks == [f"purged {n} expired dedup rows in one transaction" for n in (10, 10, 5)]
    keys = {row[0] for row in await raw.rows("SELECT key FROM processed_messages")}
    assert keys == {f"new{i}" for i in range(5)}
    assert await store.purge() == 0


async def test_purge_then_claim_again(store: Store, clock: FakeClock) -> None:
    await store.claim(["k"])
    clock.advance(200 * HOUR)
    assert await store.purge() == 1
    assert await store.claim(["k"]) == {"k"}


async def test_purge_rejects_bad_chunk_size(store: Store) -> None:
    with pytest.raises(ValueError, match="chunk_size"):
        await store.purge(chunk_size=0)
