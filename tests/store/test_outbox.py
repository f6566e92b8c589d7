"""The outbox: replies to send, their transitions, delivery statuses and dead letters."""

from __future__ import annotations

import asyncio

import pytest

from webhook_bot_gateway.store import (
    PARKED_AT,
    PARKED_ERROR,
    MembershipIn,
    NewMessage,
    OutboxIn,
    OutboxItem,
    OutboxNotFound,
    OutboxNotPending,
    ParsedDelivery,
    SessionNotFound,
    SQLiteStore,
    StatusIn,
    Store,
)

from .conftest import FakeClock, Raw
from .pipeline import ACCOUNT, AGENT, CHANNEL, PIPELINE_TABLES, delivery, sid, statements_of


def reply(chat_id: str, text: str = "hello", account: str = ACCOUNT) -> OutboxIn:
    return OutboxIn(sid(chat_id, account), CHANNEL, account, chat_id, {"text": text})


async def queued(store: Store, chat_id: str = "a", count: int = 1) -> list[OutboxItem]:
    await store.get_or_create_session(CHANNEL, ACCOUNT, chat_id, AGENT)
    return [await store.enqueue_outbox(reply(chat_id, f"m{i}")) for i in range(count)]


async def statuses(store: Store, *items: StatusIn) -> None:
    [result] = await store.ingest([delivery(f"status-{id(items)}-{len(items)}")])
    assert result.delivery_id is not None
    parsed = ParsedDelivery(statuses=items)
    await store.record_parsed(result.delivery_id, parsed, starting_agent=AGENT)


def status(platform_id: str, state: str, error: str | None = None) -> StatusIn:
    return StatusIn(CHANNEL, ACCOUNT, platform_id, state, error)


async def test_enqueue_outbox_returns_the_pending_row(store: Store, clock: FakeClock) -> None:
    [item] = await queued(store)
    assert (item.session_id, item.channel, item.account, item.chat_id) == (
        sid("a"),
        CHANNEL,
        ACCOUNT,
        "a",
    )
    assert (item.payload, item.state, item.attempts, item.error) == (
        {"text": "m0"},
        "pending",
        0,
        None,
    )
    assert (item.platform_ids, item.delivery_state, item.sent_at) == ((), None, None)
    assert item.next_attempt_at == clock.now
    assert item.created_at.timestamp() == clock.now
    assert await store.list_outbox(sid("a")) == [item]


async def test_enqueue_outbox_for_unknown_session_raises(store: Store) -> None:
    with pytest.raises(SessionNotFound, match=sid("nobody")):
        await store.enqueue_outbox(reply("nobody"))


@pytest.mark.parametrize(
    ("item", "field"),
    [
        (OutboxIn("bad id!", CHANNEL, ACCOUNT, "a", {}), "session id"),
        (OutboxIn(sid("a"), "", ACCOUNT, "a", {}), "OutboxIn.channel"),
        (OutboxIn(sid("a"), CHANNEL, "", "a", {}), "OutboxIn.account"),
        (OutboxIn(sid("a"), CHANNEL, ACCOUNT, "", {}), "OutboxIn.chat_id"),
        (OutboxIn(sid("a"), CHANNEL, ACCOUNT, "a", {"x": float("inf")}), "OutboxIn.payload"),
        (OutboxIn(sid("a"), CHANNEL, ACCOUNT, "a", []), "OutboxIn.payload"),  # type: ignore[arg-type]
        ({"text": "hi"}, "OutboxIn"),
    ],
)
async def test_enqueue_outbox_rejects_bad_items(store: Store, item: OutboxIn, field: str) -> None:
    await store.get_or_create_session(CHANNEL, ACCOUNT, "a", AGENT)
    with pytest.raises(ValueError, match=field):
        await store.enqueue_outbox(item)
    assert await store.list_outbox(sid("a")) == []


