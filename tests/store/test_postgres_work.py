"""PostgreSQL backend only: several stores (processes) sharing one database.

``watch_work`` hears the inbox and outbox rows other stores commit (LISTEN/NOTIFY) and not the
store's own; two stores racing for an outbox row or for the sessions of a dead process each get
it once; a turn whose store lost its lease cannot commit over the store that took it over.

The watch tests run in a database of their own: notification channels are per database, and
other test runs on the server (other schemas of the shared test database) would add wake-ups
that no assertion here could tell from the store's own.
"""

from __future__ import annotations

import asyncio
import logging
import traceback
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import asyncpg
import pytest

from tests.pg import server_url
from tests.store.conftest import Backend, FakeClock, Raw
from tests.store.pipeline import ACCOUNT, AGENT, CHANNEL, inbox_of, message, sid
from webhook_bot_gateway.store import NewMessage, OutboxIn, RunActive, StoreError, TurnActive
from webhook_bot_gateway.store.postgres import PostgresStore
from webhook_bot_gateway.store.postgres._db import StoreUnavailable
from webhook_bot_gateway.store.postgres._turn import TurnScope

POSTGRES = pytest.mark.parametrize("backend", ["postgres"], indirect=True)
WAIT = 10.0  # seconds a notification may take before the test fails


def outbox_in(session_id: str, chat_id: str, text: str = "reply") -> OutboxIn:
    return OutboxIn(session_id, CHANNEL, ACCOUNT, chat_id, {"chat_id": chat_id, "text": text})


def chat() -> str:
    """A chat id of its own (so its session id is unique on the server, too)."""
    return uuid.uuid4().hex[:12]


# --- a database of the test's own, for the notifications -----------------------------------


def _database_url(base: str, name: str) -> str:
    head, sep, query = base.partition("?")
    return head.rsplit("/", 1)[0] + "/" + name + sep + query


@pytest.fixture
async def own_db() -> AsyncIterator[str]:
    """The url of a new, empty database, dropped afterwards."""
    base = server_url()
    name = f"t_work_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(base)
    try:
        await admin.execute(f"CREATE DATABASE {name}")
        try:
            yield _database_url(base, name)
        finally:
            await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    finally:
        await admin.close()


class Heard:
    """What ``watch_work`` called back, with events to wait for."""

    def __init__(self) -> None:
        self.inbox: list[frozenset[str]] = []
        self.outbox = 0
        self._inbox_event = asyncio.Event()
        self._outbox_event = asyncio.Event()

    def on_inbox(self, sessions: frozenset[str]) -> None:
        self.inbox.append(sessions)
        self._inbox_event.set()

    def on_outbox(self) -> None:
        self.outbox += 1
        self._outbox_event.set()

    async def inbox_row(self) -> None:
        await asyncio.wait_for(self._inbox_event.wait(), WAIT)
        self._inbox_event.clear()

    async def outbox_row(self) -> None:
        await asyncio.wait_for(self._outbox_event.wait(), WAIT)
        self._outbox_event.clear()


async def test_watch_work_hears_the_rows_of_other_stores_only(own_db: str) -> None:
    heard = Heard()
    async with PostgresStore(own_db) as mine, PostgresStore(own_db) as other:
        assert mine.owner != other.owner
        async with mine.watch_work(heard.on_inbox, heard.on_outbox):
            # Its own rows first: if they were heard, they would be heard before the others'
            # (a listener gets the notifications in commit order).
            own_chat = chat()
            await inbox_of(mine, message(own_chat, "own-1"))
            await mine.enqueue_outbox(outbox_in(sid(own_chat), own_chat))
            # Two rows of one session in one transaction: one notification, one call.
            other_chat = chat()
            await inbox_of(other, message(other_chat, "other-1"), message(other_chat, "other-2"))
            await heard.inbox_row()
            await other.enqueue_outbox(outbox_in(sid(other_chat), other_chat))
            await heard.outbox_row()
            assert heard.inbox == [frozenset({sid(other_chat)})]
            assert heard.outbox == 1
            # A row written outside any store (no origin) is someone else's too.
            admin = await asyncpg.connect(own_db)
            try:
                await admin.execute(
                    "INSERT INTO outbox (session_id, channel, account, chat_id, payload,"
                    " next_attempt_at, created_at) VALUES ($1, $2, $3, $4, '{}', 0, 0)",
                    sid(other_chat),
                    CHANNEL,
                    ACCOUNT,
                    other_chat,
                )
            finally:
                await admin.close()
            await heard.outbox_row()
            assert heard.outbox == 2
        assert heard.inbox == [frozenset({sid(other_chat)})]


