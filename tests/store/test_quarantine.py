"""Quarantine: authenticated deliveries that could not be parsed, kept whole for a replay."""

from __future__ import annotations

import pytest

from webhook_bot_gateway.store import ParsedDelivery, QuarantineIn, QuarantineNotFound, Store

from .conftest import FakeClock
from .pipeline import AGENT, CHANNEL, delivery, message, sid


async def quarantine(store: Store, *bodies: bytes) -> list[int]:
    results = await store.ingest([QuarantineIn(CHANNEL, None, body, "not JSON") for body in bodies])
    ids = [r.quarantine_id for r in results]
    assert None not in ids
    return [i for i in ids if i is not None]


async def test_list_quarantine_newest_first_with_pages(store: Store) -> None:
    ids = await quarantine(store, b"one", b"two", b"three")
    found = await store.list_quarantine()
    assert [q.id for q in found] == list(reversed(ids))
    assert [q.body for q in found] == [b"three", b"two", b"one"]
    assert [q.id for q in await store.list_quarantine(limit=1, offset=1)] == [ids[1]]


async def test_list_quarantine_pending_only_leaves_out_replayed_rows(store: Store) -> None:
    first, second, third = await quarantine(store, b"one", b"two", b"three")
    await store.mark_replayed(second)
    pending = await store.list_quarantine(pending_only=True)
    assert [q.id for q in pending] == [third, first]
    assert [q.id for q in await store.list_quarantine(1, 1, pending_only=True)] == [first]
    assert [q.id for q in await store.list_quarantine()] == [third, second, first]


async def test_get_quarantine_returns_the_whole_row(store: Store, clock: FakeClock) -> None:
    body = bytes(range(256)) * 40  # any bytes survive, not only text
    [qid] = await quarantine(store, body)
    item = await store.get_quarantine(qid)
    assert item is not None
    assert (item.id, item.channel, item.account, item.body, item.reason) == (
        qid,
        CHANNEL,
        None,
        body,
        "not JSON",
    )
    assert item.received_at.timestamp() == clock.now
    assert item.replayed_at is None
    assert await store.get_quarantine(qid + 1) is None


async def test_mark_replayed_sets_the_time(store: Store, clock: FakeClock) -> None:
    [qid] = await quarantine(store, b"x")
    clock.advance(60)
    await store.mark_replayed(qid)
    item = await store.get_quarantine(qid)
    assert item is not None
    assert item.replayed_at is not None
    assert item.replayed_at.timestamp() == clock.now


async def test_mark_replayed_unknown_row_raises(store: Store) -> None:
    with pytest.raises(QuarantineNotFound, match="42") as caught:
        await store.mark_replayed(42)
    assert caught.value.quarantine_id == 42
    assert caught.value.code == "unknown_quarantine"


async def test_replay_records_the_parsed_events(store: Store) -> None:
    [result] = await store.ingest([delivery("k1", body=b"half broken")])
    assert result.delivery_id is not None
    parsed = ParsedDelivery(inbox=(message("a", "k1"),), failure="part 2: unknown type")
    await store.record_parsed(result.delivery_id, parsed, starting_agent=AGENT)
    [item] = await store.list_quarantine()
    # after an upgrade the parser accepts part 2 as well: the replay adds only what is new
    replayed = ParsedDelivery(inbox=(message("a", "k1"), message("a", "k2")))
    assert await store.record_parsed(None, replayed, starting_agent=AGENT) == [sid("a")]
    await store.mark_replayed(item.id)
    assert [r.dedup_key for r in await store.pending_inbox(sid("a"))] == ["k1", "k2"]


async def test_delete_quarantine_erases_that_row_only(store: Store) -> None:
    first, second = await quarantine(store, b"one", b"two")
    assert await store.delete_quarantine(first)
    assert await store.get_quarantine(first) is None
    assert [q.id for q in await store.list_quarantine()] == [second]
    assert not await store.delete_quarantine(first)  # gone: nothing more to erase


async def test_delete_chat_quarantine_erases_the_bodies_naming_the_chat_of_any_account(
    store: Store,
) -> None:
    """A chat with no session: the bodies are found by its id, as erasing its session would."""
    chat = "4915550001234"
    named = [f'{{"from": "{chat}", "n": {n}}}'.encode() for n in range(2)]
    await store.ingest(
        [
            QuarantineIn(CHANNEL, None, named[0], "bad"),
            QuarantineIn(CHANNEL, "another-account", named[1], "bad"),
            QuarantineIn(CHANNEL, None, f'{{"from": "{chat}5"}}'.encode(), "bad"),  # longer id
            QuarantineIn("telegram", None, named[0], "bad"),  # another channel's chat
        ]
    )
    assert await store.delete_chat_quarantine(CHANNEL, chat) == 2
    left = await store.list_quarantine()
    assert [(q.channel, q.body) for q in left] == [
        ("telegram", named[0]),
        (CHANNEL, f'{{"from": "{chat}5"}}'.encode()),
    ]
    assert await store.delete_chat_quarantine(CHANNEL, chat) == 0


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda s: s.list_quarantine(0), "limit"),
        (lambda s: s.list_quarantine(1001), "limit"),
        (lambda s: s.list_quarantine(1, -1), "offset"),
        (lambda s: s.list_quarantine(pending_only="yes"), "pending_only"),
        (lambda s: s.get_quarantine(0), "quarantine_id"),
        (lambda s: s.get_quarantine("1"), "quarantine_id"),
        (lambda s: s.mark_replayed(-3), "quarantine_id"),
        (lambda s: s.delete_quarantine(0), "quarantine_id"),
        (lambda s: s.delete_quarantine("1"), "quarantine_id"),
        (lambda s: s.delete_chat_quarantine("", "42"), "channel"),
        (lambda s: s.delete_chat_quarantine(CHANNEL, ""), "chat_id"),
        (lambda s: s.delete_chat_quarantine(CHANNEL, "4\x002"), "chat_id"),
    ],
)
async def test_quarantine_calls_reject_bad_arguments(
    store: Store, call: object, field: str
) -> None:
    with pytest.raises(ValueError, match=field):
        await call(store)  # type: ignore[operator]