async def test_due_outbox_respects_next_attempt_and_state(store: Store, clock: FakeClock) -> None:
    [a1] = await queued(store, "a")
    b1, b2, b3 = await queued(store, "b", count=3)
    [c1] = await queued(store, "c")
    await store.outbox_retry(c1.id, next_attempt_at=clock.now + 10, error="429")
    await store.outbox_sent(b1.id, ["w1"])
    assert [i.id for i in await store.due_outbox(clock.now)] == [a1.id, b2.id]
    assert [i.id for i in await store.due_outbox(clock.now + 10)] == [a1.id, b2.id, c1.id]
    assert [i.id for i in await store.due_outbox(clock.now + 10, limit=1)] == [a1.id]
    assert b3.id not in [i.id for i in await store.due_outbox(clock.now + 10)]
    assert await store.next_outbox_due() == clock.now


async def test_due_outbox_never_lets_a_reply_overtake_an_older_one_of_its_chat(
    store: Store, clock: FakeClock
) -> None:
    first, second = await queued(store, "a", count=2)
    await store.outbox_retry(first.id, next_attempt_at=clock.now + 30, error="5xx")
    assert await store.due_outbox(clock.now) == []  # the second waits for the first
    assert await store.next_outbox_due() == clock.now + 30
    [due] = await store.due_outbox(clock.now + 30)
    assert due.id == first.id
    await store.outbox_sent(first.id, ["w1"])
    assert [i.id for i in await store.due_outbox(clock.now + 30)] == [second.id]


async def test_next_outbox_due_is_the_earliest_head_of_a_chat(
    store: Store, clock: FakeClock
) -> None:
    assert await store.next_outbox_due() is None
    [first] = await queued(store, "a")
    [second] = await queued(store, "b")
    await store.outbox_retry(first.id, next_attempt_at=clock.now + 30, error="5xx")
    await store.outbox_retry(second.id, next_attempt_at=clock.now + 20, error="5xx")
    assert await store.next_outbox_due() == clock.now + 20
    await store.outbox_failed(second.id, error="gone", state="failed")
    assert await store.next_outbox_due() == clock.now + 30


async def test_outbox_sent_records_ids_and_time(store: Store, clock: FakeClock) -> None:
    [item] = await queued(store)
    await store.outbox_retry(item.id, next_attempt_at=clock.now, error="timeout")
    clock.advance(3)
    await store.outbox_sent(item.id, ["w1", "w2"])
    [sent] = await store.list_outbox(sid("a"))
    assert (sent.state, sent.platform_ids, sent.attempts, sent.error) == (
        "sent",
        ("w1", "w2"),
        2,
        None,
    )
    assert sent.sent_at is not None
    assert sent.sent_at.timestamp() == clock.now
    assert await store.due_outbox(clock.now + 100) == []


async def test_outbox_sent_is_one_update_statement(file_store: SQLiteStore) -> None:
    """SQLite backend: the statements traced on its connection."""
    [item] = await queued(file_store)
    seen = await statements_of(file_store, lambda: file_store.outbox_sent(item.id, ["w1"]))
    # Each write runs in its own savepoint of a shared transaction (store/sqlite/_group_commit.py).
    words = [s.split()[0] for s in seen if s.split()[0] not in ("SAVEPOINT", "RELEASE")]
    # The row changes in one UPDATE; then only inserts: the id index and the status event (with
    # the event trigger's SELECT), all in the one transaction.
    assert words[:2] == ["BEGIN", "UPDATE"]
    assert words[-1] == "COMMIT"
    assert set(words[2:-1]) <= {"INSERT", "SELECT"}
    assert words.count("UPDATE") == 1