async def test_watch_work_hears_nothing_rolled_back(own_db: str) -> None:
    """A notification goes out at the COMMIT: an aborted write tells nobody."""
    heard = Heard()
    async with PostgresStore(own_db) as mine, PostgresStore(own_db) as other:
        session = await other.create_session(CHANNEL, ACCOUNT, chat(), AGENT)

        class Boom(Exception):
            pass

        async def failing_turn() -> None:
            async with other.turn(session.session_id) as turn:
                turn.add_outbox(outbox_in(session.session_id, session.chat_id, "never"))
                raise Boom

        async with mine.watch_work(heard.on_inbox, heard.on_outbox):
            with pytest.raises(Boom):
                await failing_turn()
            async with other.turn(session.session_id) as turn:
                turn.add_outbox(outbox_in(session.session_id, session.chat_id, "sent"))
            await heard.outbox_row()
            assert heard.outbox == 1
            assert [row.payload["text"] for row in await mine.list_outbox(session.session_id)] == [
                "sent"
            ]


async def test_pool_connections_keep_their_origin(own_db: str) -> None:
    """Every pooled connection names the store, after any number of uses (the pool's
    ``RESET ALL`` at each release must not clear it: the triggers read it at each insert)."""
    async with PostgresStore(own_db, pool_size=2) as store:

        async def origin(conn: asyncpg.Connection) -> Any:
            return await conn.fetchval("SELECT current_setting('gateway.origin', true)")

        found = [await store._db.call(origin) for _ in range(6)]
        found += await asyncio.gather(*(store._db.write(origin) for _ in range(6)))
    assert found == [store.owner] * 12


def _everything_shown(exc: BaseException) -> str:
    return "\n".join([str(exc), repr(exc), *traceback.format_exception(exc)])


async def test_watch_work_that_cannot_connect_names_no_url(own_db: str) -> None:
    async with PostgresStore(own_db) as store:
        bad = "postgresql://u:s3cret@127.0.0.1:1/db"  # nothing listens on port 1
        store._url = bad
        with pytest.raises(StoreUnavailable) as caught:
            async with store.watch_work(lambda s: None, lambda: None):
                pytest.fail("entered without a connection")
        shown = _everything_shown(caught.value)
        assert "s3cret" not in shown
        assert bad not in shown
        assert caught.value.code == "store_unavailable"


async def test_watch_work_of_a_closed_store_is_refused(own_db: str) -> None:
    store = PostgresStore(own_db)
    with pytest.raises(StoreError, match="not open"):
        async with store.watch_work(lambda s: None, lambda: None):
            pass


