"""Ownership across processes: each store's lease, the owner of a running turn, takeovers by
``interrupt_running`` once a lease ran out, stale inbox batches refused when a turn begins, and
outbox claims that keep two senders off one chat (docs/deployment.md)."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from webhook_bot_gateway.store import (
    InboxNotFound,
    InboxNotPending,
    InvalidSessionId,
    NewMessage,
    OutboxIn,
    OutboxItem,
    RunActive,
    Store,
    TurnActive,
)

from .conftest import SHARED, SQLITE_ONLY, Backend, FakeClock, Raw
from .pipeline import ACCOUNT, AGENT, CHANNEL, inbox_of, message, sid

SID = sid("a")
LEASE = 30.0
DAY = 86400.0


class Boom(Exception):
    pass


async def ownership(raw: Raw, session_id: str = SID) -> tuple[str, str | None]:
    """The session's status and owner, as stored."""
    [row] = await raw.rows("SELECT status, owner FROM sessions WHERE session_id = ?", session_id)
    return row[0], row[1]


async def leases(raw: Raw) -> dict[str, float]:
    return {owner: expires for owner, expires in await raw.rows("SELECT * FROM leases")}


async def claims(raw: Raw, outbox_id: int) -> tuple[str | None, float | None]:
    [row] = await raw.rows("SELECT claimed_by, claimed_until FROM outbox WHERE id = ?", outbox_id)
    return row[0], row[1]


async def start_turn(store: Store, session_id: str = SID) -> Any:
    """A turn entered and never left, as a process killed (or still busy) in it leaves it."""
    return await store.turn(session_id).__aenter__()


async def queued(store: Store, chat_id: str = "a", count: int = 1) -> list[OutboxItem]:
    await store.get_or_create_session(CHANNEL, ACCOUNT, chat_id, AGENT)
    out = OutboxIn(sid(chat_id), CHANNEL, ACCOUNT, chat_id, {"text": "m"})
    return [await store.enqueue_outbox(out) for _ in range(count)]


# --- owner and lease ----------------------------------------------------------------------------


async def test_owner_is_stable_per_store_and_differs_between_stores(
    store: Store, backend: Backend
) -> None:
    assert isinstance(store.owner, str)
    assert store.owner
    assert store.owner == store.owner
    async with backend.store() as other:
        assert other.owner != store.owner


async def test_renew_lease_holds_it_until_seconds_from_now(
    store: Store, raw: Raw, clock: FakeClock
) -> None:
    assert await leases(raw) == {}
    await store.renew_lease(LEASE)
    assert await leases(raw) == {store.owner: clock.now + LEASE}
    clock.advance(10)
    await store.renew_lease(LEASE)  # renewing moves the one row on
    assert await leases(raw) == {store.owner: clock.now + LEASE}


async def test_release_lease_drops_it(store: Store, raw: Raw) -> None:
    await store.release_lease()  # none held: nothing to do
    await store.renew_lease(LEASE)
    await store.release_lease()
    assert await leases(raw) == {}


@pytest.mark.parametrize("seconds", [0, -1, 0.0, math.nan, math.inf, True, "30", None])
async def test_renew_lease_refuses_bad_seconds(store: Store, raw: Raw, seconds: Any) -> None:
    with pytest.raises(ValueError, match="seconds"):
        await store.renew_lease(seconds)
    assert await leases(raw) == {}


# --- interrupt_running --------------------------------------------------------------------------


@SHARED
async def test_interrupt_running_leaves_a_live_owners_turn_alone(
    store: Store, backend: Backend, raw: Raw, clock: FakeClock
) -> None:
    await store.create_session(CHANNEL, ACCOUNT, "a", AGENT)
    await store.renew_lease(LEASE)
    turn = await start_turn(store)
    assert turn.session.status == "running"
    assert await ownership(raw) == ("running", store.owner)
    async with backend.store() as other:
        await other.renew_lease(LEASE)
        assert await other.interrupt_running() == []
        assert await store.interrupt_running() == []  # its own live turn too
        clock.advance(LEASE)  # the lease runs until now, inclusive: still live
        assert await other.interrupt_running() == []
        assert await ownership(raw) == ("running", store.owner)
        with pytest.raises(RunActive):  # a second store's begin is refused as before
            async with other.turn(SID):
                pass
        assert await ownership(raw) == ("running", store.owner)