async def test_outbox_transitions_refuse_rows_not_pending(
    store: Store, raw: Raw, clock: FakeClock
) -> None:
    [item] = await queued(store)
    await store.outbox_sent(item.id, ["w1"])
    before = await raw.dump(*PIPELINE_TABLES)
    calls = [
        store.outbox_sent(item.id, ["w9"]),
        store.outbox_retry(item.id, next_attempt_at=clock.now, error="x"),
        store.outbox_failed(item.id, error="x", state="dead"),
    ]
    for call in calls:
        with pytest.raises(OutboxNotPending, match=f"{item.id} is sent") as caught:
            await call
        assert (caught.value.outbox_id, caught.value.state) == (item.id, "sent")
    assert await raw.dump(*PIPELINE_TABLES) == before


async def test_sends_recorded_at_once_each_get_their_own_outcome(store: Store) -> None:
    """Marks given together (PostgreSQL writes them in one call): a row already sent or unknown
    fails its own caller only; the others are sent, each with its status event, numbered in
    order within its session."""
    first, done, third = await queued(store, "a", count=3)
    [other] = await queued(store, "b")
    await store.outbox_sent(done.id, ["w-done"])
    outcomes = await asyncio.gather(
        store.outbox_sent(first.id, ["w1"]),
        store.outbox_sent(done.id, ["w-again"]),
        store.outbox_sent(third.id, ["w3a", "w3b"]),
        store.outbox_sent(77_777, ["w-none"]),
        store.outbox_sent(other.id, ["w4"]),
        return_exceptions=True,
    )
    assert [type(o).__name__ for o in outcomes] == [
        "NoneType",
        "OutboxNotPending",
        "NoneType",
        "OutboxNotFound",
        "NoneType",
    ]
    rows = {
        r.id: r for r in [*await store.list_outbox(sid("a")), *await store.list_outbox(sid("b"))]
    }
    assert [(rows[i].state, rows[i].platform_ids) for i in (first.id, done.id, third.id)] == [
        ("sent", ("w1",)),
        ("sent", ("w-done",)),
        ("sent", ("w3a", "w3b")),
    ]
    assert rows[other.id].platform_ids == ("w4",)
    events = [e for e in await store.list_events(sid("a")) if e.kind == "status"]
    assert sorted(e.detail["outbox_id"] for e in events) == sorted([done.id, first.id, third.id])
    seqs = [e.seq for e in await store.list_events(sid("a"))]
    assert seqs == list(range(1, len(seqs) + 1))
    await statuses(store, status("w3b", "delivered"))
    assert (await store.list_outbox(sid("a")))[2].delivery_state == "delivered"


async def test_one_platform_id_given_to_two_rows_at_once_goes_to_the_later(store: Store) -> None:
    """Two rows of one batch with the same platform id (one PostgreSQL call cannot index both):
    both are recorded, and the id names the row given later, as one call after the other."""
    [old] = await queued(store, "a")
    [new] = await queued(store, "b")
    await asyncio.gather(store.outbox_sent(old.id, ["17"]), store.outbox_sent(new.id, ["17"]))
    assert [r.state for r in await store.list_outbox(sid("a"))] == ["sent"]
    await statuses(store, status("17", "delivered"))
    assert [r.delivery_state for r in await store.list_outbox(sid("a"))] == [None]
    assert [r.delivery_state for r in await store.list_outbox(sid("b"))] == ["delivered"]


async def test_outbox_transitions_of_unknown_row_raise(store: Store, clock: FakeClock) -> None:
    calls = [
        store.outbox_sent(77, ["w"]),
        store.outbox_retry(77, next_attempt_at=clock.now, error="x"),
        store.outbox_failed(77, error="x", state="uncertain"),
    ]
    for call in calls:
        with pytest.raises(OutboxNotFound, match="77") as caught:
            await call
        assert caught.value.outbox_id == 77


async def test_outbox_retry_counts_and_stays_pending(store: Store, clock: FakeClock) -> None:
    [item] = await queued(store)
    await store.outbox_retry(item.id, next_attempt_at=clock.now + 5, error="429 retry_after=5")
    await store.outbox_retry(item.id, next_attempt_at=clock.now + 9, error="503")
    [row] = await store.list_outbox(sid("a"))
    assert (row.state, row.attempts, row.next_attempt_at, row.error) == (
        "pending",
        2,
        clock.now + 9,
        "503",
    )