class _Warned(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []
        self.event = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self.event.set()


async def test_watch_work_that_loses_its_connection_warns_and_exits_cleanly(
    own_db: str,
) -> None:
    warned = _Warned()
    logger = logging.getLogger("store.postgres")
    logger.addHandler(warned)
    admin = await asyncpg.connect(own_db)
    try:
        async with PostgresStore(own_db) as store:
            async with store.watch_work(lambda s: None, lambda: None):
                pids = await admin.fetch(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                    " AND query LIKE 'LISTEN %'"
                )
                assert len(pids) == 1
                await admin.execute("SELECT pg_terminate_backend($1)", pids[0][0])
                await asyncio.wait_for(warned.event.wait(), WAIT)
            await store.ping()  # the pool is not touched
    finally:
        logger.removeHandler(warned)
        await admin.close()
    [record] = warned.records
    shown = record.getMessage()
    assert "lost" in shown
    assert own_db not in shown
    assert "127.0.0.1" not in shown


class _Listening(logging.Handler):
    """The store's INFO line that says it listens again."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.again = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("listening again"):
            self.again.set()


async def test_watch_work_listens_again_after_losing_its_connection(own_db: str) -> None:
    """A database restart or a failover cuts the listening connection too. It was left lost:
    other processes' rows were found by the polls only, and the cancels they relayed to this
    process's turns (which travel on that connection) went unanswered, 503, until a restart."""
    heard = Heard()
    listening = _Listening()
    logger = logging.getLogger("store.postgres")
    logger.addHandler(listening)
    level = logger.level
    logger.setLevel(logging.INFO)
    admin = await asyncpg.connect(own_db)
    try:
        async with (
            PostgresStore(own_db) as mine,
            PostgresStore(own_db) as other,
            mine.watch_work(heard.on_inbox, heard.on_outbox),
        ):
            [pid] = await admin.fetch(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                " AND query LIKE 'LISTEN %'"
            )
            await admin.execute("SELECT pg_terminate_backend($1)", pid[0])
            await asyncio.wait_for(listening.again.wait(), WAIT)
            other_chat = chat()
            await inbox_of(other, message(other_chat, "after-the-cut"))
            await heard.inbox_row()
            assert heard.inbox == [frozenset({sid(other_chat)})]
    finally:
        logger.removeHandler(listening)
        logger.setLevel(level)
        await admin.close()


# --- races between stores on one schema ------------------------------------------------------


def _tagged(url: str, application: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}application_name={application}"


async def _race(
    url: str, hold: str, calls: list[Callable[[], Coroutine[Any, Any, Any]]], application: str
) -> list[Any]:
    """Run ``calls`` at once: a transaction of the test's own runs ``hold`` (taking a lock they
    need), they start and all wait for it, then it ends and they go on together."""
    holder = await asyncpg.connect(url)
    tasks: list[asyncio.Task[Any]] = []
    try:
        transaction = holder.transaction()
        await transaction.start()
        await holder.execute(hold)
        tasks = [asyncio.create_task(call()) for call in calls]
        deadline = asyncio.get_running_loop().time() + WAIT
        while True:  # each waits on the lock (queries only, no sleep)
            waiting = await holder.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1"
                " AND wait_event_type = 'Lock'",
                application,
            )
            if waiting == len(calls):
                break
            assert asyncio.get_running_loop().time() < deadline, "the calls never met the lock"
            assert not any(task.done() for task in tasks), "a call did not wait for the lock"
        await transaction.commit()
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()
        await holder.close()


@POSTGRES
async def test_stores_racing_to_claim_an_outbox_row_get_it_once(backend: Backend) -> None:
    assert backend.url is not None
    application = f"gw-test-{uuid.uuid4().hex[:8]}"
    url = _tagged(backend.url, application)
    clock = backend.clock
    async with PostgresStore(url, clock=clock) as a, PostgresStore(url, clock=clock) as b:
        for store in (a, b):
            await store.renew_lease(3600)  # claims of live processes
        chat_id = chat()
        session = await a.create_session(CHANNEL, ACCOUNT, chat_id, AGENT)
        row = await a.enqueue_outbox(outbox_in(session.session_id, chat_id))
        results = await _race(
            backend.url,
            f"SELECT 1 FROM outbox WHERE id = {row.id} FOR UPDATE",
            [lambda: a.claim_outbox(row.id, 30), lambda: b.claim_outbox(row.id, 30)],
            application,
        )
        assert sorted(results) == [False, True]
        winner, loser = (a, b) if results[0] else (b, a)
        now = backend.clock()
        assert [r.id for r in await winner.due_outbox(now)] == [row.id]
        assert await loser.due_outbox(now) == []
        assert await loser.claim_outbox(row.id, 30) is False
        assert await winner.claim_outbox(row.id, 30) is True  # its own claim, renewed


