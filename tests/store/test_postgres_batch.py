"""PostgreSQL backend only: the sends recorded while one is written share the next call.

``Batcher`` is tested alone on its own event loop (no database); the store's use of it by the
calls it makes to PostgreSQL, counted at ``Database.write_one``.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import textwrap
from asyncio.subprocess import PIPE
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.store.conftest import Backend
from tests.store.pipeline import ACCOUNT, AGENT, CHANNEL, inbox_of, message, sid
from webhook_bot_gateway.store import (
    InboxNotPending,
    NewMessage,
    OutboxIn,
    OutboxItem,
    RunActive,
    SessionDeletedError,
    SessionNotFound,
    StoreError,
)
from webhook_bot_gateway.store.postgres import PostgresStore
from webhook_bot_gateway.store.postgres._batch import Batcher

POSTGRES = pytest.mark.parametrize("backend", ["postgres"], indirect=True)
WAIT = 10.0  # seconds the turns may take to begin before the test fails


async def queued(store: PostgresStore, chat_id: str, count: int) -> list[OutboxItem]:
    await store.get_or_create_session(CHANNEL, ACCOUNT, chat_id, AGENT)
    reply = OutboxIn(sid(chat_id), CHANNEL, ACCOUNT, chat_id, {"text": "hi"})
    return [await store.enqueue_outbox(reply) for _ in range(count)]


def count_calls(store: PostgresStore, method: str = "write_one") -> list[str]:
    """The statement functions of every call of ``Database.<method>`` the store makes from
    now on."""
    database = store._db
    original = getattr(database, method)
    names: list[str] = []

    async def counted(fn: Callable[..., Awaitable[Any]]) -> Any:
        names.append(fn.func.__name__ if isinstance(fn, partial) else fn.__name__)
        return await original(fn)

    setattr(database, method, counted)
    return names


@POSTGRES
async def test_sends_finished_together_are_recorded_in_one_call(backend: Backend) -> None:
    async with backend.store() as opened:
        assert isinstance(opened, PostgresStore)
        rows = [*await queued(opened, "a", 3), *await queued(opened, "b", 2)]
        calls = count_calls(opened)
        await asyncio.gather(*(opened.outbox_sent(r.id, [f"w{r.id}"]) for r in rows))
        assert calls == ["sent_many"]
        sent = [*await opened.list_outbox(sid("a")), *await opened.list_outbox(sid("b"))]
        assert [(r.state, r.platform_ids) for r in sent] == [("sent", (f"w{r.id}",)) for r in rows]


@POSTGRES
async def test_a_send_recorded_alone_takes_the_call_of_one(backend: Backend) -> None:
    async with backend.store() as opened:
        assert isinstance(opened, PostgresStore)
        [row] = await queued(opened, "a", 1)
        calls = count_calls(opened)
        await opened.outbox_sent(row.id, ["w1"])
        assert calls == ["sent"]


@POSTGRES
async def test_a_batch_the_database_refuses_is_written_one_by_one(backend: Backend) -> None:
    """One platform id given to two rows cannot be indexed by one statement: the batch fails
    whole and each mark is written alone, in the order given."""
    async with backend.store() as opened:
        assert isinstance(opened, PostgresStore)
        old, new = await queued(opened, "a", 2)
        calls = count_calls(opened)
        await asyncio.gather(opened.outbox_sent(old.id, ["17"]), opened.outbox_sent(new.id, ["17"]))
        assert calls == ["sent_many", "sent", "sent"]
        assert [r.state for r in await opened.list_outbox(sid("a"))] == ["sent", "sent"]


@POSTGRES
async def test_closing_the_store_writes_the_marks_it_was_given_first(backend: Backend) -> None:
    async with backend.store() as opened:
        assert isinstance(opened, PostgresStore)
        rows = await queued(opened, "a", 3)
        marks = [asyncio.ensure_future(opened.outbox_sent(r.id, ["w"])) for r in rows]
        await asyncio.sleep(0)  # submitted, not yet written
    await asyncio.gather(*marks)
    async with backend.store() as reopened:
        assert [r.state for r in await reopened.list_outbox(sid("a"))] == ["sent"] * 3


@POSTGRES
async def test_lanes_reading_their_rows_at_once_share_one_statement(backend: Backend) -> None:
    async with backend.store() as opened:
        assert isinstance(opened, PostgresStore)
        for chat_id in ("a", "b", "c"):
            await inbox_of(opened, message(chat_id, f"k-{chat_id}", f"hi {chat_id}"))
        reads = count_calls(opened, "query")
        found = await asyncio.gather(*(opened.pending_inbox(sid(c)) for c in ("a", "b", "c")))
        assert reads == ["pending_many"]
        assert [[r.event["text"] for r in rows] for rows in found] == [["hi a"], ["hi b"], ["hi c"]]


# --- turns of several sessions ending together --------------------------------------------


class Gate:
    """Turns wait at it once begun; ``open`` lets them all end in the same moment."""

    def __init__(self, turns: int) -> None:
        self.begun: asyncio.Queue[str] = asyncio.Queue()
        self.ending = asyncio.Event()
        self.turns = turns

    async def all_begun(self) -> None:
        for _ in range(self.turns):
            await asyncio.wait_for(self.begun.get(), WAIT)


async def run_turn(
    store: PostgresStore, chat_id: str, text: str, gate: Gate, inbox_ids: list[int]
) -> Any:
    """A turn of the chat's session that answers ``text`` once the gate opens: its messages."""
    await store.get_or_create_session(CHANNEL, ACCOUNT, chat_id, AGENT)
    async with store.turn(sid(chat_id), inbox_ids=inbox_ids) as turn:
        turn.append(NewMessage("user", f"question of {chat_id}"))
        turn.append(NewMessage("assistant", text, agent=AGENT))
        turn.add_outbox(OutboxIn(sid(chat_id), CHANNEL, ACCOUNT, chat_id, {"text": text}))
        if inbox_ids:
            turn.complete_inbox(inbox_ids)
        gate.begun.put_nowait(chat_id)
        await gate.ending.wait()
    return turn.committed