@pytest.mark.parametrize("state", ["failed", "dead", "uncertain"])
async def test_outbox_failed_ends_the_row(store: Store, clock: FakeClock, state: str) -> None:
    [item] = await queued(store)
    await store.outbox_failed(item.id, error="blocked by user", state=state)
    [row] = await store.list_outbox(sid("a"))
    assert (row.state, row.attempts, row.error) == (state, 1, "blocked by user")
    assert await store.due_outbox(clock.now + 1e6) == []
    assert await store.next_outbox_due() is None


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda s: s.outbox_failed(1, error="x", state="pending"), "state"),
        (lambda s: s.outbox_failed(1, error="x", state="sent"), "state"),
        (lambda s: s.outbox_failed(1, error="", state="dead"), "error"),
        (lambda s: s.outbox_failed(0, error="x", state="dead"), "outbox_id"),
        (lambda s: s.outbox_retry(1, next_attempt_at=float("inf"), error="x"), "next_attempt_at"),
        (lambda s: s.outbox_retry(1, next_attempt_at=1.0, error=""), "error"),
        (lambda s: s.outbox_sent(1, "w1"), "platform_ids"),
        (lambda s: s.outbox_sent(1, [""]), "platform_ids"),
        (lambda s: s.outbox_sent(True, ["w"]), "outbox_id"),
        (lambda s: s.due_outbox("now"), "now"),
        (lambda s: s.due_outbox(1.0, limit=0), "limit"),
        (lambda s: s.list_dead_outbox(0), "limit"),
        (lambda s: s.list_dead_outbox(1, -1), "offset"),
        (lambda s: s.list_outbox(""), "session id"),
        (lambda s: s.purge_finished(-1), "older_than_seconds"),
        (lambda s: s.purge_finished(1, chunk_size=0), "chunk_size"),
    ],
)
async def test_outbox_calls_reject_bad_arguments(store: Store, call: object, field: str) -> None:
    [item] = await queued(store)
    with pytest.raises(ValueError, match=field):
        await call(store)  # type: ignore[operator]
    assert await store.list_outbox(sid("a")) == [item]


async def test_list_outbox_of_unknown_session_raises(store: Store) -> None:
    with pytest.raises(SessionNotFound, match=sid("nobody")):
        await store.list_outbox(sid("nobody"))


async def test_list_dead_outbox_gives_what_could_not_be_sent_newest_first(store: Store) -> None:
    items = await queued(store, count=5)
    for item in items[:2]:
        await store.outbox_failed(item.id, error=f"e{item.id}", state="dead")
    await store.outbox_failed(items[2].id, error="400 chat not found", state="failed")
    await store.outbox_failed(items[3].id, error="timeout", state="uncertain")  # maybe sent
    await store.outbox_sent(items[4].id, ["m1"])
    dead = await store.list_dead_outbox()
    assert [(d.id, d.state) for d in dead] == [
        (items[2].id, "failed"),
        (items[1].id, "dead"),
        (items[0].id, "dead"),
    ]
    assert [d.id for d in await store.list_dead_outbox(1, 1)] == [items[1].id]


async def test_statuses_update_the_matching_row(store: Store) -> None:
    first, second = await queued(store, count=2)
    await store.outbox_sent(first.id, ["w1a", "w1b"])
    await store.outbox_sent(second.id, ["w2"])
    await statuses(store, status("w1b", "delivered"), status("unknown", "read"))
    by_id = {i.id: i for i in await store.list_outbox(sid("a"))}
    assert by_id[first.id].delivery_state == "delivered"
    assert by_id[second.id].delivery_state is None