@SHARED
async def test_interrupt_running_takes_a_dead_owners_turn(
    store: Store, backend: Backend, raw: Raw, clock: FakeClock
) -> None:
    await store.create_session(CHANNEL, ACCOUNT, "a", AGENT)
    await store.renew_lease(LEASE)
    await start_turn(store)
    async with backend.store() as other:
        await other.renew_lease(LEASE)
        clock.advance(LEASE + 1)  # the first store stopped renewing (killed, or stuck)
        await other.renew_lease(LEASE)
        assert await other.interrupt_running() == [SID]
        assert await ownership(raw) == ("interrupted", None)
        assert await other.interrupt_running() == []
        events = await other.list_events(SID)
        assert [(e.kind, e.detail) for e in events] == [
            ("turn_started", {}),
            ("turn_cancelled", {"reason": "interrupted"}),
        ]
        async with other.turn(SID) as turn:  # and runs it again
            assert turn.session.status == "running"
            assert await ownership(raw) == ("running", other.owner)
        assert await ownership(raw) == ("idle", None)


@SHARED
async def test_interrupt_running_takes_a_released_owners_turn_at_once(
    store: Store, backend: Backend, raw: Raw
) -> None:
    await store.create_session(CHANNEL, ACCOUNT, "a", AGENT)
    await store.renew_lease(LEASE)
    await start_turn(store)
    await store.release_lease()
    async with backend.store() as other:
        assert await other.interrupt_running() == [SID]
    assert await ownership(raw) == ("interrupted", None)


async def test_interrupt_running_takes_a_turn_without_owner_or_without_lease(
    store: Store, raw: Raw
) -> None:
    """A running session of no owner (written before owners existed) or of an owner that never
    held a lease is taken: nothing says that turn is alive."""
    for chat in ("a", "b", "c"):
        await store.create_session(CHANNEL, ACCOUNT, chat, AGENT)
    await raw.execute("UPDATE sessions SET status = 'running' WHERE session_id = ?", sid("a"))
    await start_turn(store, sid("b"))  # this store holds no lease
    assert await ownership(raw, sid("a")) == ("running", None)
    assert await store.interrupt_running() == [sid("a"), sid("b")]
    assert await ownership(raw, sid("a")) == ("interrupted", None)
    assert await ownership(raw, sid("b")) == ("interrupted", None)
    assert await ownership(raw, sid("c")) == ("idle", None)


async def test_interrupt_running_deletes_leases_that_ran_out_a_day_ago(
    store: Store, raw: Raw, clock: FakeClock
) -> None:
    insert = "INSERT INTO leases (owner, expires_at) VALUES (?, ?)"
    await raw.execute(insert, "old", clock.now - DAY - 1)
    await raw.execute(insert, "recent", clock.now - 60)
    await store.renew_lease(LEASE)
    assert await store.interrupt_running() == []
    assert await leases(raw) == {"recent": clock.now - 60, store.owner: clock.now + LEASE}


# --- turns and takeovers ------------------------------------------------------------------------