async def turns_at_once(store: PostgresStore, texts: dict[str, str]) -> list[Any]:
    """One turn per chat, all ending in the same moment; their outcomes in the same order."""
    gate = Gate(len(texts))
    tasks = [
        asyncio.ensure_future(run_turn(store, chat_id, text, gate, []))
        for chat_id, text in texts.items()
    ]
    await gate.all_begun()
    gate.ending.set()
    return list(await asyncio.gather(*tasks, return_exceptions=True))


async def history_texts(store: PostgresStore, chat_id: str) -> list[str]:
    return [m.text for m in await store.all_messages(sid(chat_id))]


@POSTGRES
async def test_turns_ending_together_commit_in_one_call_each_whole(backend: Backend) -> None:
    async with backend.store() as opened:
        assert isinstance(opened, PostgresStore)
        calls = count_calls(opened)
        outcomes = await turns_at_once(opened, {c: f"answer {c}" for c in ("c", "a", "b")})
        assert [c for c in calls if "commit" in c] == ["_call_commit_many"]
        for chat_id, committed in zip(("c", "a", "b"), outcomes, strict=True):
            assert [m.text for m in committed] == [f"question of {chat_id}", f"answer {chat_id}"]
            assert await history_texts(opened, chat_id) == [m.text for m in committed]
            [row] = await opened.list_outbox(sid(chat_id))
            assert row.payload == {"text": f"answer {chat_id}"}
            session = await opened.get_session(sid(chat_id))
            assert session is not None
            assert (session.status, session.head_id) == ("idle", committed[-1].id)
            kinds = [e.kind for e in await opened.list_events(sid(chat_id))]
            assert kinds[-1] == "turn_finished"


@POSTGRES
async def test_a_turn_the_database_refuses_fails_alone_and_the_others_commit(
    backend: Backend,
) -> None:
    """A lone surrogate, which no UTF-8 text can hold, fails the call of the batch; each turn
    is then committed alone: that one raises to its caller, with nothing of it written, and the
    others commit."""
    async with backend.store() as opened:
        assert isinstance(opened, PostgresStore)
        calls = count_calls(opened)
        outcomes = await turns_at_once(opened, {"a": "fine", "b": "bad \ud800 text", "c": "fine"})
        assert [c for c in calls if "commit" in c] == ["_call_commit_many"] + ["_call_commit"] * 3
        assert isinstance(outcomes[1], Exception)
        assert not isinstance(outcomes[0], Exception)
        assert not isinstance(outcomes[2], Exception)
        assert await history_texts(opened, "a") == ["question of a", "fine"]
        assert await history_texts(opened, "b") == []
        assert await opened.list_outbox(sid("b")) == []
        session = await opened.get_session(sid("b"))
        assert session is not None
        assert session.status == "idle"  # undone
        assert await history_texts(opened, "c") == ["question of c", "fine"]