async def test_statuses_only_move_forward(store: Store) -> None:
    [item] = await queued(store)
    await store.outbox_sent(item.id, ["w1"])
    await statuses(store, status("w1", "read"), status("w1", "delivered"), status("w1", "sent"))
    [row] = await store.list_outbox(sid("a"))
    assert row.delivery_state == "read"


async def test_failed_status_sets_the_error(store: Store) -> None:
    first, second = await queued(store, count=2)
    await store.outbox_sent(first.id, ["w1"])
    await store.outbox_sent(second.id, ["w2"])
    await statuses(store, status("w1", "failed", "131047: re-engagement"), status("w2", "failed"))
    await statuses(store, status("w1", "read"))  # nothing comes after a failure
    rows = await store.list_outbox(sid("a"))
    assert [(r.delivery_state, r.error) for r in rows] == [
        ("failed", "131047: re-engagement"),
        ("failed", "delivery failed"),
    ]


async def test_statuses_match_channel_and_account(store: Store) -> None:
    await store.get_or_create_session(CHANNEL, "other", "a", AGENT)
    [mine] = await queued(store)
    theirs = await store.enqueue_outbox(reply("a", account="other"))
    await store.outbox_sent(mine.id, ["same-id"])
    await store.outbox_sent(theirs.id, ["same-id"])  # ids of two accounts may collide
    await statuses(store, status("same-id", "read"))
    assert [r.delivery_state for r in await store.list_outbox(sid("a"))] == ["read"]
    assert [r.delivery_state for r in await store.list_outbox(sid("a", "other"))] == [None]


async def test_platform_id_reused_in_another_chat_moves_to_the_newer_row(
    store: Store,
) -> None:
    [old] = await queued(store, "a")
    [new] = await queued(store, "b")
    await store.outbox_sent(old.id, ["17"])  # Telegram message ids count per chat
    await store.outbox_sent(new.id, ["17"])
    await statuses(store, status("17", "delivered"))
    assert [r.delivery_state for r in await store.list_outbox(sid("a"))] == [None]
    assert [r.delivery_state for r in await store.list_outbox(sid("b"))] == ["delivered"]


async def test_turn_add_outbox_commits_with_the_turn(store: Store, clock: FakeClock) -> None:
    await store.get_or_create_session(CHANNEL, ACCOUNT, "a", AGENT)
    clock.advance(7)
    async with store.turn(sid("a")) as turn:
        turn.append(NewMessage("assistant", "one"))
        turn.add_outbox(reply("a", "one"))
        turn.add_outbox(reply("a", "two"))
        assert await store.list_outbox(sid("a")) == []  # buffered until the commit
    assert [i.payload["text"] for i in turn.committed_outbox] == ["one", "two"]
    assert await store.list_outbox(sid("a")) == list(turn.committed_outbox)
    first = turn.committed_outbox[0]
    assert [i.id for i in await store.due_outbox(clock.now)] == [first.id]  # one at a time


async def test_turn_add_outbox_rejects_another_session_and_bad_items(store: Store) -> None:
    await store.get_or_create_session(CHANNEL, ACCOUNT, "a", AGENT)
    async with store.turn(sid("a")) as turn:
        with pytest.raises(ValueError, match="session_id"):
            turn.add_outbox(reply("b"))
        with pytest.raises(ValueError, match="OutboxIn.payload"):
            turn.add_outbox(OutboxIn(sid("a"), CHANNEL, ACCOUNT, "a", {"x": object()}))
    assert turn.committed_outbox == ()
    assert await store.list_outbox(sid("a")) == []


async def test_delete_session_removes_its_outbox_and_platform_ids(store: Store, raw: Raw) -> None:
    [a] = await queued(store, "a")
    [b] = await queued(store, "b")
    await store.outbox_sent(a.id, ["wa"])
    await store.outbox_sent(b.id, ["wb"])
    assert await store.delete_session(sid("a"))
    assert await raw.rows("SELECT id FROM outbox") == [(b.id,)]
    assert await raw.rows("SELECT platform_id FROM outbox_platform_ids") == [("wb",)]
    with pytest.raises(OutboxNotFound):
        await store.outbox_retry(a.id, next_attempt_at=0.0, error="x")