@SHARED
async def test_a_turn_taken_over_fails_its_commit_and_writes_nothing(
    store: Store, backend: Backend, raw: Raw, clock: FakeClock
) -> None:
    [pending] = await inbox_of(store, message("a", "a1"))
    await store.renew_lease(LEASE)
    before = await raw.dump("messages", "outbox", "inbox")
    async with backend.store() as other:

        async def overtaken() -> None:
            async with store.turn(SID, inbox_ids=[pending]) as turn:
                turn.append(NewMessage("assistant", "from the old process"))
                turn.complete_inbox([pending])
                turn.add_outbox(OutboxIn(SID, CHANNEL, ACCOUNT, "a", {"text": "old"}))
                turn.set_active_agent("billing")
                turn.update_metadata({"old": True})
                clock.advance(LEASE + 1)  # the turn outlived its store's lease
                await other.renew_lease(LEASE)
                assert await other.interrupt_running() == [SID]
                assert await raw.dump("messages", "outbox", "inbox") == before
                async with other.turn(SID, inbox_ids=[pending]) as again:
                    again.append(NewMessage("assistant", "from the new process"))
                    again.complete_inbox([pending])
                # The old turn commits after the new one: it must not write over it.

        with pytest.raises(TurnActive, match="taken over") as caught:
            await overtaken()
        assert caught.value.session_id == SID
        assert caught.value.code == "turn_active"
        session = await other.get_session(SID)
        assert session is not None
        assert (session.status, session.active_agent) == ("idle", AGENT)
        assert "old" not in session.metadata  # the old turn's update_metadata was not written
        assert [m.text for m in await other.get_branch(SID)] == ["from the new process"]
        assert await other.list_outbox(SID) == []
        assert await other.pending_inbox(SID) == []
        assert await ownership(raw) == ("idle", None)
        kinds = [e.kind for e in await other.list_events(SID) if e.kind.startswith("turn_")]
        assert kinds == [
            "turn_started",
            "turn_cancelled",  # the takeover
            "turn_started",
            "turn_finished",
        ]


@SHARED
async def test_a_turn_taken_over_and_left_interrupted_fails_its_commit(
    store: Store, backend: Backend, raw: Raw, clock: FakeClock
) -> None:
    await store.create_session(CHANNEL, ACCOUNT, "a", AGENT)
    await store.renew_lease(LEASE)
    before: dict[str, list[Any]] = {}
    async with backend.store() as other:

        async def overtaken() -> None:
            async with store.turn(SID) as turn:
                turn.append(NewMessage("assistant", "late"))
                clock.advance(LEASE + 1)
                assert await other.interrupt_running() == [SID]
                before.update(await raw.dump("sessions", "session_events", "messages"))

        with pytest.raises(TurnActive, match="taken over"):
            await overtaken()
        # Nothing written, not even the old turn's own end: the takeover logged it.
        assert await raw.dump("sessions", "session_events", "messages") == before
        assert await ownership(raw) == ("interrupted", None)


@SHARED
async def test_a_turn_taken_over_rolls_back_without_touching_the_session(
    store: Store, backend: Backend, raw: Raw, clock: FakeClock
) -> None:
    await store.create_session(CHANNEL, ACCOUNT, "a", AGENT)
    await store.renew_lease(LEASE)
    before: dict[str, list[Any]] = {}
    async with backend.store() as other:

        async def failing() -> None:
            async with store.turn(SID):
                clock.advance(LEASE + 1)
                assert await other.interrupt_running() == [SID]
                other_turn = await start_turn(other)
                assert other_turn.session.status == "running"
                before.update(await raw.dump("sessions", "session_events"))
                raise Boom

        with pytest.raises(Boom):
            await failing()
        # The old turn's rollback did not put back its prior status over the new turn.
        assert await raw.dump("sessions", "session_events") == before
        assert await ownership(raw) == ("running", other.owner)


async def test_turn_owner_is_cleared_by_commit_and_rollback(store: Store, raw: Raw) -> None:
    await store.create_session(CHANNEL, ACCOUNT, "a", AGENT)
    async with store.turn(SID):
        assert await ownership(raw) == ("running", store.owner)
    assert await ownership(raw) == ("idle", None)
    with pytest.raises(Boom):
        async with store.turn(SID):
            raise Boom
    assert await ownership(raw) == ("idle", None)


