"""PostgreSQL backend: the listeners of ``watch_events`` hear of every event row, from the writes'
own collector (``_db.Tx``), with no read of the trigger's ``gateway.touched`` before the COMMIT.

The trigger still records the sessions it saw; ``Database.verify_events`` makes every write
compare the two before committing. With it on, each path that logs events runs here once (a
path that inserted events without telling the collector would fail its write), and a write that
inserts an event row behind the helpers' back is shown to fail.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from tests.pg import fresh_schema
from tests.store.conftest import Backend, FakeClock
from tests.store.pipeline import ACCOUNT, AGENT, CHANNEL, delivery, inbox_of, message, sid
from webhook_bot_gateway.store import NewMessage, OutboxIn, ParsedDelivery, StatusIn, TurnActive
from webhook_bot_gateway.store._copy import copy_store
from webhook_bot_gateway.store.postgres import PostgresStore
from webhook_bot_gateway.store.postgres._db import Database, holds_lock, noted_events

POSTGRES = pytest.mark.parametrize("backend", ["postgres"], indirect=True)


@pytest.fixture(autouse=True)
def verify_events(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Database, "verify_events", True)


@pytest.fixture
async def pg(backend: Backend) -> AsyncIterator[tuple[PostgresStore, list[frozenset[str]]]]:
    """A store and what its event listener heard, one set per commit."""
    heard: list[frozenset[str]] = []
    async with backend.store() as opened:
        assert isinstance(opened, PostgresStore)
        opened.watch_events(heard.append)
        yield opened, heard


def _db(store: PostgresStore) -> Database:
    db = store._db
    assert isinstance(db, Database)
    return db


@POSTGRES
async def test_an_event_row_the_collector_did_not_hear_of_fails_the_write(
    pg: tuple[PostgresStore, list[frozenset[str]]],
) -> None:
    store, heard = pg
    session = await store.create_session(CHANNEL, ACCOUNT, "a", AGENT)

    async def behind_its_back(conn: asyncpg.Connection) -> None:
        await conn.execute(
            "INSERT INTO session_events (session_id, kind, created_at, seq)"
            " VALUES ($1, 'x', 0, 1000)",
            session.session_id,
        )

    with pytest.raises(AssertionError, match="event rows for"):
        await _db(store).write(behind_its_back)
    assert await store.list_events(session.session_id) == []  # rolled back
    assert heard == []

    async def noted_but_none(conn: asyncpg.Connection) -> None:
        noted_events([session.session_id])

    with pytest.raises(AssertionError, match="noted"):
        await _db(store).write(noted_but_none)


@POSTGRES
async def test_every_event_path_is_heard_by_the_listeners(
    pg: tuple[PostgresStore, list[frozenset[str]]], clock: FakeClock
) -> None:
    store, heard = pg
    a, b = sid("a"), sid("b")

    # intake: two new sessions, a message event each (their locks taken once)
    ids = await inbox_of(store, message("a", "k1"), message("b", "k2"))
    assert heard[-1] == {a, b}

    # a turn: begin (turn_started), commit (its events, the answer, turn_finished)
    async with store.turn(a, inbox_ids=ids[:1], recent_turns=2) as turn:
        turn.append(NewMessage("user", "hi"))
        turn.append(NewMessage("assistant", "hello", agent=AGENT))
        turn.record_event("custom", {"n": 1})
        turn.complete_inbox(ids[:1])
        turn.add_outbox(OutboxIn(a, CHANNEL, ACCOUNT, "a", {"text": "hello"}))
    assert heard[-2:] == [{a}, {a}]
    kinds = [event.kind for event in await store.list_events(a)]
    assert kinds == ["message", "turn_started", "custom", "message", "turn_finished"]
    assert [event.seq for event in await store.list_events(a)] == [1, 2, 3, 4, 5]

    # a turn that fails: turn_cancelled by the undo
    with pytest.raises(RuntimeError):
        async with store.turn(b):
            raise RuntimeError("boom")
    assert heard[-1] == {b}
    assert (await store.list_events(b))[-1].kind == "turn_cancelled"

    # outbox: claim, sent (status event), a delivery status through the intake, failed
    [row] = await store.list_outbox(a)
    assert await store.claim_outbox(row.id, 30)
    await store.outbox_sent(row.id, ["wamid.1"])
    assert heard[-1] == {a}
    status = StatusIn(CHANNEL, ACCOUNT, "wamid.1", "read", None)
    [ingested] = await store.ingest([delivery("s1")])
    assert ingested.delivery_id is not None
    await store.record_parsed(
        ingested.delivery_id, ParsedDelivery(statuses=(status,)), starting_agent=AGENT
    )
    assert heard[-1] == {a}
    failing = await store.enqueue_outbox(OutboxIn(b, CHANNEL, ACCOUNT, "b", {"text": "x"}))
    await store.outbox_failed(failing.id, error="no", state="dead")
    assert heard[-1] == {b}

    # the session API: record_event, set_agent, set_active_head
    await store.record_event(a, "handoff", {"to": "ops"})
    await store.set_agent(a, "other", reason="test")
    head = (await store.get_branch(a))[0]
    await store.set_active_head(a, head.id)
    assert heard[-3:] == [{a}, {a}, {a}]

    # attachments: a download that ends logs an event
    pending = await store.create_attachment(
        b, name="f", content_type="text/plain", source="whatsapp", state="pending"
    )
    await store.finish_attachment(pending.id, state="ready", size=3)
    assert heard[-1] == {b}

    # interrupt_running: a running session whose owner holds no lease
    scope = store.turn(b)
    await scope.__aenter__()
    await store.release_lease()
    clock.advance(10**6)
    other = Backend("postgres", clock, url=store._url)
    async with other.store() as second:
        assert isinstance(second, PostgresStore)
        heard_second: list[frozenset[str]] = []
        second.watch_events(heard_second.append)
        assert await second.interrupt_running() == [b]
        assert heard_second == [{b}]
    with pytest.raises(TurnActive):  # taken over: its commit writes nothing
        await scope.__aexit__(None, None, None)

    # every seq is the session's next one, with no gap
    for session_id in (a, b):
        seqs = [event.seq for event in await store.list_events(session_id)]
        assert seqs == list(range(1, len(seqs) + 1))
    assert not holds_lock(a)  # nothing is left of the transactions' state


@POSTGRES
async def test_copied_events_are_heard(pg: tuple[PostgresStore, list[frozenset[str]]]) -> None:
    store, _ = pg
    a = sid("a")
    await inbox_of(store, message("a", "k1"))
    async with fresh_schema() as url, PostgresStore(url) as target:
        heard: list[frozenset[str]] = []
        target.watch_events(heard.append)
        await copy_store(store, target)  # type: ignore[arg-type]
        assert {a} in heard
        assert [event.kind for event in await target.list_events(a)] == ["message"]