async def test_purge_finished_deletes_old_sent_rows_only(
    store: Store, raw: Raw, clock: FakeClock
) -> None:
    items = await queued(store, count=4)
    for item in items[:3]:
        await store.outbox_sent(item.id, [f"w{item.id}"])
    clock.advance(50)
    await store.outbox_failed(items[3].id, error="x", state="dead")
    assert await store.purge_finished(51) == 0
    assert await store.purge_finished(49, chunk_size=2) == 3
    assert await raw.rows("SELECT id, state FROM outbox") == [(items[3].id, "dead")]
    assert await raw.count("outbox_platform_ids") == 0


async def test_outbox_redirect_points_a_pending_row_at_another_chat(store: Store) -> None:
    [item] = await queued(store)
    await store.outbox_redirect(item.id, chat_id="-100777", error="chat migrated to -100777")
    [moved] = await store.list_outbox(sid("a"))
    assert (moved.id, moved.chat_id, moved.state, moved.attempts) == (
        item.id,
        "-100777",
        "pending",
        1,
    )
    assert moved.payload == {"text": "m0", "chat_id": "-100777"}
    assert moved.error == "chat migrated to -100777"


async def test_outbox_redirect_refuses_a_row_that_is_not_pending(store: Store) -> None:
    [item] = await queued(store)
    await store.outbox_sent(item.id, ["m1"])
    with pytest.raises(OutboxNotPending):
        await store.outbox_redirect(item.id, chat_id="-1", error="moved")
    with pytest.raises(ValueError, match="chat_id"):
        await store.outbox_redirect(item.id, chat_id="", error="moved")


async def test_outbox_progress_records_delivered_parts_and_keeps_the_row_pending(
    store: Store,
) -> None:
    [item] = await queued(store)
    await store.outbox_progress(item.id, skip_parts=1, platform_ids=["w1"])
    [row] = await store.list_outbox(sid("a"))
    assert (row.state, row.platform_ids, row.payload["skip_parts"]) == ("pending", ("w1",), 1)
    await statuses(store, status("w1", "delivered"))  # a part's status finds the row already
    [row] = await store.list_outbox(sid("a"))
    assert row.delivery_state == "delivered"
    await store.outbox_sent(item.id, ["w1", "w2"])
    with pytest.raises(OutboxNotPending):
        await store.outbox_progress(item.id, skip_parts=2, platform_ids=["w1", "w2"])
    with pytest.raises(ValueError, match="skip_parts"):
        await store.outbox_progress(item.id, skip_parts=0, platform_ids=[])


async def test_outbox_schedule_is_due_and_next_due_in_one_read(
    store: Store, clock: FakeClock
) -> None:
    first, _ = await queued(store, "a", count=2)
    [later] = await queued(store, "b")
    await store.outbox_retry(later.id, next_attempt_at=clock.now + 30, error="429")
    rows, next_due = await store.outbox_schedule(clock.now, 10)
    assert [row.id for row in rows] == [first.id]  # b waits; a's second waits behind a's first
    assert rows == await store.due_outbox(clock.now, 10)
    assert next_due == clock.now + 30  # the first time after now: b's retry
    assert await store.next_outbox_due() == clock.now
    with pytest.raises(ValueError, match="limit"):
        await store.outbox_schedule(clock.now, 0)