# --- inbox_ids: a stale batch is refused before the turn begins ---------------------------------


async def test_turn_with_a_pending_batch_begins(store: Store) -> None:
    ids = await inbox_of(store, message("a", "a1"), message("a", "a2"))
    async with store.turn(SID, inbox_ids=ids) as turn:
        assert turn.session.status == "running"
        turn.complete_inbox(ids)
    assert await store.pending_inbox(SID) == []


async def test_turn_with_a_stale_batch_raises_at_begin_and_writes_nothing(
    store: Store, raw: Raw
) -> None:
    done, pending = await inbox_of(store, message("a", "a1"), message("a", "a2"))
    [elsewhere] = await inbox_of(store, message("b", "b1"))
    async with store.turn(SID) as turn:
        turn.complete_inbox([done])  # another lane answered this one meanwhile
    before = await raw.dump("sessions", "session_events", "inbox", "messages")
    reached = []
    with pytest.raises(InboxNotPending) as stale:
        async with store.turn(SID, inbox_ids=[pending, done]):
            reached.append(True)
    assert stale.value.ids == (done,)
    with pytest.raises(InboxNotFound) as missing:
        async with store.turn(SID, inbox_ids=[pending, 999]):
            reached.append(True)
    assert missing.value.ids == (999,)
    with pytest.raises(InboxNotFound) as foreign:  # another session's row is not this one's
        async with store.turn(SID, inbox_ids=[elsewhere]):
            reached.append(True)
    assert foreign.value.ids == (elsewhere,)
    assert reached == []
    assert await raw.dump("sessions", "session_events", "inbox", "messages") == before
    assert await ownership(raw) == ("idle", None)
    async with store.turn(SID, inbox_ids=[pending]):  # not left marked open in this process
        pass


async def test_turn_with_a_stale_batch_keeps_an_interrupted_status(store: Store, raw: Raw) -> None:
    [done] = await inbox_of(store, message("a", "a1"))
    async with store.turn(SID) as turn:
        turn.complete_inbox([done])
    await raw.execute("UPDATE sessions SET status = 'interrupted' WHERE session_id = ?", SID)
    with pytest.raises(InboxNotPending):
        async with store.turn(SID, inbox_ids=[done]):
            pass
    assert await ownership(raw) == ("interrupted", None)


@pytest.mark.parametrize("inbox_ids", [[0], [-1], ["1"], [True], "12"])
async def test_turn_refuses_bad_inbox_ids(store: Store, inbox_ids: Any) -> None:
    await store.create_session(CHANNEL, ACCOUNT, "a", AGENT)
    with pytest.raises(ValueError, match="inbox_ids"):
        async with store.turn(SID, inbox_ids=inbox_ids):
            pass
    async with store.turn(SID, inbox_ids=()):
        pass


# --- outbox claims ------------------------------------------------------------------------------


@SHARED
async def test_claim_outbox_is_held_until_it_runs_out(
    store: Store, backend: Backend, raw: Raw, clock: FakeClock
) -> None:
    [item] = await queued(store)
    async with backend.store() as other:
        for each in (store, other):
            await each.renew_lease(3600)  # claims of live processes
        assert await store.claim_outbox(item.id, 60)
        assert await claims(raw, item.id) == (store.owner, clock.now + 60)
        assert not await other.claim_outbox(item.id, 60)
        clock.advance(60)  # until the end, inclusive
        assert not await other.claim_outbox(item.id, 60)
        assert await store.claim_outbox(item.id, 60)  # a store renews its own claim
        assert await claims(raw, item.id) == (store.owner, clock.now + 60)
        clock.advance(61)
        assert await other.claim_outbox(item.id, 30)
        assert await claims(raw, item.id) == (other.owner, clock.now + 30)
        assert not await store.claim_outbox(item.id, 60)
        await other.outbox_sent(item.id, ["w1"])
        assert not await other.claim_outbox(item.id, 60)  # not pending any more
        assert not await store.claim_outbox(item.id, 60)


