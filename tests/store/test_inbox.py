"""The inbox: pending rows per session, failures and dead letters, completion inside a turn."""

from __future__ import annotations

import asyncio

import pytest

from webhook_bot_gateway.store import (
    InboxNotFound,
    InboxNotPending,
    NewMessage,
    OutboxIn,
    Store,
)

from .conftest import SHARED, Backend, FakeClock, Raw
from .pipeline import ACCOUNT, CHANNEL, PIPELINE_TABLES, inbox_of, message, sid


class Boom(Exception):
    pass


def reply(chat_id: str, text: str = "hello") -> OutboxIn:
    return OutboxIn(sid(chat_id), CHANNEL, ACCOUNT, chat_id, {"text": text})


async def inbox_states(raw: Raw) -> dict[int, str]:
    return dict(await raw.rows("SELECT id, state FROM inbox"))


async def test_pending_sessions_ordered_by_oldest_pending_row(store: Store) -> None:
    a1 = await inbox_of(store, message("a", "a1"))
    await inbox_of(store, message("b", "b1"), message("c", "c1"))
    await inbox_of(store, message("a", "a2"))
    assert await store.pending_sessions() == [sid("a"), sid("b"), sid("c")]
    async with store.turn(sid("a")) as turn:
        turn.complete_inbox(a1)  # a's oldest pending row is now a2, after b1 and c1
    assert await store.pending_sessions() == [sid("b"), sid("c"), sid("a")]


async def test_pending_inbox_oldest_first_with_limit(store: Store) -> None:
    ids = await inbox_of(store, *(message("a", f"k{i}", f"m{i}") for i in range(5)))
    await inbox_of(store, message("b", "other"))
    rows = await store.pending_inbox(sid("a"))
    assert [r.id for r in rows] == ids
    assert [r.event["text"] for r in rows] == [f"m{i}" for i in range(5)]
    assert [r.id for r in await store.pending_inbox(sid("a"), limit=2)] == ids[:2]


async def test_pending_inbox_read_at_once_gives_each_session_its_own_rows(store: Store) -> None:
    """Reads made together (PostgreSQL answers them with one statement) each get their own
    session's rows, oldest first, up to their own limit."""
    a_ids = await inbox_of(store, *(message("a", f"ka{i}", f"a{i}") for i in range(4)))
    b_ids = await inbox_of(store, *(message("b", f"kb{i}", f"b{i}") for i in range(2)))
    a_all, a_two, b_all, nobody = await asyncio.gather(
        store.pending_inbox(sid("a")),
        store.pending_inbox(sid("a"), limit=2),
        store.pending_inbox(sid("b")),
        store.pending_inbox(sid("nobody")),
    )
    assert [r.id for r in a_all] == a_ids
    assert [r.id for r in a_two] == a_ids[:2]
    assert [r.event["text"] for r in b_all] == ["b0", "b1"]
    assert [r.id for r in b_all] == b_ids
    assert nobody == []


async def test_pending_inbox_of_unknown_session_is_empty(store: Store) -> None:
    assert await store.pending_inbox(sid("nobody")) == []
    assert await store.pending_sessions() == []


async def test_fail_inbox_counts_attempts_and_keeps_rows_pending(
    store: Store, clock: FakeClock
) -> None:
    ids = await inbox_of(store, message("a", "k1"), message("a", "k2"))
    await store.fail_inbox(ids, "model timed out", next_attempt_at=clock.now + 2, dead=False)
    await store.fail_inbox(
        ids[:1], "model timed out again", next_attempt_at=clock.now + 4, dead=False
    )
    first, second = await store.pending_inbox(sid("a"))
    assert (first.attempts, first.error, first.next_attempt_at) == (
        2,
        "model timed out again",
        clock.now + 4,
    )
    assert (second.attempts, second.error, second.next_attempt_at) == (
        1,
        "model timed out",
        clock.now + 2,
    )


async def test_fail_inbox_dead_moves_rows_to_the_dead_letters(
    store: Store, clock: FakeClock
) -> None:
    old = await inbox_of(store, message("a", "k1"))
    new = await inbox_of(store, message("b", "k2"), message("b", "k3"))
    await store.fail_inbox(old, "boom", next_attempt_at=clock.now, dead=True)
    await store.fail_inbox(new, "bang", next_attempt_at=clock.now, dead=True)
    assert await store.pending_sessions() == []
    dead = await store.list_dead_inbox()
    assert [r.id for r in dead] == [*reversed(new), *old]  # newest first
    assert {(r.state, r.attempts) for r in dead} == {("dead", 1)}
    assert [r.error for r in dead] == ["bang", "bang", "boom"]
    assert [r.id for r in await store.list_dead_inbox(limit=1, offset=1)] == [new[0]]