async def test_parked_rows_are_never_due_until_unparked_then_go_in_order(
    store: Store, clock: FakeClock
) -> None:
    """A session's parked rows stay pending and out of the schedule; unparking makes them due
    now, and a row added meanwhile waits behind them (its chat's order holds)."""
    first, second = await queued(store, "a", 2)
    await queued(store, "b")
    assert await store.park_outbox(sid("a")) == 2
    assert await store.park_outbox(sid("a")) == 0  # parked already
    parked = OutboxIn(sid("a"), CHANNEL, ACCOUNT, "a", {"text": "later"}, parked=True)
    third = await store.enqueue_outbox(parked)
    assert (third.error, third.next_attempt_at) == (PARKED_ERROR, PARKED_AT)
    clock.now += 10**6
    due, _ = await store.outbox_schedule(clock.now, 100)
    assert [row.chat_id for row in due] == ["b"]
    rows = await store.list_outbox(sid("a"))
    assert [(row.state, row.error, row.attempts) for row in rows] == [
        ("pending", PARKED_ERROR, 0)
    ] * 3
    assert await store.unpark_outbox(sid("a")) == 3
    due, _ = await store.outbox_schedule(clock.now, 100)
    assert [row.id for row in due if row.chat_id == "a"] == [first.id]  # the chat's head
    rows = await store.list_outbox(sid("a"))
    assert [row.id for row in rows] == [first.id, second.id, third.id]
    assert {(row.error, row.next_attempt_at <= clock.now) for row in rows} == {(None, True)}


async def test_park_outbox_leaves_finished_rows_and_other_sessions_alone(store: Store) -> None:
    [sent] = await queued(store, "a")
    await store.outbox_sent(sent.id, ["p1"])
    [other] = await queued(store, "b")
    await queued(store, "a")
    assert await store.park_outbox(sid("a")) == 1
    rows = await store.list_outbox(sid("a"))
    assert [(row.state, row.error) for row in rows] == [("sent", None), ("pending", PARKED_ERROR)]
    [kept] = await store.list_outbox(sid("b"))
    assert (kept.id, kept.error) == (other.id, None)


async def test_a_block_parks_the_sessions_replies_and_an_unblock_releases_them(
    store: Store,
) -> None:
    [row] = await queued(store, "a")
    for key, blocked in (("k-block", True), ("k-unblock", False)):
        [result] = await store.ingest([delivery(key)])
        assert result.delivery_id is not None
        membership = MembershipIn(CHANNEL, ACCOUNT, "a", blocked)
        parsed = ParsedDelivery(memberships=(membership,))
        await store.record_parsed(result.delivery_id, parsed, starting_agent=AGENT)
        [now] = await store.list_outbox(sid("a"))
        assert (now.id, now.error) == (row.id, PARKED_ERROR if blocked else None)
    events = [(e.kind, e.detail) for e in await store.list_events(sid("a"))]
    assert events[-2:] == [("user_blocked", {"parked": 1}), ("user_unblocked", {"released": 1})]


async def test_an_unreachable_status_parks_the_session_that_sent_the_reply(
    store: Store,
) -> None:
    [sent, waiting] = await queued(store, "a", count=2)
    await store.outbox_sent(sent.id, ["wamid.out1"])
    gone = StatusIn(CHANNEL, ACCOUNT, "wamid.out1", "failed", "131026", unreachable=True)
    await statuses(store, gone)
    a = await store.get_session(sid("a"))
    assert a is not None
    assert a.metadata == {"blocked": True}
    [_, parked] = await store.list_outbox(sid("a"))
    assert (parked.id, parked.error) == (waiting.id, PARKED_ERROR)
    events = [(e.kind, e.detail) for e in await store.list_events(sid("a"))]
    assert events[-1] == ("user_blocked", {"parked": 1})


async def test_an_unreachable_status_of_a_message_not_sent_here_makes_no_session(
    store: Store,
) -> None:
    """Meta sends every app of the business account the statuses of every app's messages; a
    session the operator deleted may get a late status of its reply. Neither is a session."""
    await store.get_or_create_session(CHANNEL, ACCOUNT, "a", AGENT)
    others = StatusIn(CHANNEL, ACCOUNT, "wamid.theirs", "failed", "131026", unreachable=True)
    await statuses(store, others)
    sessions = await store.list_sessions()
    assert [s.session_id for s in sessions] == [sid("a")]
    assert sessions[0].metadata == {}