async def test_claim_outbox_of_a_row_not_pending_or_unknown_is_false(
    store: Store, raw: Raw
) -> None:
    first, second = await queued(store, count=2)
    await store.outbox_failed(first.id, error="x", state="dead")
    assert not await store.claim_outbox(first.id, 60)
    assert not await store.claim_outbox(999, 60)
    assert await claims(raw, first.id) == (None, None)
    assert await store.claim_outbox(second.id, 60)  # not the head's business


@pytest.mark.parametrize(
    ("method", "ids", "seconds", "field"),
    [("claim_outbox", bad, 60, "outbox_id") for bad in (0, "1")]
    + [("claim_outbox", 1, bad, "seconds") for bad in (0, -5, math.nan, True)]
    + [("claim_outbox_many", bad, 60, "outbox_ids") for bad in ([], [0], "12")]
    + [("claim_outbox_many", [1], bad, "seconds") for bad in (0, math.nan)],
)
async def test_claims_refuse_bad_arguments(
    store: Store, raw: Raw, method: str, ids: Any, seconds: Any, field: str
) -> None:
    await queued(store)
    with pytest.raises(ValueError, match=field):
        await getattr(store, method)(ids, seconds)
    assert await raw.rows("SELECT claimed_by FROM outbox") == [(None,)]


@SHARED
async def test_claim_outbox_many_claims_each_free_row_in_the_order_given(
    store: Store, backend: Backend, raw: Raw, clock: FakeClock
) -> None:
    first, taken, done, last = await queued(store, count=4)
    await store.outbox_failed(done.id, error="x", state="dead")
    async with backend.store() as other:
        for each in (store, other):
            await each.renew_lease(3600)
        assert await other.claim_outbox(taken.id, 60)
        given = [last.id, 999, taken.id, first.id, done.id]
        assert await store.claim_outbox_many(given, 60) == [last.id, first.id]
        for row in (first, last):
            assert await claims(raw, row.id) == (store.owner, clock.now + 60)
        assert await claims(raw, taken.id) == (other.owner, clock.now + 60)
        assert await claims(raw, done.id) == (None, None)
        clock.advance(30)
        assert await store.claim_outbox_many([first.id], 60) == [first.id]  # renewed
        assert await claims(raw, first.id) == (store.owner, clock.now + 60)


@SHARED
async def test_claim_outbox_many_at_once_from_two_stores_gives_each_row_to_one(
    store: Store, backend: Backend, raw: Raw
) -> None:
    rows = [row.id for chat in "abcd" for row in await queued(store, chat, count=10)]
    async with backend.store() as other:
        for each in (store, other):
            await each.renew_lease(3600)
        for _ in range(5):
            await raw.execute("UPDATE outbox SET claimed_by = NULL, claimed_until = NULL")
            mine, theirs = await asyncio.gather(
                store.claim_outbox_many(rows, 60), other.claim_outbox_many(rows[::-1], 60)
            )
            assert sorted(mine + theirs) == rows  # each row once
            owners = dict(await raw.rows("SELECT id, claimed_by FROM outbox"))
            assert {owners[i] for i in mine} <= {store.owner}
            assert {owners[i] for i in theirs} <= {other.owner}