@POSTGRES
async def test_a_turn_refused_in_a_batch_writes_nothing_and_the_others_commit(
    backend: Backend,
) -> None:
    """Refusals are rows of the call, not errors: a turn whose session was deleted, and one
    whose inbox row was answered elsewhere, each raise to their own caller only."""
    async with backend.store() as opened:
        assert isinstance(opened, PostgresStore)
        await opened.get_or_create_session(CHANNEL, ACCOUNT, "stale", AGENT)
        [row_id] = await inbox_of(opened, message("stale", "k-stale"))
        gate = Gate(3)
        tasks = [
            asyncio.ensure_future(run_turn(opened, "kept", "answer", gate, [])),
            asyncio.ensure_future(run_turn(opened, "gone", "answer", gate, [])),
            asyncio.ensure_future(run_turn(opened, "stale", "answer", gate, [row_id])),
        ]
        await gate.all_begun()
        await opened.delete_session(sid("gone"))
        await opened.fail_inbox([row_id], "answered elsewhere", next_attempt_at=0, dead=True)
        calls = count_calls(opened)
        gate.ending.set()
        kept, gone, stale = await asyncio.gather(*tasks, return_exceptions=True)
        assert [c for c in calls if "commit" in c] == ["_call_commit_many"]
        assert [m.text for m in kept] == ["question of kept", "answer"]
        assert isinstance(gone, SessionDeletedError)
        assert isinstance(stale, InboxNotPending)
        assert await history_texts(opened, "stale") == []
        assert await opened.list_outbox(sid("stale")) == []


# --- Batcher alone --------------------------------------------------------------------------


class Recorder:
    """``run_many`` that records each batch and holds it until ``release`` is set."""

    def __init__(self, fail: set[str] | None = None) -> None:
        self.batches: list[list[str]] = []
        self.release = asyncio.Event()
        self.fail = fail or set()

    async def __call__(self, items: list[str]) -> list[str | BaseException]:
        self.batches.append(items)
        await self.release.wait()
        return [StoreError(f"refused {i}") if i in self.fail else i.upper() for i in items]


async def test_calls_made_while_a_batch_runs_go_together_in_the_next() -> None:
    run = Recorder(fail={"c"})
    batcher = Batcher(run, max_size=10)
    first = asyncio.ensure_future(batcher.submit("a"))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert run.batches == [["a"]]
    later = [asyncio.ensure_future(batcher.submit(i)) for i in "bcd"]
    await asyncio.sleep(0)
    run.release.set()
    outcomes = await asyncio.gather(first, *later, return_exceptions=True)
    assert run.batches == [["a"], ["b", "c", "d"]]
    assert [str(o) for o in outcomes] == ["A", "B", "refused c", "D"]


async def test_a_batch_holds_at_most_max_size() -> None:
    run = Recorder()
    run.release.set()
    batcher = Batcher(run, max_size=2)
    await asyncio.gather(*(batcher.submit(i) for i in "abcde"))
    assert run.batches == [["a", "b"], ["c", "d"], ["e"]]


async def test_a_batch_that_raises_fails_each_of_its_callers() -> None:
    async def broken(items: list[str]) -> list[str | BaseException]:
        raise StoreError("the database did not answer")

    batcher = Batcher(broken, max_size=10)
    outcomes = await asyncio.gather(
        batcher.submit("a"), batcher.submit("b"), return_exceptions=True
    )
    assert [str(o) for o in outcomes] == ["the database did not answer"] * 2


async def test_a_caller_cancelled_while_waiting_leaves_the_others_their_outcome() -> None:
    run = Recorder()
    batcher = Batcher(run, max_size=10)
    gone = asyncio.ensure_future(batcher.submit("a"))
    kept = asyncio.ensure_future(batcher.submit("b"))
    await asyncio.sleep(0)
    gone.cancel()
    run.release.set()
    assert await kept == "B"
    assert gone.cancelled()
    await batcher.drained()
    assert run.batches == [["a", "b"]]  # its write still ran, as one already sent would


# --- turns of several sessions beginning together -------------------------------------------


async def begin_at_once(store: PostgresStore, chats: list[str], **kwargs: Any) -> list[Any]:
    """Enter a turn of each chat's session in the same moment; each turn's history (it is
    left at once, writing nothing) or the error its begin raised, in the same order."""

    async def enter(chat_id: str) -> list[str]:
        async with store.turn(sid(chat_id), **kwargs) as turn:
            return [m.text for m in turn.history]

    return list(await asyncio.gather(*(enter(c) for c in chats), return_exceptions=True))


@POSTGRES
async def test_turns_beginning_together_begin_in_one_call_each_with_its_history(
    backend: Backend,
) -> None:
    async with backend.store() as opened:
        assert isinstance(opened, PostgresStore)
        for chat_id in ("b", "a", "c"):
            await opened.get_or_create_session(CHANNEL, ACCOUNT, chat_id, AGENT)
            await opened.append_message(sid(chat_id), "user", f"earlier in {chat_id}")
        calls = count_calls(opened)
        histories = await begin_at_once(opened, ["b", "a", "c"])
        assert [c for c in calls if "enter" in c] == ["_call_enter_many"]
        assert histories == [["earlier in b"], ["earlier in a"], ["earlier in c"]]
        for chat_id in ("a", "b", "c"):
            kinds = [e.kind for e in await opened.list_events(sid(chat_id))]
            assert kinds[-2:] == ["turn_started", "turn_finished"]


