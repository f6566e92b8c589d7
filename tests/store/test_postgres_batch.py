"""PostgreSQL backend only: the sends recorded while one is written share the next call.

``Batcher`` is tested alone on its own event loop (no database); the store's use of it by the
calls it makes to PostgreSQL, counted at ``Database.write_one``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import pytest

from tests.store.conftest import Backend
from tests.store.pipeline import ACCOUNT, AGENT, CHANNEL, sid
from webhook_bot_gateway.store import OutboxIn, OutboxItem, StoreError
from webhook_bot_gateway.store.postgres import PostgresStore
from webhook_bot_gateway.store.postgres._batch import Batcher

POSTGRES = pytest.mark.parametrize("backend", ["postgres"], indirect=True)


async def queued(store: PostgresStore, chat_id: str, count: int) -> list[OutboxItem]:
    await store.get_or_create_session(CHANNEL, ACCOUNT, chat_id, AGENT)
    reply = OutboxIn(sid(chat_id), CHANNEL, ACCOUNT, chat_id, {"text": "hi"})
    return [await store.enqueue_outbox(reply) for _ in range(count)]


def count_calls(store: PostgresStore) -> list[str]:
    """The statement functions of every ``write_one`` the store makes from now on."""
    database = store._db
    original = database.write_one
    names: list[str] = []

    async def counted(fn: Callable[..., Awaitable[Any]]) -> Any:
        names.append(fn.func.__name__ if isinstance(fn, partial) else repr(fn))
        return await original(fn)

    database.write_one = counted  # type: ignore[method-assign]
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


# --- Batcher alone --------------------------------------------------------------------------


class Recorder:
    """``run_many`` that records each batch and holds it until ``release`` is set."""

    def __init__(self, fail: set[str] | None = None) -> None:
        self.batches: list[list[str]] = []
        self.release = asyncio.Event()
        self.fail = fail or set()

    async def __call__(self, items: list[str]) -> list[BaseException | None]:
        self.batches.append(items)
        await self.release.wait()
        return [StoreError(f"refused {i}") if i in self.fail else None for i in items]


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
    assert [str(o) if o else None for o in outcomes] == [None, None, "refused c", None]


async def test_a_batch_holds_at_most_max_size() -> None:
    run = Recorder()
    run.release.set()
    batcher = Batcher(run, max_size=2)
    await asyncio.gather(*(batcher.submit(i) for i in "abcde"))
    assert run.batches == [["a", "b"], ["c", "d"], ["e"]]


async def test_a_batch_that_raises_fails_each_of_its_callers() -> None:
    async def broken(items: list[str]) -> list[BaseException | None]:
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
    assert await kept is None
    assert gone.cancelled()
    await batcher.drained()
    assert run.batches == [["a", "b"]]  # its write still ran, as one already sent would