@SHARED
async def test_a_claimed_head_hides_its_chat_from_the_other_store_only(
    store: Store, backend: Backend, clock: FakeClock
) -> None:
    a1, a2 = await queued(store, "a", 2)
    [b1] = await queued(store, "b")
    async with backend.store() as other:
        for each in (store, other):
            await each.renew_lease(3600)  # claims of live processes
        assert await store.claim_outbox(a1.id, 60)
        now = clock.now
        mine = await store.outbox_schedule(now)
        assert ([row.id for row in mine[0]], mine[1]) == ([a1.id, b1.id], None)
        assert [row.id for row in await store.due_outbox(now)] == [a1.id, b1.id]
        theirs = await other.outbox_schedule(now)
        assert ([row.id for row in theirs[0]], theirs[1]) == ([b1.id], None)
        assert [row.id for row in await other.due_outbox(now)] == [b1.id]  # a2 waits behind a1
        await other.outbox_sent(b1.id, ["w-b1"])
        assert await other.outbox_schedule(now) == ([], None)
        assert await other.next_outbox_due() is None
        assert await store.next_outbox_due() == now
        clock.advance(61)  # the claim ran out: the sender that had it died
        assert [row.id for row in await other.due_outbox(clock.now)] == [a1.id]
        assert await other.next_outbox_due() == now
        assert a2.id not in [row.id for row in await other.due_outbox(clock.now)]


@SHARED
async def test_a_claim_ends_with_its_claimers_lease(
    store: Store, backend: Backend, clock: FakeClock
) -> None:
    """A process killed mid-send: its claims stop hiding rows once its lease runs out, long
    before the claims themselves would."""
    [item] = await queued(store)
    await store.renew_lease(10)
    assert await store.claim_outbox(item.id, 600)
    async with backend.store() as other:
        await other.renew_lease(3600)
        assert await other.due_outbox(clock.now) == []
        assert not await other.claim_outbox(item.id, 60)
        clock.advance(11)  # the claimer's lease ran out; its claim has 589 s left
        assert [row.id for row in await other.due_outbox(clock.now)] == [item.id]
        assert await other.claim_outbox(item.id, 60)


@SHARED
@pytest.mark.parametrize("end", ["sent", "retry", "failed", "progress", "redirect"])
async def test_every_end_of_a_send_attempt_ends_the_claim(
    store: Store, backend: Backend, raw: Raw, clock: FakeClock, end: str
) -> None:
    [item] = await queued(store)
    assert await store.claim_outbox(item.id, 60)
    if end == "sent":
        await store.outbox_sent(item.id, ["w1"])
    elif end == "retry":
        await store.outbox_retry(item.id, next_attempt_at=clock.now, error="429")
    elif end == "failed":
        await store.outbox_failed(item.id, error="blocked", state="failed")
    elif end == "progress":
        await store.outbox_progress(item.id, skip_parts=1, platform_ids=["w1"])
    else:
        await store.outbox_redirect(item.id, chat_id="a2", error="migrated")
    assert await claims(raw, item.id) == (None, None)
    async with backend.store() as other:
        still_pending = end in ("retry", "progress", "redirect")
        assert [row.id for row in await other.due_outbox(clock.now)] == (
            [item.id] if still_pending else []
        )
        assert await other.claim_outbox(item.id, 60) is still_pending


# --- watch_work ---------------------------------------------------------------------------------


async def test_watch_work_enters_and_leaves(store: Store) -> None:
    heard: list[object] = []
    async with store.watch_work(heard.append, lambda: heard.append("outbox")) as entered:
        assert entered is None
    assert heard == []


@SQLITE_ONLY
async def test_watch_work_hears_nothing_on_sqlite(store: Store) -> None:
    """SQLite backend: no notifications; the polls find other processes' work."""
    heard: list[object] = []
    async with store.watch_work(heard.append, lambda: heard.append("outbox")):
        await inbox_of(store, message("a", "a1"))
        await queued(store)
    assert heard == []


async def test_interrupt_running_takes_this_stores_own_turn_left_running_with_none_under_way(
    store: Store, raw: Raw
) -> None:
    """A turn whose commit and rollback both failed (the database locked past the busy timeout)
    left its session ``running`` under this store's live lease: the dispatcher's poll, which
    knows which turns it has under way, frees it; a turn under way is never taken."""
    await store.create_session(CHANNEL, ACCOUNT, "a", AGENT)
    await store.renew_lease(LEASE)
    await start_turn(store)  # never ends: as if its commit and rollback had failed
    assert await store.interrupt_running() == []  # without the list: its own live lease
    assert await store.interrupt_running(running_here={SID}) == []  # under way: kept
    assert await ownership(raw) == ("running", store.owner)
    assert await store.interrupt_running(running_here=set()) == [SID]
    assert await ownership(raw) == ("interrupted", None)
    events = [event.kind for event in await store.list_events(SID)]
    assert events[-2:] == ["turn_started", "turn_cancelled"]