@POSTGRES
async def test_a_begin_refused_in_a_batch_writes_nothing_and_the_others_begin(
    backend: Backend,
) -> None:
    """A session another store runs a turn of, and one that does not exist, each refuse their
    own begin only."""
    async with backend.store() as opened, backend.store() as other:
        assert isinstance(opened, PostgresStore)
        for chat_id in ("busy", "free"):
            await opened.get_or_create_session(CHANNEL, ACCOUNT, chat_id, AGENT)
        async with other.turn(sid("busy")):
            before = [e.kind for e in await opened.list_events(sid("busy"))]
            calls = count_calls(opened)
            busy, free, missing = await begin_at_once(opened, ["busy", "free", "missing"])
            assert [c for c in calls if "enter" in c] == ["_call_enter_many"]
            assert isinstance(busy, RunActive)
            assert free == []
            assert isinstance(missing, SessionNotFound)
            assert [e.kind for e in await opened.list_events(sid("busy"))] == before


@POSTGRES
async def test_a_begin_batch_the_database_refuses_begins_each_alone(backend: Backend) -> None:
    """With the function of many gone (an error of the call), each begin goes alone."""
    async with backend.store() as opened:
        assert isinstance(opened, PostgresStore)
        for chat_id in ("a", "b"):
            await opened.get_or_create_session(CHANNEL, ACCOUNT, chat_id, AGENT)
        await opened._db.call(
            lambda conn: conn.execute("DROP FUNCTION gateway_turn_enter_many(jsonb)")
        )
        calls = count_calls(opened)
        assert await begin_at_once(opened, ["a", "b"]) == [[], []]
        assert [c for c in calls if "enter" in c or "begin" in c] == [
            "_call_enter_many",
            "_begin",
            "_begin",
        ]


# --- SIGKILL in the middle of batched commits ---------------------------------------------

REPO = Path(__file__).resolve().parents[2]
TURNS = textwrap.dedent(
    """
    import asyncio, sys
    from webhook_bot_gateway.store import NewMessage, OutboxIn
    from webhook_bot_gateway.store.postgres import PostgresStore

    async def turn(store, n):
        sid = f"telegram-support-{n % 20}"
        async with store.turn(sid) as t:
            t.append(NewMessage("user", f"q{n}"))
            t.append(NewMessage("assistant", f"a{n}", agent="triage"))
            t.add_outbox(OutboxIn(sid, "telegram", "support", str(n % 20), {"text": f"a{n}"}))

    async def main():
        async with PostgresStore(sys.argv[1]) as store:
            for chat in range(20):
                await store.get_or_create_session("telegram", "support", str(chat), "triage")
            n = 0
            while True:
                await asyncio.gather(*(turn(store, n + i) for i in range(20)))
                n += 20
                print(n, flush=True)

    asyncio.run(main())
    """
)


@POSTGRES
async def test_sigkill_during_batched_turn_commits_leaves_whole_turns_only(
    backend: Backend,
) -> None:
    """A process committing turns of 20 sessions at once is killed: every turn is whole (its
    two messages, its outbox row and its turn_finished event, or none of them), and every turn
    it saw committed is there."""
    assert backend.url is not None
    command = [sys.executable, "-c", TURNS, backend.url]
    child = await asyncio.create_subprocess_exec(*command, stdout=PIPE, cwd=REPO)
    assert child.stdout is not None
    acknowledged = 0
    while acknowledged < 400:
        line = await asyncio.wait_for(child.stdout.readline(), WAIT)
        assert line, "the process stopped before it was killed"
        acknowledged = int(line)
    child.send_signal(signal.SIGKILL)
    await child.wait()
    async with backend.store() as opened:
        texts = [
            m.text
            for chat in range(20)
            for m in await opened.all_messages(f"telegram-support-{chat}")
        ]
        replies = [
            r.payload["text"]
            for chat in range(20)
            for r in await opened.list_outbox(f"telegram-support-{chat}")
        ]
        finished = [
            e
            for chat in range(20)
            for e in await opened.list_events(f"telegram-support-{chat}")
            if e.kind == "turn_finished"
        ]
    turns = {int(text[1:]) for text in texts}
    assert sorted(texts) == sorted(f"{kind}{n}" for n in turns for kind in "qa")  # whole turns
    assert sorted(replies) == sorted(f"a{n}" for n in turns)
    assert len(finished) == len(turns)
    assert set(range(acknowledged)) <= turns  # nothing a caller saw committed was lost
