"""The store against a plain model, under random sequences of pipeline steps (issue 12).

A Hypothesis state machine drives a real store (a SQLite file, and PostgreSQL) through the calls
the gateway makes, on a few chats: deliver (ingest, then the intake's ``record_parsed_many``),
duplicate deliveries, turns that commit, fail, are cancelled (shutdown) or cancelled by the user,
the admin erase of a session (also while its turn runs), a clean restart, and crashes: between
transactions, with a turn open, and inside the write of each step (_model_stores.py). After a
crash or a restart the next store recovers as ``gateway serve`` does.

After every step the store must show exactly what the model holds (_model.py): each chat's
session and status, its history as committed turns, its pending rows with their tries, its dead
rows, its replies; no stored delivery left unparsed; no row without its session. So an
acknowledged message is pending, dead, erased, or in exactly one committed turn, never two; and a
deleted session never comes back: its rows are gone, no turn of it can begin, and a redelivery
of one of its messages is a duplicate that records nothing (``delete_session`` leaves the dedup
guard's keys, which live for the TTL; a new message of the chat starts a new, empty session).
Teardown drains every pending row through committed turns and checks that each acknowledged
message of a live session is then in exactly one committed turn (or dead).

Not modelled: the dispatcher's apology and handoff after the last try (a dead row here is only
the store's ``fail_inbox(dead=True)``), and an erase between an ingest and its intake (the intake
runs right after each ingest here, as its wake-up makes it do in the gateway).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tests.pg import fresh_schema_sync
from tests.store.conftest import FakeClock
from tests.store.pipeline import ACCOUNT, AGENT, CHANNEL, message, sid
from webhook_bot_gateway.store import (
    Delivery,
    DeliveryIn,
    InboxItem,
    NewMessage,
    OutboxIn,
    ParsedDelivery,
    SessionDeletedError,
    SessionNotFound,
    Store,
    StoreError,
)

from ._model import MAX_ATTEMPTS, ChatView, Model, TurnView, View, answered_once
from ._model_stores import Process, new_process
from .scale import pick

T = TypeVar("T")

CHATS = ("c0", "c1", "c2")
RECENT_TURNS = 40  # as the runner opens its turns (agents.max_turns)
RETRY_BASE_SECONDS = 2.0
TURN_CRASH_POINTS = ("body", "begin", "commit", "fail")

SETTINGS = settings(
    max_examples=pick(15, 300),
    stateful_step_count=pick(25, 50),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class AgentFailed(Exception):
    """The turn's agents raised (a model server down, say)."""


class ProcessDied(Exception):
    """Raised in a turn's body right after the process crashed under it."""


# the gateway's calls, as the intake, the dispatcher and the runner make them


def delivery(messages: list[tuple[str, str]]) -> DeliveryIn:
    """One webhook body carrying ``messages`` (chat, key); its dedup keys are theirs."""
    body = json.dumps({"messages": [{"chat": c, "key": k} for c, k in messages]})
    return DeliveryIn(CHANNEL, None, body.encode(), tuple(k for _, k in messages))


def parsed(stored: Delivery) -> ParsedDelivery:
    """The intake's parse: only the messages whose keys this delivery claimed first."""
    messages = json.loads(stored.body)["messages"]
    return ParsedDelivery(
        inbox=tuple(message(m["chat"], m["key"]) for m in messages if m["key"] in stored.keys)
    )


async def run_intake(store: Store) -> None:
    """One pass of the intake: every stored delivery becomes inbox rows, in one transaction."""
    stored = await store.unparsed_deliveries()
    if stored:
        items = [(d.id, parsed(d)) for d in stored]
        await store.record_parsed_many(items, starting_agent=AGENT)