async def test_a_turns_outbox_rows_commit_in_order_parked_ones_too(
    store: Store, clock: FakeClock
) -> None:
    """The rows a turn adds are inserted with its commit, in the order added, each as stored:
    a parked one (a blocked user's reply) pending with the parked time, the others due now."""
    await store.get_or_create_session(CHANNEL, ACCOUNT, "a", AGENT)
    parked = OutboxIn(sid("a"), CHANNEL, ACCOUNT, "a", {"text": "two"}, parked=True)
    async with store.turn(sid("a")) as turn:
        turn.append(NewMessage("assistant", "one", agent=AGENT))
        turn.append(NewMessage("assistant", "two", agent=AGENT))
        turn.add_outbox(reply("a", "one"))
        turn.add_outbox(parked)
    committed = list(turn.committed_outbox)
    assert committed == await store.list_outbox(sid("a"))
    assert committed[0].id < committed[1].id
    assert [(row.payload["text"], row.state, row.error) for row in committed] == [
        ("one", "pending", None),
        ("two", "pending", PARKED_ERROR),
    ]
    assert [row.next_attempt_at for row in committed] == [clock.now, PARKED_AT]
    outbox_ids = [
        event.detail.get("outbox_id")
        for event in await store.list_events(sid("a"))
        if event.kind == "message"
    ]
    assert outbox_ids == [row.id for row in committed]  # each answer names its row


async def test_a_turn_with_no_outbox_rows_commits_its_messages(store: Store) -> None:
    await store.get_or_create_session(CHANNEL, ACCOUNT, "a", AGENT)
    async with store.turn(sid("a")) as turn:
        turn.append(NewMessage("assistant", "quiet", agent=AGENT))
    assert turn.committed_outbox == ()
    assert [m.text for m in turn.committed] == ["quiet"]
    assert await store.list_outbox(sid("a")) == []


async def test_parking_ends_the_claims_of_the_parked_rows(store: Store) -> None:
    """The sender parks after the platform refused the attempt: no claim is left that a later
    send would take for an attempt whose outcome was never recorded."""
    first, second = await queued(store, "a", 2)
    assert await store.claim_outbox(first.id, 120)
    assert await store.park_outbox(sid("a")) == 2
    rows = await store.list_outbox(sid("a"))
    assert [(row.id, row.claimed_by) for row in rows] == [(first.id, None), (second.id, None)]


async def test_outbox_schedule_leaves_out_the_channels_asked(
    store: Store, clock: FakeClock
) -> None:
    """The sender leaves out a channel whose send slots are all taken: its rows, due or later,
    are not read, and the other channel's rows behind them in id order are."""
    [first] = await queued(store, "a")  # CHANNEL's: due now
    [later] = await queued(store, "c")
    await store.outbox_retry(later.id, next_attempt_at=clock.now + 30, error="429")
    other = await store.get_or_create_session("telegram", "support", "b", AGENT)
    behind = await store.enqueue_outbox(
        OutboxIn(other.session_id, "telegram", "support", "b", {"text": "x"})
    )
    rows, next_due = await store.outbox_schedule(clock.now, 1)
    assert ([row.id for row in rows], next_due) == ([first.id], clock.now + 30)
    rows, next_due = await store.outbox_schedule(clock.now, 1, skip_channels=[CHANNEL])
    assert ([row.id for row in rows], next_due) == ([behind.id], None)
    rows, next_due = await store.outbox_schedule(clock.now, 10, skip_channels=["telegram"])
    assert ([row.id for row in rows], next_due) == ([first.id], clock.now + 30)
    both = await store.outbox_schedule(clock.now, 10, skip_channels=[CHANNEL, "telegram"])
    assert both == ([], None)
    with pytest.raises(ValueError, match="skip_channels"):
        await store.outbox_schedule(clock.now, 10, skip_channels="telegram")
