"""record_parsed: one transaction turns a stored delivery into inbox rows, statuses and more."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from webhook_bot_gateway.store import (
    LAST_USER_MESSAGE_AT,
    DeliveryNotFound,
    InboxIn,
    MembershipIn,
    OlderDeliveries,
    ParsedDelivery,
    StatusIn,
    Store,
)

from .conftest import FakeClock, Raw
from .pipeline import ACCOUNT, AGENT, CHANNEL, PIPELINE_TABLES, delivery, message, sid


async def stored(store: Store, *keys: str, body: bytes = b"{}") -> int:
    [result] = await store.ingest([delivery(*keys, body=body)])
    assert result.delivery_id is not None
    return result.delivery_id


async def test_record_parsed_creates_sessions_with_the_starting_agent(
    store: Store,
) -> None:
    await store.create_session(CHANNEL, ACCOUNT, "old", "billing")
    delivery_id = await stored(store, "k1", "k2", "k3")
    parsed = ParsedDelivery(
        inbox=(message("new", "k1"), message("old", "k2"), message("new", "k3"))
    )
    sessions = await store.record_parsed(delivery_id, parsed, starting_agent=AGENT)
    assert sessions == [sid("new"), sid("old")]
    new = await store.get_session(sid("new"))
    assert new is not None
    assert new.active_agent == AGENT
    assert new.chat_id == "new"
    old = await store.get_session(sid("old"))
    assert old is not None
    assert old.active_agent == "billing"


async def test_record_parsed_keeps_the_original_chat_id(store: Store) -> None:
    delivery_id = await stored(store, "k")
    item = InboxIn(CHANNEL, ACCOUNT, "US.1349", "k", {"text": "hi"})
    assert await store.record_parsed(
        delivery_id, ParsedDelivery(inbox=(item,)), starting_agent=AGENT
    ) == [sid("US_1349")]
    session = await store.get_session(sid("US_1349"))
    assert session is not None
    assert session.chat_id == "US.1349"


async def test_record_parsed_inserts_inbox_rows_once(store: Store, clock: FakeClock) -> None:
    first = await stored(store, "k1")
    parsed = ParsedDelivery(inbox=(message("a", "k1", "hello"),))
    assert await store.record_parsed(first, parsed, starting_agent=AGENT) == [sid("a")]
    [row] = await store.pending_inbox(sid("a"))
    assert (row.dedup_key, row.event, row.state, row.attempts, row.error) == (
        "k1",
        {"text": "hello", "chat_id": "a"},
        "pending",
        0,
        None,
    )
    assert row.next_attempt_at == clock.now
    assert row.created_at.timestamp() == clock.now
    second = await stored(store, "other-key")  # e.g. the same event after the dedup TTL
    assert await store.record_parsed(second, parsed, starting_agent=AGENT) == []
    assert await store.pending_inbox(sid("a")) == [row]


async def test_record_parsed_deletes_the_delivery(store: Store, raw: Raw) -> None:
    delivery_id = await stored(store, "k1")
    await store.record_parsed(delivery_id, ParsedDelivery(), starting_agent=AGENT)
    assert await raw.count("deliveries") == 0
    assert await store.unparsed_deliveries() == []
    with pytest.raises(DeliveryNotFound, match=str(delivery_id)) as caught:
        await store.record_parsed(delivery_id, ParsedDelivery(), starting_agent=AGENT)
    assert caught.value.delivery_id == delivery_id
    assert caught.value.code == "unknown_delivery"


async def test_record_parsed_failure_quarantines_the_whole_body(
    store: Store, raw: Raw, clock: FakeClock
) -> None:
    body = b'{"entry": [{"ok": 1}, {"broken": true}]}'
    delivery_id = await stored(store, "k1", body=body)
    received = clock.now
    clock.advance(5)
    parsed = ParsedDelivery(inbox=(message("a", "k1"),), failure="entry[1]: unknown type")
    assert await store.record_parsed(delivery_id, parsed, starting_agent=AGENT) == [sid("a")]
    [item] = await store.list_quarantine()
    assert (item.channel, item.account, item.body, item.reason) == (
        CHANNEL,
        None,
        body,
        "entry[1]: unknown type",
    )
    assert item.received_at.timestamp() == received
    assert item.replayed_at is None
    assert await raw.count("deliveries") == 0
    assert len(await store.pending_inbox(sid("a"))) == 1


async def test_record_parsed_memberships_set_blocked_in_metadata(store: Store) -> None:
    await store.create_session(CHANNEL, ACCOUNT, "a", "billing", {"lang": "de"})
    first = await stored(store, "k1")
    parsed = ParsedDelivery(
        memberships=(
            MembershipIn(CHANNEL, ACCOUNT, "a", True),
            MembershipIn(CHANNEL, ACCOUNT, "b", True),
        )
    )
    assert await store.record_parsed(first, parsed, starting_agent=AGENT) == []
    a, b = await store.get_session(sid("a")), await store.get_session(sid("b"))
    assert a is not None
    assert a.metadata == {"lang": "de", "blocked": True}
    assert b is not None
    assert b.metadata == {"blocked": True}
    assert b.active_agent == AGENT
    second = await stored(store, "k2")
    unblock = ParsedDelivery(memberships=(MembershipIn(CHANNEL, ACCOUNT, "a", False),))
    await store.record_parsed(second, unblock, starting_agent=AGENT)
    a = await store.get_session(sid("a"))
    assert a is not None
    assert a.metadata == {"lang": "de", "blocked": False}


async def test_record_parsed_without_delivery_applies_and_deletes_nothing(
    store: Store, raw: Raw
) -> None:
    await stored(store, "other")
    parsed = ParsedDelivery(inbox=(message("a", "replayed"),))
    assert await store.record_parsed(None, parsed, starting_agent=AGENT) == [sid("a")]
    assert await raw.count("deliveries") == 1
    with pytest.raises(ValueError, match="delivery_id"):
        await store.record_parsed(
            None, ParsedDelivery(failure="still broken"), starting_agent=AGENT
        )


async def test_record_parsed_is_one_transaction(store: Store, raw: Raw) -> None:
    delivery_id = await stored(store, "k1", "k2")
    await raw.fail_inserts("quarantine")
    before = await raw.dump(*PIPELINE_TABLES, "sessions")
    parsed = ParsedDelivery(
        inbox=(message("a", "k1"),),
        memberships=(MembershipIn(CHANNEL, ACCOUNT, "b", True),),
        failure="part 2 failed",
    )
    with pytest.raises(raw.injected_error, match="injected failure"):
        await store.record_parsed(delivery_id, parsed, starting_agent=AGENT)
    assert await raw.dump(*PIPELINE_TABLES, "sessions") == before


@pytest.mark.parametrize(
    ("parsed", "field"),
    [
        (ParsedDelivery(inbox=(message("a", ""),)), "InboxIn.dedup_key"),
        (
            ParsedDelivery(inbox=(InboxIn(CHANNEL, ACCOUNT, "a", "k", {"x": {1, 2}}),)),
            "InboxIn.event",
        ),
        (ParsedDelivery(inbox=(InboxIn(CHANNEL, ACCOUNT, "", "k", {}),)), "InboxIn.chat_id"),
        (
            ParsedDelivery(memberships=(MembershipIn(CHANNEL, "", "a", True),)),
            "MembershipIn.account",
        ),
        (ParsedDelivery(inbox=("k",)), "parsed.inbox"),  # type: ignore[arg-type]
        (
            ParsedDelivery(statuses=(StatusIn(CHANNEL, ACCOUNT, "w1", "seen", None),)),
            "StatusIn.state",
        ),
        (
            ParsedDelivery(statuses=(StatusIn(CHANNEL, ACCOUNT, "", "read", None),)),
            "StatusIn.platform_message_id",
        ),
        (
            ParsedDelivery(memberships=(MembershipIn(CHANNEL, ACCOUNT, "a", 1),)),  # type: ignore[arg-type]
            "blocked",
        ),
        (ParsedDelivery(failure=""), "parsed.failure"),
        ({"inbox": ()}, "ParsedDelivery"),
    ],
)
async def test_record_parsed_rejects_bad_input_and_writes_nothing(
    store: Store, raw: Raw, parsed: ParsedDelivery, field: str
) -> None:
    delivery_id = await stored(store, "k")
    before = await raw.dump(*PIPELINE_TABLES, "sessions")
    with pytest.raises(ValueError, match=field):
        await store.record_parsed(delivery_id, parsed, starting_agent=AGENT)
    assert await raw.dump(*PIPELINE_TABLES, "sessions") == before


async def test_record_parsed_rejects_bad_delivery_id_and_agent(store: Store) -> None:
    with pytest.raises(ValueError, match="delivery_id"):
        await store.record_parsed(0, ParsedDelivery(), starting_agent=AGENT)
    with pytest.raises(ValueError, match="agent"):
        await store.record_parsed(None, ParsedDelivery(), starting_agent="")


async def test_record_parsed_session_ids_follow_first_appearance(store: Store) -> None:
    delivery_id = await stored(store, "k")
    items = tuple(message(chat, f"k-{i}") for i, chat in enumerate("cabca"))
    sessions = await store.record_parsed(
        delivery_id, ParsedDelivery(inbox=items), starting_agent=AGENT
    )
    assert sessions == [sid("c"), sid("a"), sid("b")]


async def test_record_parsed_many_applies_every_delivery_and_skips_one_gone(
    store: Store,
) -> None:
    first, second = await stored(store, "k1"), await stored(store, "k2")
    items = [
        (first, ParsedDelivery(inbox=(message("a", "k1"),))),
        (second, ParsedDelivery(inbox=(message("b", "k2"),))),
    ]
    news = await store.record_parsed_many(items, starting_agent=AGENT)
    assert [new.session_id for new in news] == [sid("a"), sid("b")]
    assert await store.unparsed_deliveries() == []
    assert await store.record_parsed_many(items, starting_agent=AGENT) == []  # both gone now
    assert await store.record_parsed_many([], starting_agent=AGENT) == []


async def test_record_parsed_many_hands_back_the_rows_it_recorded(store: Store) -> None:
    """Each session given rows comes back with them as a read would give them, oldest first,
    and whether they are every pending row of it (a new lane may start from them alone)."""
    await store.record_parsed(
        None, ParsedDelivery(inbox=(message("a", "k0"),)), starting_agent=AGENT
    )
    first, second = await stored(store, "k1", "k2"), await stored(store, "k3")
    items = [
        (first, ParsedDelivery(inbox=(message("b", "k1"), message("a", "k2")))),
        (second, ParsedDelivery(inbox=(message("a", "k3"),))),
    ]
    news = await store.record_parsed_many(items, starting_agent=AGENT)
    assert [(new.session_id, new.complete) for new in news] == [(sid("b"), True), (sid("a"), False)]
    handed = {new.session_id: new.new for new in news}
    assert handed[sid("b")] == tuple(await store.pending_inbox(sid("b")))
    assert handed[sid("a")] == tuple(await store.pending_inbox(sid("a")))[1:]  # k0 is older
    assert [row.dedup_key for row in handed[sid("a")]] == ["k2", "k3"]
    assert all(row.state == "pending" and row.attempts == 0 for row in handed[sid("b")])


async def test_record_parsed_many_says_a_session_is_complete_once_its_older_rows_are_done(
    store: Store,
) -> None:
    await store.record_parsed(
        None, ParsedDelivery(inbox=(message("a", "k0"),)), starting_agent=AGENT
    )
    [old] = await store.pending_inbox(sid("a"))
    async with store.turn(sid("a")) as turn:
        turn.complete_inbox([old.id])
    items = [(await stored(store, "k1"), ParsedDelivery(inbox=(message("a", "k1"),)))]
    [new] = await store.record_parsed_many(items, starting_agent=AGENT)
    assert (new.complete, [row.dedup_key for row in new.new]) == (True, ["k1"])


async def test_record_parsed_many_oldest_first_refuses_to_pass_an_older_delivery(
    store: Store, raw: Raw
) -> None:
    """Given deliveries from memory, the intake asks that none older waits in the store (another
    process stored it): then nothing is written, and it reads the store instead."""
    older, newer = await stored(store, "k1"), await stored(store, "k2")
    items = [(newer, ParsedDelivery(inbox=(message("a", "k2"),)))]
    before = await raw.dump(*PIPELINE_TABLES, "sessions")
    with pytest.raises(OlderDeliveries) as refused:
        await store.record_parsed_many(items, starting_agent=AGENT, oldest_first=True)
    assert refused.value.delivery_id == older
    assert await raw.dump(*PIPELINE_TABLES, "sessions") == before
    both = [(older, ParsedDelivery(inbox=(message("a", "k1"),))), *items]
    news = await store.record_parsed_many(both, starting_agent=AGENT, oldest_first=True)
    assert [row.dedup_key for new in news for row in new.new] == ["k1", "k2"]


async def test_record_parsed_many_is_one_transaction(store: Store, raw: Raw) -> None:
    first, second = await stored(store, "k1"), await stored(store, "k2")
    await raw.fail_inserts("quarantine")  # the second delivery's quarantine row fails
    before = await raw.dump(*PIPELINE_TABLES, "sessions")
    items = [
        (first, ParsedDelivery(inbox=(message("a", "k1"),))),
        (second, ParsedDelivery(failure="part 2 failed")),
    ]
    with pytest.raises(raw.injected_error, match="injected failure"):
        await store.record_parsed_many(items, starting_agent=AGENT)
    assert await raw.dump(*PIPELINE_TABLES, "sessions") == before


async def test_record_parsed_keeps_when_the_user_last_wrote(store: Store, clock: FakeClock) -> None:
    """metadata.last_user_message_at: the latest message's own timestamp, never after the
    recording (a clock ahead on the platform's side cannot open the window longer)."""

    def written(key: str, at: float) -> InboxIn:
        stamp = datetime.fromtimestamp(at, tz=UTC).isoformat()
        return InboxIn(CHANNEL, ACCOUNT, "a", key, {"text": "hi", "timestamp": stamp})

    hours_ago = clock.now - 5 * 3600
    parsed = ParsedDelivery(inbox=(written("k1", hours_ago), written("k2", hours_ago - 60)))
    await store.record_parsed(await stored(store, "k1", "k2"), parsed, starting_agent=AGENT)
    session = await store.get_session(sid("a"))
    assert session is not None
    assert session.metadata[LAST_USER_MESSAGE_AT] == hours_ago
    ahead = ParsedDelivery(inbox=(written("k3", clock.now + 3600),))
    await store.record_parsed(await stored(store, "k3"), ahead, starting_agent=AGENT)
    session = await store.get_session(sid("a"))
    assert session is not None
    assert session.metadata[LAST_USER_MESSAGE_AT] == clock.now
    await store.update_session(sid("a"), metadata={"note": "kept"})
    older = ParsedDelivery(inbox=(written("k4", hours_ago),))  # a late, older delivery
    await store.record_parsed(await stored(store, "k4"), older, starting_agent=AGENT)
    session = await store.get_session(sid("a"))
    assert session is not None
    assert session.metadata == {LAST_USER_MESSAGE_AT: clock.now, "note": "kept"}


async def test_record_parsed_gives_a_new_session_its_accounts_starting_agent(
    store: Store,
) -> None:
    """An item naming a starting agent (its bot's or number's own) overrides the global one
    for a new session; an existing session keeps its agent."""
    await store.create_session(CHANNEL, ACCOUNT, "old", "billing")
    delivery_id = await stored(store, "k1", "k2", "k3")
    own = InboxIn(CHANNEL, ACCOUNT, "new", "k1", {"text": "hi"}, starting_agent="sales")
    kept = InboxIn(CHANNEL, ACCOUNT, "old", "k2", {"text": "hi"}, starting_agent="sales")
    blocked = MembershipIn(CHANNEL, ACCOUNT, "gone", True, starting_agent="sales")
    parsed = ParsedDelivery(inbox=(own, kept, message("plain", "k3")), memberships=(blocked,))
    await store.record_parsed(delivery_id, parsed, starting_agent=AGENT)
    agents = {}
    for chat in ("new", "old", "plain", "gone"):
        session = await store.get_session(sid(chat))
        assert session is not None
        agents[chat] = session.active_agent
    assert agents == {"new": "sales", "old": "billing", "plain": AGENT, "gone": "sales"}


async def test_record_parsed_refuses_an_empty_account_starting_agent(store: Store) -> None:
    delivery_id = await stored(store, "k1")
    item = InboxIn(CHANNEL, ACCOUNT, "new", "k1", {"text": "hi"}, starting_agent="")
    with pytest.raises(ValueError, match="agent name"):
        await store.record_parsed(delivery_id, ParsedDelivery(inbox=(item,)), starting_agent=AGENT)
    assert await store.get_session(sid("new")) is None


async def test_record_parsed_many_keeps_the_order_of_one_delivery_after_another(
    store: Store, raw: Raw
) -> None:
    """Runs of deliveries holding only messages are written together (PostgreSQL): the inbox
    ids, each session's event seqs and ``last_user_message_at`` are those of one delivery
    after the other, a key repeated in a later delivery stays the first's, and a delivery of
    another kind in the middle keeps its place in the sessions' logs."""

    def written(chat: str, key: str, at: float) -> InboxIn:
        stamp = datetime.fromtimestamp(at, tz=UTC).isoformat()
        return InboxIn(CHANNEL, ACCOUNT, chat, key, {"text": key, "timestamp": stamp})

    parsed = [
        ParsedDelivery(inbox=(written("a", "k1", 100.0), written("b", "k2", 300.0))),
        ParsedDelivery(inbox=(written("a", "k3", 200.0), written("a", "k1", 900.0))),
        ParsedDelivery(memberships=(MembershipIn(CHANNEL, ACCOUNT, "b", True),)),
        ParsedDelivery(inbox=(written("b", "k4", 250.0), written("c", "k5", 50.0))),
    ]
    ids = [await stored(store, f"d{n}") for n in range(len(parsed))]
    news = await store.record_parsed_many(list(zip(ids, parsed, strict=True)), starting_agent=AGENT)
    assert [new.session_id for new in news] == [sid("a"), sid("b"), sid("c")]
    rows = await raw.rows("SELECT session_id, dedup_key FROM inbox ORDER BY id")
    assert [tuple(row) for row in rows] == [
        (sid("a"), "k1"),
        (sid("b"), "k2"),
        (sid("a"), "k3"),
        (sid("b"), "k4"),
        (sid("c"), "k5"),
    ]

    async def log(chat: str) -> list[tuple[int, str, object]]:
        events = await store.list_events(sid(chat))
        return [(e.seq, e.kind, e.detail.get("text")) for e in events]

    assert await log("a") == [(1, "message", "k1"), (2, "message", "k3")]
    assert await log("b") == [(1, "message", "k2"), (2, "user_blocked", None), (3, "message", "k4")]
    assert await log("c") == [(1, "message", "k5")]
    wrote = {}
    for chat in "abc":
        session = await store.get_session(sid(chat))
        assert session is not None
        wrote[chat] = session.metadata[LAST_USER_MESSAGE_AT]
    assert wrote == {"a": 200.0, "b": 300.0, "c": 50.0}