async def take_turn(
    store: Store,
    rows: list[InboxItem],
    *,
    answered: bool = True,
    body: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """The runner's turn over ``rows`` with the dispatcher's ``before_commit``: the user's
    message, the answer and its outbox row, the rows done, all in the one commit. A turn not
    ``answered`` is one the user cancelled: only the message commits."""
    chat, session_id = rows[0].event["chat_id"], rows[0].session_id
    ids = [row.id for row in rows]
    keys = [row.dedup_key for row in rows]
    async with store.turn(session_id, recent_turns=RECENT_TURNS, inbox_ids=ids) as turn:
        turn.append(NewMessage("user", " ".join(keys), data={"keys": keys}))
        if body is not None:
            await body()
        if answered:
            turn.append(NewMessage("assistant", "answered", agent=AGENT, data={"answers": keys}))
            turn.add_outbox(OutboxIn(session_id, CHANNEL, ACCOUNT, chat, {"answers": keys}))
        else:
            turn.discard()
            turn.append(NewMessage("user", " ".join(keys), data={"keys": keys, "cancelled": True}))
        turn.complete_inbox(ids)


async def open_turn(store: Store, session_id: str) -> None:
    """Begin and commit an empty turn (what a lane does first)."""
    async with store.turn(session_id, recent_turns=RECENT_TURNS):
        pass


async def fail_turn(store: Store, clock: FakeClock, rows: list[InboxItem]) -> None:
    """A turn whose agents raise, then the dispatcher's record of the try (dead at the last)."""
    with pytest.raises(AgentFailed):
        await take_turn(store, rows, body=raise_agent_failure)
    attempts = max(row.attempts for row in rows) + 1
    await store.fail_inbox(
        [row.id for row in rows],
        "AgentFailed: model server down",
        next_attempt_at=clock() + RETRY_BASE_SECONDS * 2 ** (attempts - 1),
        dead=attempts >= MAX_ATTEMPTS,
    )


async def raise_agent_failure() -> None:
    raise AgentFailed("model server down")


async def cancel_turn(store: Store, rows: list[InboxItem]) -> None:
    """A turn cancelled in its body (a shutdown past its grace): it must roll back whole."""
    entered = asyncio.Event()

    async def body() -> None:
        entered.set()
        await asyncio.Event().wait()  # an agent that never answers

    task = asyncio.ensure_future(take_turn(store, rows, body=body))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


# reading the store back


async def observe(process: Process) -> View:
    """What the store holds for every chat, through the protocol and its raw rows."""
    store, raw = process.store, process.raw
    inbox = await raw.rows("SELECT session_id, dedup_key, state FROM inbox ORDER BY id")
    orphans = 0
    for table in ("messages", "session_events", "inbox", "outbox", "attachments"):
        orphans += int(
            await raw.value(
                f"SELECT count(*) FROM {table}"
                " WHERE session_id NOT IN (SELECT session_id FROM sessions)"
            )
        )
    chats = {chat: await observe_chat(store, chat, inbox) for chat in CHATS}
    unparsed = len(await store.unparsed_deliveries())
    return View(chats, orphans=orphans, unparsed=unparsed)


async def observe_chat(store: Store, chat: str, inbox: list[tuple[Any, ...]]) -> ChatView:
    session_id = sid(chat)
    session = await store.get_session(session_id)
    if session is None:
        return ChatView()
    assert session.status in ("idle", "interrupted"), f"{chat} is {session.status}"
    return ChatView(
        exists=True,
        status=session.status,
        turns=await turns_of(store, session_id),
        pending=[(row.dedup_key, row.attempts) for row in await store.pending_inbox(session_id)],
        dead=[key for owner, key, state in inbox if owner == session_id and state == "dead"],
        outbox=[tuple(row.payload["answers"]) for row in await store.list_outbox(session_id)],
    )


async def turns_of(store: Store, session_id: str) -> list[TurnView]:
    """The committed turns of the history: a user message per turn, then its answer if any."""
    turns: list[TurnView] = []
    for msg in await store.get_branch(session_id):
        if msg.role == "user":
            turns.append(TurnView(tuple(msg.data["keys"]), answered=False))
        else:
            assert turns, "an answer before any user message"
            assert msg.data["answers"] == list(turns[-1].keys), "an answer of another turn"
            turns[-1] = TurnView(turns[-1].keys, answered=True)
    return turns


def assert_same(seen: View, expected: View) -> None:
    """The store shows what the model holds; a difference names the chat and both sides."""
    for chat, want in expected.chats.items():
        got = seen.chats[chat]
        assert got == want, f"chat {chat}:\n  store {got}\n  model {want}"
    assert (seen.orphans, seen.unparsed) == (0, 0), "rows without a session, or unparsed"


class StoreMachine(RuleBasedStateMachine):
    """Pipeline steps on a real store, checked against ``Model`` after each one."""

    tally: Counter[str]  # examples, steps and crash points, over the whole test
    kind = "file"  # or "postgres"
    where = ""  # the folder of its SQLite files, or the PostgreSQL url (one schema)

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.clock = FakeClock()
        self.process = new_process(self.kind, self.clock, self.where)
        self.tally["examples"] += 1
        self.model = Model(CHATS)
        self.run(self.restarted(set()))

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    @property
    def store(self) -> Store:
        return self.process.store

    async def restarted(self, interrupted: set[str]) -> None:
        """The next process starts: it marks ``interrupted`` exactly the chats whose turn was
        under way, then its intake parses what the last one stored and did not parse."""
        taken = await self.process.start()
        assert sorted(taken) == sorted(sid(chat) for chat in interrupted)
        for chat in interrupted:
            self.model.interrupt(chat)
        await run_intake(self.store)

    def pending_chat(self, index: int) -> str:
        chats = [chat for chat, view in self.model.chats.items() if view.pending]
        return chats[index % len(chats)]

    def has_pending(self) -> bool:
        return any(view.pending for view in self.model.chats.values())

    async def batch(self, chat: str) -> list[InboxItem]:
        """The dispatcher's read: every pending row of the chat, in order ("merge")."""
        rows = await self.store.pending_inbox(sid(chat))
        assert [row.dedup_key for row in rows] == [k for k, _ in self.model.chats[chat].pending]
        return rows

    # deliveries

    @rule(
        chats=st.lists(st.sampled_from(CHATS), min_size=1, max_size=2),
        repeat=st.none() | st.integers(0, 10**6),
        resend_lost=st.booleans(),
    )
    def deliver(self, chats: list[str], repeat: int | None, resend_lost: bool) -> None:
        """New messages, maybe with one already acknowledged and one whose ingest crashed."""
        fresh = [(chat, self.model.new_key(chat)) for chat in chats]
        if resend_lost and self.model.lost:
            key, chat = min(self.model.lost.items())
            fresh.append((chat, key))
        old: list[tuple[str, str]] = []
        if repeat is not None and self.model.acked:
            key, chat = list(self.model.acked.items())[repeat % len(self.model.acked)]
            old.append((chat, key))
        [result] = self.run(self.store.ingest([delivery(fresh + old)]))
        assert result.new_keys == {key for _, key in fresh}
        assert result.delivery_id is not None
        self.run(run_intake(self.store))
        for chat, key in fresh:
            self.model.acknowledge(key, chat)

    @precondition(lambda self: self.model.acked)
    @rule(index=st.integers(0, 10**6))
    def duplicate(self, index: int) -> None:
        """A platform's retry of an acknowledged message: refused, nothing stored."""
        key, chat = list(self.model.acked.items())[index % len(self.model.acked)]
        [result] = self.run(self.store.ingest([delivery([(chat, key)])]))
        assert (result.delivery_id, result.new_keys) == (None, frozenset())

    # turns

    @precondition(has_pending)
    @rule(index=st.integers(0, 10**6), answered=st.booleans())
    def commit_turn(self, index: int, answered: bool) -> None:
        chat = self.pending_chat(index)
        self.run(take_turn(self.store, self.run(self.batch(chat)), answered=answered))
        self.model.commit(chat, answered=answered)

    @precondition(has_pending)
    @rule(index=st.integers(0, 10**6))
    def failed_turn(self, index: int) -> None:
        chat = self.pending_chat(index)
        self.run(fail_turn(self.store, self.clock, self.run(self.batch(chat))))
        self.model.fail(chat)

    @precondition(has_pending)
    @rule(index=st.integers(0, 10**6))
    def cancelled_turn(self, index: int) -> None:
        chat = self.pending_chat(index)
        self.run(cancel_turn(self.store, self.run(self.batch(chat))))

    # erasure

    @rule(chat=st.sampled_from(CHATS))
    def delete_session(self, chat: str) -> None:
        """The admin erase; a lane that still has the session's id then gets no turn."""
        existed = self.run(self.store.delete_session(sid(chat)))
        assert existed == self.model.chats[chat].exists
        self.model.delete(chat)
        with pytest.raises(SessionNotFound):
            self.run(open_turn(self.store, sid(chat)))

    @precondition(has_pending)
    @rule(index=st.integers(0, 10**6))
    def delete_during_turn(self, index: int) -> None:
        """The admin erases the session while its turn runs: the commit writes nothing."""
        chat = self.pending_chat(index)

        async def erase() -> None:
            assert await self.store.delete_session(sid(chat))

        rows = self.run(self.batch(chat))
        with pytest.raises(SessionDeletedError):
            self.run(take_turn(self.store, rows, body=erase))
        self.model.delete(chat)

    # restarts and crashes

    @rule(crash=st.booleans())
    def restart(self, crash: bool) -> None:
        """A clean stop and start, or a crash between two transactions and the next start."""
        self.run(self.process.crash() if crash else self.process.stop())
        self.run(self.restarted(set()))

    @rule(data=st.data())
    def crash_inside(self, data: st.DataObject) -> None:
        """A crash inside the write of one step (the points open to the state), then a start."""
        # The points of a turn first: Hypothesis draws the first entries more often.
        points = list(TURN_CRASH_POINTS) if self.has_pending() else []
        if any(view.exists for view in self.model.chats.values()):
            points.append("delete")
        points += ["intake", "ingest"]
        point = data.draw(st.sampled_from(points), label="point")
        self.tally[f"crash in {point}"] += 1
        if point in ("ingest", "intake"):
            self.run(self.crash_in_delivery(data.draw(st.sampled_from(CHATS), label="chat"), point))
        elif point == "delete":
            chats = [chat for chat, view in self.model.chats.items() if view.exists]
            self.run(self.crash_in_delete(data.draw(st.sampled_from(chats), label="chat")))
        else:
            chats = [chat for chat, view in self.model.chats.items() if view.pending]
            self.run(self.crash_in_turn(data.draw(st.sampled_from(chats), label="chat"), point))

    async def crash_in_delivery(self, chat: str, point: str) -> None:
        """In the ingest: not acknowledged, so the platform will send it again (and it must be
        new then). In the intake: acknowledged; the next start parses the stored delivery."""
        key = self.model.new_key(chat)
        ingest = partial(self.store.ingest, [delivery([(chat, key)])])
        if point == "ingest":
            await self.process.crash_during(point, ingest)
            self.model.lost[key] = chat
        else:
            [result] = await ingest()
            assert result.new_keys == {key}
            await self.process.crash_during(point, partial(run_intake, self.store))
            self.model.acknowledge(key, chat)
        await self.restarted(set())

    async def crash_in_turn(self, chat: str, point: str) -> None:
        """In its body or its commit the session stays ``running`` and the next start marks it
        interrupted; in its begin or the record of a failed try, nothing of that write is
        kept. The rows stay pending either way, their tries as they were."""
        rows = await self.batch(chat)
        if point == "body":
            await self.crash_in_body(rows)
        elif point == "fail":
            await self.process.crash_during(point, partial(fail_turn, self.store, self.clock, rows))
        else:
            await self.process.crash_during(point, partial(take_turn, self.store, rows))
        await self.restarted({chat} if point in ("body", "commit") else set())

    async def crash_in_body(self, rows: list[InboxItem]) -> None:
        async def die() -> None:
            await self.process.crash()
            raise ProcessDied

        with pytest.raises((ProcessDied, StoreError)):
            await take_turn(self.store, rows, body=die)

    async def crash_in_delete(self, chat: str) -> None:
        """In the erase: the session is still whole after the next start."""
        await self.process.crash_during("delete", partial(self.store.delete_session, sid(chat)))
        await self.restarted(set())

    # what must hold

    @invariant()
    def store_matches_model(self) -> None:
        self.tally["checks"] += 1
        self.model.check()
        seen = self.run(observe(self.process))
        assert_same(seen, self.model.expected())
        assert set(answered_once(seen).values()) <= {1}, "a message in two committed turns"

    def teardown(self) -> None:
        # Hypothesis calls this in a ``finally``: after a failed step, report that step alone.
        failed = sys.exc_info()[0] is not None
        try:
            if self.process.running and not failed:
                self.run(self.drain())
        finally:
            self.run(self.process.aclose())
            self.loop.close()

    async def drain(self) -> None:
        """Turns until nothing is pending: every acknowledged message of a live session is then
        in exactly one committed turn, or dead."""
        for chat in CHATS:
            while self.model.chats[chat].pending:
                await take_turn(self.store, await self.batch(chat))
                self.model.commit(chat)
        seen = await observe(self.process)
        assert_same(seen, self.model.expected())
        assert await self.store.pending_sessions() == []
        in_turns = answered_once(seen)
        dead = {key for view in seen.chats.values() for key in view.dead}
        live = {key for key in self.model.acked if key not in self.model.erased}
        assert set(in_turns) | dead == live
        assert not set(in_turns) & dead
        assert set(in_turns.values()) <= {1}


@pytest.mark.parametrize("kind", ["file", "postgres"])
def test_store_matches_model(kind: str, tmp_path: Path) -> None:
    """Random sequences of deliveries, turns, erasures, restarts and crashes (module doc)."""
    with ExitStack() as stack:
        where = str(tmp_path)
        if kind == "postgres":  # skipped when no PostgreSQL is configured
            where = stack.enter_context(fresh_schema_sync())

        class Machine(StoreMachine):
            pass

        Machine.kind, Machine.where, Machine.tally = kind, where, Counter()
        run_state_machine_as_test(Machine, settings=SETTINGS)
    print(f"\nstore model, {kind}: " + ", ".join(f"{n} {k}" for k, n in Machine.tally.items()))