@POSTGRES
async def test_many_claims_at_once_give_each_row_to_one_store(backend: Backend) -> None:
    """No lock held by the test: the stores' own UPDATEs meet on the rows."""
    assert backend.url is not None
    stores = [PostgresStore(backend.url, clock=backend.clock) for _ in range(3)]
    for store in stores:
        await store.__aenter__()
        await store.renew_lease(3600)  # claims of live processes
    try:
        ids = []
        for _ in range(10):
            chat_id = chat()
            session = await stores[0].create_session(CHANNEL, ACCOUNT, chat_id, AGENT)
            ids.append((await stores[0].enqueue_outbox(outbox_in(session.session_id, chat_id))).id)
        results = await asyncio.gather(
            *(store.claim_outbox(row_id, 30) for row_id in ids for store in stores)
        )
        per_row = [results[n * len(stores) : (n + 1) * len(stores)] for n in range(len(ids))]
        assert all(sum(wins) == 1 for wins in per_row)
    finally:
        for store in stores:
            await store.aclose()


async def _running_turn(store: PostgresStore, session_id: str) -> TurnScope:
    """A turn entered and never exited (its process dies, or runs on)."""
    scope = store.turn(session_id)
    await scope.__aenter__()
    return scope


@POSTGRES
async def test_stores_interrupting_at_once_take_each_dead_session_once(
    backend: Backend, clock: FakeClock
) -> None:
    assert backend.url is not None
    application = f"gw-test-{uuid.uuid4().hex[:8]}"
    url = _tagged(backend.url, application)
    dead_ids = []
    async with PostgresStore(backend.url, clock=clock) as dead:
        await dead.renew_lease(5)
        for _ in range(12):
            session = await dead.create_session(CHANNEL, ACCOUNT, chat(), AGENT)
            await _running_turn(dead, session.session_id)
            dead_ids.append(session.session_id)
        # The process dies: its lease runs out.
    clock.advance(6)
    async with PostgresStore(url, clock=clock) as a, PostgresStore(url, clock=clock) as b:
        await a.renew_lease(60)
        await b.renew_lease(60)
        live = await b.create_session(CHANNEL, ACCOUNT, chat(), AGENT)
        live_turn = await _running_turn(b, live.session_id)
        results = await _race(
            backend.url,
            "LOCK TABLE leases IN ACCESS EXCLUSIVE MODE",
            [a.interrupt_running, b.interrupt_running],
            application,
        )
        taken = results[0] + results[1]
        assert sorted(taken) == sorted(dead_ids)  # each once, none of the live store's
        assert all(r == sorted(r) for r in results)
        for session_id in dead_ids:
            found = await a.get_session(session_id)
            assert found is not None
            assert found.status == "interrupted"
            events = [e.kind for e in await a.list_events(session_id)]
            assert events == ["turn_started", "turn_cancelled"]
        assert (await a.get_session(live.session_id)).status == "running"  # type: ignore[union-attr]
        assert await a.interrupt_running() == []
        await live_turn.__aexit__(None, None, None)
        assert (await a.get_session(live.session_id)).status == "idle"  # type: ignore[union-attr]


@POSTGRES
async def test_interrupt_running_deletes_leases_run_out_a_day_ago(
    backend: Backend, clock: FakeClock, raw: Raw
) -> None:
    assert backend.url is not None
    url = backend.url
    async with (
        PostgresStore(url, clock=clock) as gone,
        PostgresStore(url, clock=clock) as recent,
        PostgresStore(url, clock=clock) as live,
    ):
        await gone.renew_lease(10)
        clock.advance(86_400)
        await recent.renew_lease(5)
        clock.advance(20)  # gone's ran out a day and 10 s ago, recent's 15 s ago
        await live.renew_lease(60)
        assert await live.interrupt_running() == []
        owners = {row[0] for row in await raw.rows("SELECT owner FROM leases")}
        assert owners == {recent.owner, live.owner}
        await live.release_lease()
        assert {row[0] for row in await raw.rows("SELECT owner FROM leases")} == {recent.owner}