# --- relay_cancel -------------------------------------------------------------------------------

RELAY_WAIT = 10.0  # seconds an answer may take before the test fails


class Answering:
    """A store's ``on_cancel``: records the sessions it was asked about, answers ``answer``."""

    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.asked: list[str] = []

    async def __call__(self, session_id: str) -> bool:
        self.asked.append(session_id)
        return self.answer


async def turn_of_a_live_store(store: Store) -> None:
    """Session ``SID``, its turn entered (and never left) by ``store``, whose lease is live."""
    await store.create_session(CHANNEL, ACCOUNT, "a", AGENT)
    await store.renew_lease(LEASE)
    await start_turn(store)


def no_work(*_: object) -> None:
    """``watch_work``'s inbox and outbox listeners, where the test looks at cancels only."""


@SHARED
@pytest.mark.parametrize("answer", [True, False])
async def test_relay_cancel_gets_the_answer_of_the_store_running_the_turn(
    store: Store, backend: Backend, answer: bool
) -> None:
    await turn_of_a_live_store(store)
    running = Answering(answer)
    async with (
        backend.store() as other,
        store.watch_work(no_work, no_work, running),
        other.watch_work(no_work, no_work),
    ):
        relayed = await other.relay_cancel(SID, wait_seconds=RELAY_WAIT)
        assert await store.relay_cancel(SID, wait_seconds=RELAY_WAIT) is False  # its own turn
    if backend.is_sqlite:  # no channel between processes
        assert (relayed, running.asked) == (False, [])
    else:
        assert (relayed, running.asked) == (answer, [SID])


@SHARED
async def test_relay_cancel_asks_nobody_when_no_live_store_runs_a_turn(
    store: Store, backend: Backend, clock: FakeClock
) -> None:
    await store.create_session(CHANNEL, ACCOUNT, "a", AGENT)
    running = Answering(True)
    async with (
        backend.store() as other,
        store.watch_work(no_work, no_work, running),
        other.watch_work(no_work, no_work),
    ):
        assert await other.relay_cancel(SID, wait_seconds=RELAY_WAIT) is False  # idle
        await store.renew_lease(LEASE)
        await start_turn(store)
        clock.advance(LEASE + 1)  # the lease ran out: the turn is dead, to be taken over
        assert await other.relay_cancel(SID, wait_seconds=RELAY_WAIT) is False
    assert running.asked == []


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_relay_cancel_of_a_store_that_does_not_answer_is_none(
    backend: Backend, store: Store
) -> None:
    """PostgreSQL backend: the store running the turn does not listen (say, it lost its
    listening connection), so no answer comes."""
    await turn_of_a_live_store(store)
    async with backend.store() as other:
        assert await other.relay_cancel(SID, wait_seconds=0.05) is False  # not listening itself
        async with other.watch_work(no_work, no_work):
            assert await other.relay_cancel(SID, wait_seconds=0.05) is None


@pytest.mark.parametrize(
    ("session_id", "wait_seconds", "error"),
    [
        ("", 1.0, InvalidSessionId),
        ("a b", 1.0, InvalidSessionId),
        (SID, -1.0, ValueError),
        (SID, math.nan, ValueError),
    ],
)
async def test_relay_cancel_refuses_bad_arguments(
    store: Store, session_id: str, wait_seconds: float, error: type[Exception]
) -> None:
    with pytest.raises(error):
        await store.relay_cancel(session_id, wait_seconds=wait_seconds)