async def test_fail_inbox_refuses_rows_not_pending_and_writes_nothing(
    store: Store, raw: Raw, clock: FakeClock
) -> None:
    done, pending = await inbox_of(store, message("a", "k1"), message("a", "k2"))
    async with store.turn(sid("a")) as turn:
        turn.complete_inbox([done])
    before = await raw.dump("inbox")
    with pytest.raises(InboxNotPending, match=str(done)) as caught:
        await store.fail_inbox([pending, done], "x", next_attempt_at=clock.now, dead=False)
    assert caught.value.ids == (done,)
    with pytest.raises(InboxNotFound, match="999") as missing:
        await store.fail_inbox([pending, 999], "x", next_attempt_at=clock.now, dead=True)
    assert missing.value.ids == (999,)
    assert await raw.dump("inbox") == before


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"ids": []}, "ids"),
        ({"ids": [0]}, "ids"),
        ({"ids": ["1"]}, "ids"),
        ({"ids": "12"}, "ids"),
        ({"error": ""}, "error"),
        ({"next_attempt_at": float("nan")}, "next_attempt_at"),
        ({"next_attempt_at": "soon"}, "next_attempt_at"),
        ({"dead": 1}, "dead"),
    ],
)
async def test_fail_inbox_rejects_bad_arguments(
    store: Store, kwargs: dict[str, object], field: str
) -> None:
    ids = await inbox_of(store, message("a", "k1"))
    args: dict[str, object] = {"ids": ids, "error": "e", "next_attempt_at": 1.0, "dead": False}
    with pytest.raises(ValueError, match=field):
        await store.fail_inbox(**{**args, **kwargs})  # type: ignore[arg-type]
    assert [r.attempts for r in await store.pending_inbox(sid("a"))] == [0]


@pytest.mark.parametrize(("limit", "offset"), [(0, 0), (1001, 0), (1, -1)])
async def test_list_dead_inbox_rejects_bad_page(store: Store, limit: int, offset: int) -> None:
    with pytest.raises(ValueError, match="limit|offset"):
        await store.list_dead_inbox(limit, offset)


async def test_turn_completes_inbox_and_adds_outbox_with_its_messages(
    store: Store, raw: Raw
) -> None:
    ids = await inbox_of(store, message("a", "k1"), message("a", "k2"))
    async with store.turn(sid("a")) as turn:
        turn.append(NewMessage("user", "hi"))
        turn.append(NewMessage("assistant", "hello", agent="triage"))
        turn.complete_inbox(ids)
        turn.add_outbox(reply("a"))
        assert not turn.committed_outbox
    assert await store.pending_inbox(sid("a")) == []
    assert await inbox_states(raw) == {ids[0]: "done", ids[1]: "done"}
    [out] = turn.committed_outbox
    assert [m.text for m in await store.get_branch(sid("a"))] == ["hi", "hello"]
    assert await store.list_outbox(sid("a")) == [out]


async def test_turn_exception_leaves_inbox_and_outbox_unchanged(store: Store, raw: Raw) -> None:
    ids = await inbox_of(store, message("a", "k1"))
    before = await raw.dump(*PIPELINE_TABLES, "messages", "sessions")

    async def failing() -> None:
        async with store.turn(sid("a")) as turn:
            turn.append(NewMessage("assistant", "hello"))
            turn.complete_inbox(ids)
            turn.add_outbox(reply("a"))
            raise Boom

    with pytest.raises(Boom):
        await failing()
    assert await raw.dump(*PIPELINE_TABLES, "messages", "sessions") == before


async def test_turn_completing_a_done_row_fails_the_commit_and_writes_nothing(
    store: Store, raw: Raw
) -> None:
    done, pending = await inbox_of(store, message("a", "k1"), message("a", "k2"))
    async with store.turn(sid("a")) as turn:
        turn.complete_inbox([done])
    before = await raw.dump(*PIPELINE_TABLES, "messages", "sessions")

    async def again() -> None:
        async with store.turn(sid("a")) as turn:
            turn.append(NewMessage("assistant", "twice"))
            turn.complete_inbox([pending, done])
            turn.add_outbox(reply("a"))

    with pytest.raises(InboxNotPending, match=str(done)) as caught:
        await again()
    assert caught.value.ids == (done,)
    assert await raw.dump(*PIPELINE_TABLES, "messages", "sessions") == before