# --- a turn taken over -----------------------------------------------------------------------


@POSTGRES
async def test_turn_of_a_store_whose_lease_ran_out_cannot_commit_over_the_new_owner(
    backend: Backend, clock: FakeClock
) -> None:
    assert backend.url is not None
    url = backend.url
    async with PostgresStore(url, clock=clock) as a, PostgresStore(url, clock=clock) as b:
        session = await a.create_session(CHANNEL, ACCOUNT, chat(), AGENT)
        sid_ = session.session_id
        await a.renew_lease(10)
        scope_a = a.turn(sid_)
        turn_a = await scope_a.__aenter__()
        turn_a.append(NewMessage("assistant", "from a"))
        await b.renew_lease(60)
        assert await b.interrupt_running() == []  # a is alive
        with pytest.raises(RunActive):
            async with b.turn(sid_):
                pass
        clock.advance(11)  # a stalls past its lease
        await b.renew_lease(60)
        assert await b.interrupt_running() == [sid_]
        async with b.turn(sid_) as turn_b:
            turn_b.append(NewMessage("assistant", "from b"))
            with pytest.raises(TurnActive, match="taken over") as caught:
                await scope_a.__aexit__(None, None, None)  # a's commit, during b's turn
            assert caught.value.code == "turn_active"
            found = await b.get_session(sid_)
            assert found is not None
            assert found.status == "running"  # b's turn is untouched
        assert [m.text for m in await b.get_branch(sid_)] == ["from b"]
        found = await b.get_session(sid_)
        assert found is not None
        assert found.status == "idle"
        kinds = [e.kind for e in await b.list_events(sid_)]
        assert kinds == [
            "turn_started",  # a
            "turn_cancelled",  # b took it over
            "turn_started",  # b
            "message",
            "turn_finished",  # b, once
        ]
        # a, alive again, runs turns as before.
        await a.renew_lease(10)
        async with a.turn(sid_) as turn:
            turn.append(NewMessage("assistant", "a again"))
        assert [m.text for m in await a.get_branch(sid_)] == ["from b", "a again"]


@POSTGRES
async def test_turn_taken_over_rolls_back_without_touching_the_new_owner(
    backend: Backend, clock: FakeClock
) -> None:
    class Boom(Exception):
        pass

    assert backend.url is not None
    url = backend.url
    async with PostgresStore(url, clock=clock) as a, PostgresStore(url, clock=clock) as b:
        session = await a.create_session(CHANNEL, ACCOUNT, chat(), AGENT)
        sid_ = session.session_id
        await a.renew_lease(10)
        scope_a = a.turn(sid_)
        await scope_a.__aenter__()
        clock.advance(11)
        await b.renew_lease(60)
        assert await b.interrupt_running() == [sid_]
        # Taken over, not yet run again: a's failure leaves it interrupted.
        failure = Boom()
        await scope_a.__aexit__(Boom, failure, None)  # the body raised: a's rollback
        found = await b.get_session(sid_)
        assert found is not None
        assert found.status == "interrupted"
        assert [e.kind for e in await b.list_events(sid_)] == ["turn_started", "turn_cancelled"]
        # And a commit of a's next turn is its own again.
        async with a.turn(sid_):
            pass
        found = await b.get_session(sid_)
        assert found is not None
        assert found.status == "idle"


async def test_events_notify_nobody(own_db: str) -> None:
    """Event rows send no notification: nobody listens for them, and each NOTIFY would cost
    every committing turn the server-wide notification queue."""
    listener = await asyncpg.connect(own_db)
    heard: list[str] = []
    await listener.add_listener("gateway_events", lambda *args: heard.append(args[3]))
    try:
        async with PostgresStore(own_db) as store:
            session = await store.create_session(CHANNEL, ACCOUNT, chat(), AGENT)
            await store.record_event(session.session_id, "note", {})
            await listener.execute("SELECT 1")  # a round trip: pending notifications arrive
        assert heard == []
    finally:
        await listener.close()