async def test_turn_completing_another_sessions_row_fails_the_commit(
    store: Store, raw: Raw
) -> None:
    [other] = await inbox_of(store, message("b", "k1"))
    await inbox_of(store, message("a", "k2"))
    before = await raw.dump(*PIPELINE_TABLES, "messages", "sessions")

    async def wrong() -> None:
        async with store.turn(sid("a")) as turn:
            turn.append(NewMessage("assistant", "x"))
            turn.complete_inbox([other])

    with pytest.raises(InboxNotFound, match=str(other)):
        await wrong()
    assert await raw.dump(*PIPELINE_TABLES, "messages", "sessions") == before
    assert (await store.get_session(sid("a"))).status == "idle"  # type: ignore[union-attr]


@pytest.mark.parametrize(("ids", "field"), [([], "ids"), ([0], "ids"), ("1", "ids")])
async def test_turn_complete_inbox_rejects_bad_ids(store: Store, ids: object, field: str) -> None:
    await inbox_of(store, message("a", "k1"))
    async with store.turn(sid("a")) as turn:
        with pytest.raises(ValueError, match=field):
            turn.complete_inbox(ids)  # type: ignore[arg-type]
    assert len(await store.pending_inbox(sid("a"))) == 1


async def test_turn_complete_inbox_counts_repeated_ids_once(store: Store) -> None:
    [row] = await inbox_of(store, message("a", "k1"))
    async with store.turn(sid("a")) as turn:
        turn.complete_inbox([row, row])
        turn.complete_inbox([row])
    assert await store.pending_inbox(sid("a")) == []


async def test_delete_session_removes_its_inbox(store: Store, raw: Raw) -> None:
    await inbox_of(store, message("a", "k1"), message("b", "k2"))
    assert await store.delete_session(sid("a"))
    assert await raw.rows("SELECT dedup_key FROM inbox") == [("k2",)]
    assert await store.pending_sessions() == [sid("b")]


async def test_purge_finished_deletes_old_done_rows_only(
    store: Store, raw: Raw, clock: FakeClock
) -> None:
    ids = await inbox_of(store, *(message("a", f"k{i}") for i in range(5)))
    async with store.turn(sid("a")) as turn:
        turn.complete_inbox(ids[:3])
    await store.fail_inbox(ids[3:4], "x", next_attempt_at=clock.now, dead=True)
    clock.advance(100)
    assert await store.purge_finished(101) == 0
    assert await store.purge_finished(99, chunk_size=2) == 3
    assert await inbox_states(raw) == {ids[3]: "dead", ids[4]: "pending"}


async def test_cancelled_inbox_finds_the_pending_rows_a_cancel_was_kept_for(
    store: Store,
) -> None:
    a1, a2 = await inbox_of(store, message("a", "a1"), message("a", "a2"))
    [b1] = await inbox_of(store, message("b", "b1"))
    assert await store.cancelled_inbox() == {}
    await store.cancel_inbox([a1])
    await store.cancel_inbox([b1, b1])
    assert await store.cancelled_inbox() == {sid("a"): {a1}, sid("b"): {b1}}
    assert await store.cancelled_inbox([sid("b"), sid("nobody")]) == {sid("b"): {b1}}
    assert await store.cancelled_inbox([]) == {}
    async with store.turn(sid("a")) as turn:
        turn.complete_inbox([a1])  # the cancelled turn committed: its rows are done
    await store.cancel_inbox([a1, a2])  # a done row stays as it is, the pending one is marked
    assert await store.cancelled_inbox() == {sid("a"): {a2}, sid("b"): {b1}}


@SHARED
async def test_a_cancel_kept_survives_reopening_the_store(store: Store, backend: Backend) -> None:
    [a1] = await inbox_of(store, message("a", "a1"))
    await store.cancel_inbox([a1])
    async with backend.store() as other:  # a new process on the same database
        assert await other.cancelled_inbox() == {sid("a"): {a1}}


@pytest.mark.parametrize("ids", [[], [0], ["1"], "12"])
async def test_cancel_inbox_rejects_bad_ids_and_writes_nothing(
    store: Store, raw: Raw, ids: object
) -> None:
    await inbox_of(store, message("a", "a1"))
    with pytest.raises(ValueError, match="ids"):
        await store.cancel_inbox(ids)  # type: ignore[arg-type]
    assert await store.cancelled_inbox() == {}
