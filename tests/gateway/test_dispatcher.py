"""The dispatcher on a real SQLite store with scripted models: lanes, order, merge, retries."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from webhook_bot_gateway.agents import (
    ModelBackendError,
    ModelMessage,
    ModelResponse,
    Runner,
    Tool,
    ToolSpec,
    tool,
)
from webhook_bot_gateway.agents.testing import Hang, ScriptedModel, call, reply
from webhook_bot_gateway.gateway._metrics import TURNS, Metrics
from webhook_bot_gateway.gateway._pipeline import _dispatcher, _turns
from webhook_bot_gateway.gateway._pipeline._dead_letter import NO_PERSON_APOLOGY
from webhook_bot_gateway.gateway._pipeline._dispatcher import Dispatcher
from webhook_bot_gateway.gateway._pipeline._pacer import WINDOW, AckPacer
from webhook_bot_gateway.gateway._pipeline._turn_log import BUSY_WARN_SECONDS
from webhook_bot_gateway.gateway._wait import wait_event
from webhook_bot_gateway.gateway.config import DispatcherConfig
from webhook_bot_gateway.store import (
    InboxIn,
    SessionInbox,
    SQLiteStore,
    StoreError,
    TurnTakenOver,
)

from . import cancel_helpers
from .cancel_helpers import CASES, Point, cancel_at, check_agrees
from .pipeline_helpers import RecordingAdapter, add_inbox, inbound, registry, rows
from .test_pacer import Clock

Step = Callable[[Sequence[ModelMessage], Sequence[ToolSpec]], Awaitable[ModelResponse]]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "gateway.db"


@pytest.fixture
async def store(db: Path) -> AsyncIterator[SQLiteStore]:
    async with SQLiteStore(db) as opened:
        await opened.renew_lease(3600)  # as the gateway does before any turn: its turns are live
        yield opened


class Harness:
    """A dispatcher over ``store`` whose triage agent plays ``model``."""

    def __init__(
        self,
        store: SQLiteStore,
        model: ScriptedModel,
        adapters: dict[str, Any] | None = None,
        max_lanes: int | None = None,
        clock: Callable[[], float] = time.time,
        pacer: AckPacer | None = None,
        others_grace: float = 3600.0,
        allowed: dict[tuple[str, str], tuple[str, ...]] | None = None,
        tools: Sequence[Tool] = (),
        turn_timeout: float = 120.0,
        **config: Any,
    ) -> None:
        self.store = store
        self.model = model
        self.metrics = Metrics()
        self.config = DispatcherConfig(**{"retry_base_seconds": 0, **config})
        self.outbox_wakes = 0
        agents = registry(model, tools=tools)
        agents.bind_accounts({}, allowed or {})  # the accounts' own ``agents`` lists
        self.runner = Runner(store, agents, turn_timeout=turn_timeout)
        self.dispatcher = Dispatcher(
            store,
            self.runner,
            self.config,
            metrics=self.metrics,
            adapters=adapters,
            on_outbox=self._woken,
            handoff_agent="human",
            max_lanes=max_lanes,
            clock=clock,
            pacer=pacer,
            others_grace=others_grace,
        )
        self.committed = asyncio.Event()

    def _woken(self) -> None:
        self.outbox_wakes += 1
        self.committed.set()

    async def until_committed(self, count: int) -> None:
        async with asyncio.timeout(10):
            while self.turns("committed") < count:
                self.committed.clear()
                await self.committed.wait()

    async def feed(self, *texts: str, chat_id: str = "42", first: int = 1) -> str:
        items = [inbound(t, n=first + i, chat_id=chat_id) for i, t in enumerate(texts)]
        [sid] = await add_inbox(self.store, *items)
        self.dispatcher.wake([sid])
        return sid

    async def hand(self, *texts: str, chat_id: str = "42", first: int = 1) -> str:
        """Rows the intake recorded, handed over as the store gives them back (read past any
        counting subclass: the intake reads nothing)."""
        sid = await self.store_only(*texts, chat_id=chat_id, first=first)
        pending = await SQLiteStore.pending_inbox(self.store, sid)
        new = tuple(row for row in pending if row.event["text"] in texts)
        self.dispatcher.offer([SessionInbox(sid, new, complete=new == tuple(pending))])
        return sid

    async def store_only(self, *texts: str, chat_id: str = "42", first: int = 1) -> str:
        """Rows another process wrote: stored, this dispatcher not woken."""
        items = [inbound(t, n=first + i, chat_id=chat_id) for i, t in enumerate(texts)]
        [sid] = await add_inbox(self.store, *items)
        return sid

    async def run(self, *texts: str, chat_id: str = "42") -> str:
        sid = await self.feed(*texts, chat_id=chat_id)
        await asyncio.wait_for(self.dispatcher.wait_idle(), 10)
        return sid

    def turns(self, outcome: str) -> float:
        return self.metrics.value(TURNS, outcome=outcome)

    async def user_texts(self, sid: str) -> list[str | None]:
        return [m.text for m in await self.store.get_branch(sid) if m.role == "user"]

    async def replies(self, sid: str) -> list[str]:
        return [row.payload["text"] for row in await self.store.list_outbox(sid)]


def last_user(messages: Sequence[ModelMessage]) -> str:
    return next(m.text or "" for m in reversed(messages) if m.role == "user")


def echo() -> Step:
    async def step(messages: Sequence[ModelMessage], tools: Sequence[ToolSpec]) -> ModelResponse:
        return reply(f"re: {last_user(messages)}")

    return step


def inbox_states(db: Path) -> list[tuple[str, int]]:
    return [(r[0], r[1]) for r in rows(db, "SELECT state, attempts FROM inbox ORDER BY id")]


async def test_dispatcher_enqueue_runs_one_turn_per_message_in_order(
    store: SQLiteStore, db: Path
) -> None:
    harness = Harness(store, ScriptedModel(echo(), echo(), echo()), double_texting="enqueue")
    sid = await harness.run("one", "two", "three")
    assert await harness.user_texts(sid) == ["one", "two", "three"]
    assert await harness.replies(sid) == ["re: one", "re: two", "re: three"]
    assert inbox_states(db) == [("done", 0)] * 3
    assert harness.turns("committed") == 3
    assert harness.outbox_wakes == 3
    harness.model.assert_done()


async def test_dispatcher_replies_into_the_forum_topic_of_the_last_message(
    store: SQLiteStore,
) -> None:
    harness = Harness(store, ScriptedModel(echo(), echo()), double_texting="enqueue")
    [sid] = await add_inbox(
        store,
        inbound("in topic", n=1, chat_id="-100", thread_id="3001"),
        inbound("in general", n=2, chat_id="-100"),
    )
    harness.dispatcher.wake([sid])
    await asyncio.wait_for(harness.dispatcher.wait_idle(), 10)
    threads = [row.payload.get("thread_id") for row in await store.list_outbox(sid)]
    assert threads == ["3001", None]


async def test_dispatcher_asks_the_pacer_before_each_turn(store: SQLiteStore) -> None:
    """Acks first: while the pacer holds new work back, each turn waits its turn to start."""
    clock = Clock()
    pacer = AckPacer(0.002, clock=clock, sleep=clock.sleep)
    pacer.acked()
    pacer.lagged(0.030)  # webhooks arrive and the loop is late...
    await pacer.admit(1)
    clock.now += WINDOW * 1.02
    pacer.lagged(0.030)  # ...for a window: new work is paced at about FLOOR per second
    model = ScriptedModel(echo(), echo(), echo())
    harness = Harness(store, model, pacer=pacer, double_texting="enqueue")
    sid = await harness.run("one", "two", "three")
    assert await harness.replies(sid) == ["re: one", "re: two", "re: three"]
    assert clock.slept, "the turns waited for the pacer"


async def test_dispatcher_merge_answers_the_rows_pending_at_turn_start_in_one_turn(
    store: SQLiteStore, db: Path
) -> None:
    harness = Harness(store, ScriptedModel(echo()), double_texting="merge")
    sid = await harness.run("one", "two", "three")
    assert await harness.user_texts(sid) == ["one\ntwo\nthree"]
    assert await harness.replies(sid) == ["re: one\ntwo\nthree"]
    [user] = [m for m in await store.get_branch(sid) if m.role == "user"]
    keys = [ref["dedup_key"] for ref in user.data["messages"]]
    assert keys == [f"telegram:support:42:{n}" for n in (1, 2, 3)]
    assert inbox_states(db) == [("done", 0)] * 3


async def test_dispatcher_merge_joins_messages_that_arrive_while_a_turn_runs(
    store: SQLiteStore,
) -> None:
    hang = Hang()
    harness = Harness(store, ScriptedModel(hang, echo()), double_texting="merge")
    sid = await harness.feed("one")
    await asyncio.wait_for(hang.started.wait(), 5)
    await harness.feed("two", first=2)
    await harness.feed("three", first=3)
    hang.release.set()
    await asyncio.wait_for(harness.dispatcher.wait_idle(), 10)
    assert await harness.user_texts(sid) == ["one", "two\nthree"]
    assert await harness.replies(sid) == ["re: two\nthree"]  # the hung step said nothing


class BlockingTool:
    """``wait_here``: a sync tool that blocks its thread until the test releases it (10 s at
    most: run on the event loop, it would hold up the test rather than hang it)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        blocking = self

        @tool
        def wait_here(note: str) -> str:
            """Wait until the test says so."""
            blocking.entered.set()
            return "released" if blocking.release.wait(10) else "never released"

        self.tool = wait_here

    async def until_entered(self) -> None:
        for _ in range(2000):
            if self.entered.is_set():
                return
            await asyncio.sleep(0.005)
        raise AssertionError("the tool was never called")


def calls_wait_here_on(text: str, note: str = "n") -> Step:
    """A model that calls ``wait_here`` for the user message ``text``, then echoes it, and
    echoes any other message at once."""

    async def step(messages: Sequence[ModelMessage], tools: Sequence[ToolSpec]) -> ModelResponse:
        if last_user(messages) == text and messages[-1].role == "user":
            return call("wait_here", {"note": note})
        return reply(f"re: {last_user(messages)} ({messages[-1].text})")

    return step


@pytest.fixture
def blocking() -> Iterator[BlockingTool]:
    made = BlockingTool()
    yield made
    made.release.set()  # no thread stays blocked past the test


async def test_dispatcher_other_sessions_go_on_while_a_sync_tool_blocks(
    store: SQLiteStore, blocking: BlockingTool
) -> None:
    """A user walk: a ``time.sleep(8)`` tool held every other chat's turn (and the webhooks'
    acks) for 8 s. It runs in a thread now: the loop serves the other sessions meanwhile."""
    step = calls_wait_here_on("slow")
    harness = Harness(store, ScriptedModel(*[step] * 3), tools=[blocking.tool])
    slow = await harness.feed("slow", chat_id="1")
    await blocking.until_entered()
    fast = await harness.feed("fast", chat_id="2")
    await asyncio.wait_for(harness.dispatcher.wait_session(fast), 5)
    assert await harness.replies(fast) == ["re: fast (fast)"]
    assert await harness.replies(slow) == []
    blocking.release.set()
    await asyncio.wait_for(harness.dispatcher.wait_idle(), 10)
    assert await harness.replies(slow) == ["re: slow (released)"]


async def test_dispatcher_logs_a_turn_that_timed_out_in_a_sync_tool_naming_the_tool(
    store: SQLiteStore, db: Path, blocking: BlockingTool, caplog: pytest.LogCaptureFixture
) -> None:
    """The line said only "turn took longer than 20s; rolled back": it names the tool now,
    never the call's arguments (personal data)."""
    step = calls_wait_here_on("slow", note="Jane Doe, 12 Main Street")
    harness = Harness(
        store, ScriptedModel(step), tools=[blocking.tool], turn_timeout=1, max_attempts=1
    )
    caplog.set_level(logging.WARNING, logger="gateway.dispatcher")
    sid = await harness.feed("slow")
    await asyncio.wait_for(harness.dispatcher.wait_idle(), 10)
    assert harness.turns("dead") == 1
    [line] = [r.getMessage() for r in caplog.records if "failed (try" in r.getMessage()]
    assert line == (
        f"turn of session {sid} failed (try 1): TurnTimeout: session {sid!r}: turn took longer"
        " than 1s (it was waiting on the tool 'wait_here'); rolled back"
    )
    assert "Jane" not in caplog.text
    [(state, error)] = rows(db, "SELECT state, error FROM inbox")
    assert state == "dead"
    assert "(it was waiting on the tool 'wait_here')" in error


async def test_dispatcher_runs_one_turn_at_a_time_per_session(store: SQLiteStore) -> None:
    hang = Hang()
    harness = Harness(store, ScriptedModel(hang, echo()), double_texting="enqueue")
    sid = await harness.feed("one", "two")
    await asyncio.wait_for(hang.started.wait(), 5)
    harness.dispatcher.wake([sid])  # a second wake-up must not start a second turn
    assert harness.dispatcher.running_turns == 1
    assert len(harness.model.calls) == 1
    hang.release.set()
    await asyncio.wait_for(harness.dispatcher.wait_idle(), 10)
    assert await harness.user_texts(sid) == ["one", "two"]


async def test_dispatcher_a_slow_session_does_not_hold_up_another(store: SQLiteStore) -> None:
    release = asyncio.Event()

    async def step(messages: Sequence[ModelMessage], tools: Sequence[ToolSpec]) -> ModelResponse:
        if last_user(messages) == "slow":
            await release.wait()
        return reply(last_user(messages))

    harness = Harness(store, ScriptedModel(step, step))
    slow = await harness.feed("slow", chat_id="1")
    fast = await harness.feed("fast", chat_id="2")
    await asyncio.wait_for(harness.dispatcher.wait_session(fast), 5)
    assert await harness.replies(fast) == ["fast"]
    assert await harness.replies(slow) == []
    release.set()
    await asyncio.wait_for(harness.dispatcher.wait_idle(), 10)
    assert await harness.replies(slow) == ["slow"]


async def test_dispatcher_bounds_the_turns_running_at_once(store: SQLiteStore) -> None:
    second_started = asyncio.Event()
    order: list[str] = []

    async def step(messages: Sequence[ModelMessage], tools: Sequence[ToolSpec]) -> ModelResponse:
        text = last_user(messages)
        order.append(f"start {text}")
        if text == "first":
            try:  # the bound holds the second turn back, so this wait runs out
                await asyncio.wait_for(second_started.wait(), 0.3)
            except TimeoutError:
                pass
        else:
            second_started.set()
        order.append(f"end {text}")
        return reply(text)

    harness = Harness(store, ScriptedModel(step, step), max_concurrent_turns=1)
    await harness.feed("first", chat_id="1")
    await harness.feed("second", chat_id="2")
    await asyncio.wait_for(harness.dispatcher.wait_idle(), 10)
    assert order == ["start first", "end first", "start second", "end second"]


async def test_dispatcher_retries_a_failing_turn_then_commits_it_once(
    store: SQLiteStore, db: Path
) -> None:
    boom = ModelBackendError("scripted", "HTTP 502")
    harness = Harness(store, ScriptedModel(boom, boom, echo()), max_attempts=3)
    sid = await harness.run("hello")
    assert await harness.user_texts(sid) == ["hello"]  # the failed tries left no trace
    assert await harness.replies(sid) == ["re: hello"]
    assert inbox_states(db) == [("done", 2)]
    assert (harness.turns("failed"), harness.turns("committed")) == (2, 1)


async def test_dispatcher_keeps_inbox_order_across_a_retry(store: SQLiteStore) -> None:
    boom = ModelBackendError("scripted", "timeout")
    harness = Harness(store, ScriptedModel(boom, echo(), echo()), double_texting="enqueue")
    sid = await harness.run("one", "two")
    assert await harness.user_texts(sid) == ["one", "two"]
    assert await harness.replies(sid) == ["re: one", "re: two"]


async def test_dispatcher_dead_letters_after_max_attempts_with_apology_and_handoff(
    store: SQLiteStore, db: Path
) -> None:
    boom = ModelBackendError("scripted", "HTTP 500")
    harness = Harness(store, ScriptedModel(boom, boom, boom), max_attempts=3, apology="Sorry!")
    sid = await harness.run("hello")
    [dead] = await store.list_dead_inbox()
    assert (dead.session_id, dead.attempts, dead.state) == (sid, 3, "dead")
    assert "HTTP 500" in (dead.error or "")
    assert await harness.replies(sid) == ["Sorry!"]
    session = await store.get_session(sid)
    assert session is not None
    assert session.active_agent == "human"
    [event] = [e for e in await store.list_events(sid) if e.kind == "agent_changed"]
    assert event.detail == {"from": "triage", "to": "human", "reason": "dead_letter"}
    assert (harness.turns("failed"), harness.turns("dead")) == (2, 1)
    branch = await store.get_branch(sid)  # the next agent sees what happened
    assert [(m.role, m.text, m.data.get("dead_letter")) for m in branch] == [
        ("user", "hello", True),
        ("assistant", "Sorry!", {"handoff": "human"}),
    ]


async def test_dispatcher_dead_letter_keeps_the_agent_where_the_account_has_no_human(
    store: SQLiteStore, db: Path
) -> None:
    """The account's ``agents`` leave out the handoff target: no handoff (the user's next
    message would fall back to the bot anyway), and an apology that promises no person."""
    boom = ModelBackendError("scripted", "HTTP 500")
    allowed = {("telegram", "support"): ("triage",)}
    harness = Harness(store, ScriptedModel(boom, boom), max_attempts=2, allowed=allowed)
    sid = await harness.run("hello")
    assert await harness.replies(sid) == [NO_PERSON_APOLOGY]
    session = await store.get_session(sid)
    assert session is not None
    assert session.active_agent == "triage"
    assert [e for e in await store.list_events(sid) if e.kind == "agent_changed"] == []
    branch = await store.get_branch(sid)
    assert [(m.role, m.text, m.data.get("dead_letter")) for m in branch] == [
        ("user", "hello", True),
        ("assistant", NO_PERSON_APOLOGY, {"handoff": None}),
    ]


async def test_dispatcher_dead_letter_without_a_handoff_sends_the_apology_of_its_choice(
    store: SQLiteStore, db: Path
) -> None:
    boom = ModelBackendError("scripted", "HTTP 500")
    allowed = {("telegram", "support"): ("triage",)}
    harness = Harness(
        store,
        ScriptedModel(boom, boom),
        max_attempts=2,
        allowed=allowed,
        apology="",  # "" sends no apology, and the other follows it unless set
    )
    sid = await harness.run("hello")
    assert await harness.replies(sid) == []
    config = {"apology": "", "apology_no_person": "Sorry, that failed."}
    harness = Harness(store, ScriptedModel(boom, boom), max_attempts=2, allowed=allowed, **config)
    sid = await harness.run("hello", chat_id="43")
    assert await harness.replies(sid) == ["Sorry, that failed."]


async def test_dispatcher_after_a_dead_letter_the_next_agent_sees_the_message_and_apology(
    store: SQLiteStore, db: Path
) -> None:
    boom = ModelBackendError("scripted", "HTTP 500")
    harness = Harness(store, ScriptedModel(boom, boom, reply("Back.")), max_attempts=2)
    sid = await harness.run("my order is lost")
    await store.set_agent(sid, "triage", reason="operator")  # a person hands it back
    await harness.feed("hello again", first=2)
    await asyncio.wait_for(harness.dispatcher.wait_idle(), 10)
    seen = [(m.role, m.text) for m in harness.model.calls[-1].messages]
    apology = harness.config.apology
    assert ("user", "my order is lost") in seen
    assert (
        "assistant",
        "[The user's message above was not answered: the turn failed, and the user was sent "
        f"this apology:] {apology} [The session was then handed to human.]",
    ) in seen


async def test_dispatcher_with_a_human_agent_active_stores_the_message_without_a_reply(
    store: SQLiteStore, db: Path
) -> None:
    harness = Harness(store, ScriptedModel())
    sid = await harness.feed("hello")
    await store.update_session(sid, active_agent="human")
    await asyncio.wait_for(harness.dispatcher.wait_idle(), 10)
    assert await harness.user_texts(sid) == ["hello"]
    assert await harness.replies(sid) == []
    assert inbox_states(db) == [("done", 0)]
    assert harness.model.calls == []


async def test_dispatcher_a_session_in_backoff_does_not_slow_the_others(
    store: SQLiteStore, db: Path
) -> None:
    failed = asyncio.Event()

    async def fail(messages: Sequence[ModelMessage], tools: Sequence[ToolSpec]) -> ModelResponse:
        failed.set()
        raise ModelBackendError("scripted", "HTTP 503")

    harness = Harness(store, ScriptedModel(fail, echo()), retry_base_seconds=3600)
    failing = await harness.feed("first", chat_id="1")
    await asyncio.wait_for(failed.wait(), 5)
    other = await harness.feed("second", chat_id="2")
    await asyncio.wait_for(harness.dispatcher.wait_session(other), 5)
    assert await harness.replies(other) == ["re: second"]
    assert failing in harness.dispatcher.lanes  # waiting out its backoff
    assert [r.state for r in await store.pending_inbox(failing)] == ["pending"]
    await harness.dispatcher.drain(1.0)
    assert inbox_states(db) == [("pending", 1), ("done", 0)]


async def test_dispatcher_waits_the_backoff_when_a_failed_turn_cannot_be_recorded(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk: the turn fails and so does the record of its failure, while the rows stay
    readable. The lane waits the backoff before it tries again (it tried in a loop, two log
    lines a millisecond, for as long as the disk was full)."""
    waits: list[float] = []
    waited = asyncio.Event()

    async def recorded_wait(event: asyncio.Event, seconds: float) -> bool:
        waits.append(seconds)
        waited.set()
        return await wait_event(event, 3600)  # the test ends first

    async def disk_full(*args: Any, **kwargs: Any) -> None:
        raise StoreError("database or disk is full")

    monkeypatch.setattr(_dispatcher, "wait_event", recorded_wait)
    monkeypatch.setattr(store, "fail_inbox", disk_full)
    boom = ModelBackendError("scripted", "HTTP 502")
    harness = Harness(store, ScriptedModel(boom), retry_base_seconds=7)
    sid = await harness.feed("hello")
    await asyncio.wait_for(waited.wait(), 10)
    assert waits == [7]
    assert [r.attempts for r in await store.pending_inbox(sid)] == [0]  # not counted
    await harness.dispatcher.drain(1.0)


async def test_dispatcher_lane_whose_read_fails_stops_with_one_line_and_no_traceback(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The store went away (PostgreSQL restarting): the lane's read of its rows fails. One
    WARNING, no traceback; the poll starts the lane again once the store answers."""

    async def down(*args: Any, **kwargs: Any) -> Any:
        raise StoreError("the PostgreSQL database did not answer (ConnectionRefusedError)")

    harness = Harness(store, ScriptedModel(echo()))
    sid = await harness.store_only("hello")
    monkeypatch.setattr(store, "pending_inbox", down)
    caplog.set_level(logging.WARNING, logger="gateway.dispatcher")
    harness.dispatcher.wake([sid])
    await asyncio.wait_for(harness.dispatcher.wait_idle(), 10)
    lines = [(r.levelname, r.getMessage(), r.exc_info) for r in caplog.records]
    assert lines == [
        (
            "WARNING",
            f"lane of session {sid} stopped: the store failed: the PostgreSQL database did not"
            " answer (ConnectionRefusedError)",
            None,
        )
    ]
    monkeypatch.undo()
    await harness.dispatcher.poll()
    await asyncio.wait_for(harness.dispatcher.wait_idle(), 10)
    assert await harness.replies(sid) == ["re: hello"]


@pytest.mark.parametrize(
    ("asked", "waited"),
    [(120.0, 120.0), (0.5, 2.0), (None, 2.0)],
    ids=["longer-than-the-backoff", "shorter", "none"],
)
async def test_dispatcher_waits_out_a_model_servers_retry_after_before_the_next_try(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch, asked: float | None, waited: float
) -> None:
    """A rate-limited model (429 with Retry-After: 120) was tried again after the dispatcher's
    own 2 s and 4 s, refused each time, and the message dead-lettered within seconds. A shorter
    wait than the backoff's leaves the backoff as it was."""
    now = NOW  # after the rows' own arrival times: they are due

    async def limited(messages: Sequence[ModelMessage], tools: Sequence[ToolSpec]) -> ModelResponse:
        raise ModelBackendError("scripted", "HTTP 429", retry_after=asked)

    harness = Harness(
        store, ScriptedModel(limited), clock=lambda: now, retry_base_seconds=2, max_attempts=3
    )
    recorded = failures_recorded(store, monkeypatch)
    sid = await harness.feed("hello")
    await asyncio.wait_for(recorded.wait(), 10)
    [row] = await store.pending_inbox(sid)
    assert (row.attempts, row.next_attempt_at) == (1, NOW + waited)
    await harness.dispatcher.drain(1.0)


NOW = 4_000_000_000.0


def failures_recorded(store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """Set once the dispatcher has recorded a failed try of a turn."""
    recorded, fail_inbox = asyncio.Event(), store.fail_inbox

    async def recording(*args: Any, **kwargs: Any) -> None:
        await fail_inbox(*args, **kwargs)
        recorded.set()

    monkeypatch.setattr(store, "fail_inbox", recording)
    return recorded


async def test_dispatcher_start_reconciles_running_sessions_and_runs_pending_rows(
    store: SQLiteStore, db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    harness = Harness(store, ScriptedModel(echo()))
    [sid] = await add_inbox(store, inbound("left over", n=1))
    _set_status(db, sid, "running")  # as a process killed mid-turn leaves it
    caplog.set_level(logging.WARNING, logger="gateway.dispatcher")
    await harness.dispatcher.start()
    await asyncio.wait_for(harness.dispatcher.wait_idle(), 10)
    assert await harness.replies(sid) == ["re: left over"]
    assert rows(db, "SELECT status FROM sessions") == [("idle",)]
    [line] = [r.getMessage() for r in caplog.records if "took over" in r.getMessage()]
    assert line.endswith(f": {sid}")  # an operator sees which sessions moved


def _set_status(db: Path, sid: str, status: str) -> None:
    conn = sqlite3.connect(db)
    try:
        conn.execute("UPDATE sessions SET status = ? WHERE session_id = ?", (status, sid))
        conn.commit()
    finally:
        conn.close()


async def test_dispatcher_drops_quietly_a_turn_whose_session_was_deleted(
    store: SQLiteStore, db: Path
) -> None:
    sid_holder: list[str] = []

    async def step(messages: Sequence[ModelMessage], tools: Sequence[ToolSpec]) -> ModelResponse:
        await store.delete_session(sid_holder[0])  # an operator erases the session meanwhile
        return reply("too late")

    harness = Harness(store, ScriptedModel(step))
    sid = await harness.feed("hello")
    sid_holder.append(sid)
    await asyncio.wait_for(harness.dispatcher.wait_idle(), 10)
    assert harness.turns("deleted") == 1
    assert harness.turns("failed") == 0
    assert rows(db, "SELECT count(*) FROM outbox") == [(0,)]
    assert rows(db, "SELECT count(*) FROM inbox") == [(0,)]


async def test_dispatcher_drain_rolls_back_a_turn_past_the_grace_and_a_restart_runs_it(
    store: SQLiteStore, db: Path
) -> None:
    hang = Hang()
    harness = Harness(store, ScriptedModel(hang))
    sid = await harness.feed("hello")
    await asyncio.wait_for(hang.started.wait(), 5)
    await harness.dispatcher.drain(0.05)
    assert harness.turns("cancelled") == 1
    assert rows(db, "SELECT status FROM sessions") == [("idle",)]
    assert await harness.user_texts(sid) == []
    assert inbox_states(db) == [("pending", 0)]
    again = Harness(store, ScriptedModel(echo()))
    await again.dispatcher.start()
    await asyncio.wait_for(again.dispatcher.wait_idle(), 10)
    assert await again.user_texts(sid) == ["hello"]
    assert await again.replies(sid) == ["re: hello"]


async def test_dispatcher_shows_telegram_typing_while_a_slow_turn_runs_and_stops_before_commit(
    store: SQLiteStore, db: Path
) -> None:
    adapter = RecordingAdapter("telegram", db=db)

    async def step(messages: Sequence[ModelMessage], tools: Sequence[ToolSpec]) -> ModelResponse:
        while len(adapter.typing) < 3:  # renewed while the turn runs
            adapter.typed.clear()
            await asyncio.wait_for(adapter.typed.wait(), 5)
        return reply("done")

    harness = Harness(
        store,
        ScriptedModel(step),
        {"telegram": adapter},
        typing_after_seconds=0,
        typing_interval_seconds=1e-6,
    )
    sid = await harness.run("slow one")
    shown = len(adapter.typing)
    assert shown >= 3
    assert adapter.typing[0] == ("support", "42", "m1")
    assert not [t for t in asyncio.all_tasks() if t.get_name() == "typing"]
    assert await harness.replies(sid) == ["done"]
    assert len(adapter.typing) == shown
    assert adapter.after_reply == 0  # stopped inside the turn, before its commit


async def test_dispatcher_shows_typing_in_the_forum_topic_of_the_message(
    store: SQLiteStore,
) -> None:
    adapter = RecordingAdapter("telegram")

    async def step(messages: Sequence[ModelMessage], tools: Sequence[ToolSpec]) -> ModelResponse:
        await asyncio.wait_for(adapter.typed.wait(), 5)
        return reply("done")

    harness = Harness(store, ScriptedModel(step), {"telegram": adapter}, typing_after_seconds=0)
    [sid] = await add_inbox(store, inbound("in topic", n=1, chat_id="-100", thread_id="3001"))
    harness.dispatcher.wake([sid])
    await asyncio.wait_for(harness.dispatcher.wait_idle(), 10)
    assert adapter.threads[0] == "3001"


async def test_dispatcher_shows_whatsapp_typing_once_on_the_last_message(
    store: SQLiteStore,
) -> None:
    adapter = RecordingAdapter("whatsapp")

    async def step(messages: Sequence[ModelMessage], tools: Sequence[ToolSpec]) -> ModelResponse:
        await asyncio.wait_for(adapter.typed.wait(), 5)
        return reply("done")

    harness = Harness(
        store,
        ScriptedModel(step),
        {"whatsapp": adapter},
        typing_after_seconds=0,
        typing_interval_seconds=0.01,
    )
    items = [inbound(t, n=n, channel="whatsapp", account="100") for n, t in ((1, "a"), (2, "b"))]
    [sid] = await add_inbox(store, *items)
    harness.dispatcher.wake([sid])
    await asyncio.wait_for(harness.dispatcher.wait_idle(), 10)
    assert adapter.typing == [("100", "42", "m2")]


async def test_dispatcher_shows_no_typing_for_a_quick_turn(store: SQLiteStore) -> None:
    adapter = RecordingAdapter("telegram")
    harness = Harness(store, ScriptedModel(echo()), {"telegram": adapter}, typing_after_seconds=30)
    await harness.run("quick")
    assert adapter.typing == []


class CountingStore(SQLiteStore):
    """The real store, counting how often a lane reads a session's pending rows, and how often
    the dispatcher looks for every session with pending rows (a poll)."""

    reads = 0
    polls = 0

    async def pending_inbox(self, session_id: str, limit: int = 100) -> Any:
        self.reads += 1
        return await super().pending_inbox(session_id, limit)

    async def pending_sessions(self) -> Any:
        self.polls += 1
        return await super().pending_sessions()


async def test_sessions_left_out_while_every_lane_is_taken_get_the_next_free_lane(
    db: Path,
) -> None:
    """No poll of the store: each left-out session's lane starts as another ends, in the order
    they came, and reads its rows once."""
    async with CountingStore(db) as counting:
        await counting.renew_lease(3600)
        harness = Harness(counting, ScriptedModel(*[echo()] * 5), max_lanes=2)
        dispatcher = harness.dispatcher
        runner = asyncio.create_task(dispatcher.run(poll_seconds=3600))
        try:
            await asyncio.wait_for(dispatcher.wait_idle(), 10)
            polls = counting.polls  # the first, at start
            sids = [await harness.feed(f"hello {n}", chat_id=str(n)) for n in range(5)]
            assert len(dispatcher.lanes) <= 2
            await harness.until_committed(5)
        finally:
            await dispatcher.drain(1.0)
            await asyncio.wait_for(runner, 5)
        assert counting.polls == polls
        assert counting.reads == 5
        for n, sid in enumerate(sids):
            assert await harness.replies(sid) == [f"re: hello {n}"]


async def test_sessions_beyond_the_left_out_bound_cost_one_poll_per_bound_not_per_lane(
    db: Path,
) -> None:
    """Past ``max_lanes`` left-out sessions, a poll of every pending session finds the rest: one
    once the left-out ones all have lanes, not one each time a lane ends (under a flood of
    sessions each poll reads the whole backlog)."""
    SESSIONS, LANES = 20, 4
    entered: asyncio.Queue[str] = asyncio.Queue()
    release = asyncio.Semaphore(0)

    def gated() -> Step:
        async def step(messages: Sequence[ModelMessage], tools: Sequence[ToolSpec]) -> Any:
            entered.put_nowait(last_user(messages))
            await release.acquire()
            return reply(f"re: {last_user(messages)}")

        return step

    async with CountingStore(db) as counting:
        await counting.renew_lease(3600)
        model = ScriptedModel(*[gated() for _ in range(SESSIONS)])
        harness = Harness(counting, model, max_lanes=LANES, max_concurrent_turns=1)
        dispatcher = harness.dispatcher
        await dispatcher.start()
        polls = counting.polls
        runner = asyncio.create_task(dispatcher.run(poll_seconds=3600))
        sids = [await harness.feed(f"hello {n}", chat_id=str(n)) for n in range(SESSIONS)]
        try:
            for n in range(SESSIONS):  # one turn at a time: each lane ends before the next runs
                async with asyncio.timeout(10):
                    assert await entered.get() == f"hello {n}"
                release.release()
            await harness.until_committed(SESSIONS)
        finally:
            await dispatcher.drain(1.0)
            await asyncio.wait_for(runner, 5)
        # LANES lanes and LANES left out at first; each poll gives the next LANES a place.
        assert counting.polls - polls <= (SESSIONS - 2 * LANES) // LANES + 1
        for n, sid in enumerate(sids):
            assert await harness.replies(sid) == [f"re: hello {n}"]


async def test_dispatcher_lane_ends_after_a_turn_that_took_every_pending_row(db: Path) -> None:
    async with CountingStore(db) as counting:
        harness = Harness(counting, ScriptedModel(echo(), echo()), double_texting="merge")
        sid = await harness.run("one")
        assert (counting.reads, await harness.replies(sid)) == (1, ["re: one"])
        # A row recorded later wakes a new lane, which reads it: nothing is missed.
        await harness.feed("two", first=2)
        await asyncio.wait_for(harness.dispatcher.wait_idle(), 10)
        assert counting.reads == 2
        assert await harness.replies(sid) == ["re: one", "re: two"]


async def test_dispatcher_lane_that_read_every_pending_row_runs_the_rest_from_memory(
    db: Path,
) -> None:
    async with CountingStore(db) as counting:
        harness = Harness(counting, ScriptedModel(echo(), echo()), double_texting="enqueue")
        sid = await harness.run("one", "two")  # enqueue: one turn per row
        assert await harness.replies(sid) == ["re: one", "re: two"]
        assert counting.reads == 1  # the read found both rows: the second turn needs none


def gated(gate: asyncio.Event, started: asyncio.Event) -> Step:
    """Echo, once ``gate`` opens; ``started`` says the turn is at the model."""

    async def step(messages: Sequence[ModelMessage], tools: Sequence[ToolSpec]) -> ModelResponse:
        started.set()
        await gate.wait()
        return reply(f"re: {last_user(messages)}")

    return step


@dataclass
class HeldTurn:
    """A harness over a counting store whose first turn waits at the model until ``finish``."""

    harness: Harness
    counting: CountingStore
    gate: asyncio.Event
    started: asyncio.Event

    async def at_model(self) -> None:
        await asyncio.wait_for(self.started.wait(), 10)

    async def finish(self) -> None:
        self.gate.set()
        await asyncio.wait_for(self.harness.dispatcher.wait_idle(), 10)


@asynccontextmanager
async def first_turn_held(db: Path, later_turns: int) -> AsyncIterator[HeldTurn]:
    gate, started = asyncio.Event(), asyncio.Event()
    async with CountingStore(db) as counting:
        await counting.renew_lease(3600)
        model = ScriptedModel(gated(gate, started), *[echo()] * later_turns)
        harness = Harness(counting, model, double_texting="enqueue")
        yield HeldTurn(harness, counting, gate, started)


async def test_dispatcher_runs_handed_rows_without_reading_them_and_adds_later_ones(
    db: Path,
) -> None:
    """The intake hands a session's pending rows over: its lane reads nothing, and rows
    handed while a turn runs follow in order."""
    async with first_turn_held(db, later_turns=2) as held:
        sid = await held.harness.hand("one", "two")
        await held.at_model()
        await held.harness.hand("three", first=3)
        await held.finish()
        assert await held.harness.replies(sid) == ["re: one", "re: two", "re: three"]
        assert held.counting.reads == 0


async def test_dispatcher_lane_holding_rows_reads_the_store_when_another_process_wrote(
    db: Path,
) -> None:
    """Rows another process wrote are not in what the lane holds: told of them, it reads."""
    async with first_turn_held(db, later_turns=1) as held:
        sid = await held.harness.hand("one")
        await held.at_model()
        await held.harness.store_only("two", first=2)
        held.harness.dispatcher.heard([sid])  # its lane runs here: it looks again at once
        await held.finish()
        assert await held.harness.replies(sid) == ["re: one", "re: two"]
        assert held.counting.reads >= 1


async def test_dispatcher_lane_holding_rows_reads_once_when_a_poll_saw_its_session(
    db: Path,
) -> None:
    """A poll finds the session's rows, some perhaps written by another program the lane was
    not told of: the lane finishes what it holds, then reads the store once before it ends."""
    async with first_turn_held(db, later_turns=2) as held:
        sid = await held.harness.hand("one", "two")
        await held.at_model()
        await held.harness.store_only("three", first=3)  # not handed, not heard
        await held.harness.dispatcher.poll()
        await held.finish()
        assert await held.harness.replies(sid) == ["re: one", "re: two", "re: three"]
        assert held.counting.reads == 1  # after "two", finding "three" (held from there)


async def test_dispatcher_lane_holding_rows_reads_when_a_session_comes_without_its_rows(
    db: Path,
) -> None:
    """The intake's one-by-one path names the session but hands no rows: the lane reads."""
    async with first_turn_held(db, later_turns=1) as held:
        sid = await held.harness.hand("one")
        await held.at_model()
        await held.harness.store_only("two", first=2)
        held.harness.dispatcher.offer([SessionInbox(sid, (), complete=False)])
        await held.finish()
        assert await held.harness.replies(sid) == ["re: one", "re: two"]


async def test_dispatcher_retry_of_handed_rows_counts_the_attempts_stored(
    store: SQLiteStore,
) -> None:
    """After a failed turn the lane reads its rows again: the held ones would not show the
    attempt, and the row would be tried forever instead of dead-lettered."""
    boom = ModelBackendError("scripted", "HTTP 500")
    harness = Harness(store, ScriptedModel(boom, boom), max_attempts=2, apology="Sorry!")
    sid = await harness.hand("hello")
    await asyncio.wait_for(harness.dispatcher.wait_idle(), 10)
    [dead] = await store.list_dead_inbox()
    assert (dead.session_id, dead.attempts) == (sid, 2)
    assert await harness.replies(sid) == ["Sorry!"]


async def test_dispatcher_says_when_a_sessions_turns_stay_refused(
    db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A session marked running by a turn elsewhere (another process, alive): the lane tries
    again every half second, and after BUSY_WARN_SECONDS says so with the count of tries."""
    now = [time.time()]  # the rows were stamped by the store's real clock
    async with SQLiteStore(db) as store, SQLiteStore(db) as other:
        for each in (store, other):
            await each.renew_lease(3600)
        harness = Harness(store, ScriptedModel(echo()), clock=lambda: now[0])
        [sid] = await add_inbox(store, inbound("hello", n=1))
        await other.turn(sid).__aenter__()  # running in the other process, never ending
        caplog.set_level(logging.WARNING, logger="gateway.dispatcher")
        harness.dispatcher.wake([sid])
        async with asyncio.timeout(10):
            while not any("refused" in r.getMessage() for r in caplog.records):
                now[0] += BUSY_WARN_SECONDS / 4  # each retry a quarter of the period later
                await asyncio.sleep(0.2)  # the lane retries on its own half-second timer
        [record] = [r for r in caplog.records if "refused" in r.getMessage()]
        assert sid in record.getMessage()
        assert "tries" in record.getMessage()
        assert harness.turns("committed") == 0
        await harness.dispatcher.drain(1.0)


async def test_another_processs_new_rows_are_left_to_it_for_the_grace(store: SQLiteStore) -> None:
    """Heard of over PostgreSQL's NOTIFY: the writer answers its own rows; a lane here would
    only race it for the turn (and be refused). Within the grace nothing starts here."""
    harness = Harness(store, ScriptedModel(echo()), others_grace=3600)
    sid = await harness.store_only("theirs")
    harness.dispatcher.heard([sid])
    for _ in range(5):
        await asyncio.sleep(0)
    assert harness.dispatcher.lanes == frozenset()
    assert harness.model.calls == []


async def test_another_processs_rows_still_pending_after_the_grace_are_answered_here(
    store: SQLiteStore,
) -> None:
    """The writer died before answering (or a CLI command wrote the rows): after the grace a
    lane here finds them pending and answers them."""
    harness = Harness(store, ScriptedModel(echo()), others_grace=0)
    sid = await harness.store_only("orphan")
    harness.dispatcher.heard([sid])
    assert harness.dispatcher.lanes == frozenset()  # not at once
    await harness.until_committed(1)
    assert await harness.replies(sid) == ["re: orphan"]


async def test_another_processs_row_for_a_turn_running_here_follows_it_at_once(
    store: SQLiteStore,
) -> None:
    """The session's turn runs here: the rows another process recorded meanwhile are read once
    that turn ends, without waiting for the grace, in order."""
    hang = Hang()
    harness = Harness(store, ScriptedModel(hang, echo()), double_texting="enqueue")
    sid = await harness.feed("one")
    await asyncio.wait_for(hang.started.wait(), 5)
    await harness.store_only("two", first=2)
    harness.dispatcher.heard([sid])
    hang.release.set()
    await asyncio.wait_for(harness.dispatcher.wait_idle(), 10)
    assert await harness.user_texts(sid) == ["one", "two"]
    assert await harness.replies(sid) == ["re: two"]  # the hung step said nothing


@pytest.mark.parametrize(("at", "event", "accepted", "replies"), CASES)
async def test_dispatcher_cancel_answer_agrees_with_what_the_turn_committed(
    store: SQLiteStore,
    monkeypatch: pytest.MonkeyPatch,
    at: Point,
    event: InboxIn,
    accepted: bool,
    replies: list[str],
) -> None:
    check_agrees(await cancel_at(store, monkeypatch, at, event), accepted, replies)


async def test_dispatcher_cancel_accepted_before_a_refused_begin_survives_a_shutdown(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lane of an accepted cancel's rows waits to try them again (its begin was refused)
    when the gateway stops: it tries them at once, and they end cancelled, not answered at the
    next start."""
    held = cancel_helpers.HeldTurn("refused")
    held.install(store, monkeypatch)
    harness = Harness(store, ScriptedModel(echo()), retry_base_seconds=3600)  # a long wait
    sid = await harness.feed("hello")
    try:
        await asyncio.wait_for(held.reached.wait(), 10)
        assert await harness.dispatcher.cancel_turn(sid)
    finally:
        held.release.set()
    await asyncio.wait_for(held.refusing.wait(), 10)
    await harness.dispatcher.drain(10)
    assert await store.pending_inbox(sid, 10) == []
    branch = await store.get_branch(sid)
    assert [(m.text, m.data.get("cancelled")) for m in branch] == [("hello", True)]
    assert harness.turns("cancelled_by_user") == 1
    assert await harness.replies(sid) == []


async def test_dispatcher_cancel_is_kept_with_the_rows_before_it_is_answered(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """By the time ``cancel_turn`` says True, the cancel is in the store with the turn's rows
    (a process killed now leaves it to the next): the rows of that turn only."""
    held = cancel_helpers.HeldTurn("begin")
    held.install(store, monkeypatch)
    harness = Harness(store, ScriptedModel(echo()))
    sid = await harness.feed("hello")
    [row] = await store.pending_inbox(sid)
    try:
        await asyncio.wait_for(held.reached.wait(), 10)
        assert await harness.dispatcher.cancel_turn(sid)
        later = await harness.store_only("again", first=2)  # not part of the cancelled turn
        assert await store.cancelled_inbox() == {sid: {row.id}}
        assert later == sid
    finally:
        held.release.set()
    await asyncio.wait_for(harness.dispatcher.wait_idle(), 10)
    assert await store.cancelled_inbox() == {}  # done: no pending row is marked


async def test_dispatcher_cancel_not_kept_raises_and_is_kept_when_asked_again(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store fails to keep the cancel: the caller hears the StoreError (503), the turn is
    stopped here anyway; the same cancel asked again is kept, and answered True."""
    held = cancel_helpers.HeldTurn("begin")
    held.install(store, monkeypatch)
    harness = Harness(store, ScriptedModel(echo()))
    sid = await harness.feed("hello")
    [row] = await store.pending_inbox(sid)
    kept = store.cancel_inbox

    async def fails_once(ids: Sequence[int]) -> None:
        monkeypatch.setattr(store, "cancel_inbox", kept)
        raise StoreError("the database is locked")

    monkeypatch.setattr(store, "cancel_inbox", fails_once)
    try:
        await asyncio.wait_for(held.reached.wait(), 10)
        with pytest.raises(StoreError):
            await harness.dispatcher.cancel_turn(sid)
        assert await store.cancelled_inbox() == {}
        assert await harness.dispatcher.cancel_turn(sid)
        assert await store.cancelled_inbox() == {sid: {row.id}}
    finally:
        held.release.set()
    await asyncio.wait_for(harness.dispatcher.wait_idle(), 10)
    assert harness.turns("cancelled_by_user") == 1
    assert await harness.replies(sid) == []


@pytest.mark.parametrize("left", ["running", "idle"])
async def test_dispatcher_start_ends_rows_of_a_kept_cancel_cancelled(
    store: SQLiteStore, db: Path, left: str
) -> None:
    """A process killed after accepting a cancel, before the cancelled turn committed (inside
    the turn, or waiting to try a refused begin again): the next start runs those rows' turn
    cancelled (the model not asked, nothing sent), and answers a later message as usual."""
    model = ScriptedModel(echo())  # one answer: for "again" only
    harness = Harness(store, model)
    sid = await harness.store_only("hello", "again")
    hello, _again = await store.pending_inbox(sid)
    await store.cancel_inbox([hello.id])
    _set_status(db, sid, left)  # as the killed process left it
    await harness.dispatcher.start()
    await asyncio.wait_for(harness.dispatcher.wait_idle(), 10)
    branch = await store.get_branch(sid)
    users = [(m.text, bool(m.data.get("cancelled"))) for m in branch if m.role == "user"]
    assert users == [("hello", True), ("again", False)]
    assert await harness.replies(sid) == ["re: again"]
    assert model.remaining == 0
    assert (harness.turns("cancelled_by_user"), harness.turns("committed")) == (1, 1)


async def test_dispatcher_cancel_accepted_before_a_refused_begin_spares_a_later_message(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cancel sticks to the rows of the turn it was accepted for: when the lane runs them
    again (merge), a message written meanwhile is not merged into the cancelled turn but
    answered after it."""
    held = cancel_helpers.HeldTurn("refused")
    held.install(store, monkeypatch)
    monkeypatch.setattr(_turns, "BUSY_RETRY_SECONDS", 0.0)
    harness = Harness(store, ScriptedModel(echo(), echo()))  # the cancelled turn may ask too
    sid = await harness.feed("hello")
    try:
        await asyncio.wait_for(held.reached.wait(), 10)
        assert await harness.dispatcher.cancel_turn(sid)
        await harness.store_only("again", first=2)
    finally:
        held.release.set()
    await asyncio.wait_for(harness.dispatcher.wait_idle(), 10)
    branch = await store.get_branch(sid)
    users = [(m.text, bool(m.data.get("cancelled"))) for m in branch if m.role == "user"]
    assert users == [("hello", True), ("again", False)]
    assert await harness.replies(sid) == ["re: again"]
    assert (harness.turns("cancelled_by_user"), harness.turns("committed")) == (1, 1)


async def test_a_turn_of_a_session_erased_meanwhile_stops_at_once_and_writes_nothing(
    store: SQLiteStore,
) -> None:
    """The operator deleted the session while its model was answering: the turn stops now
    (it went on asking the model and showing "typing…" to the erased user until it ended)."""
    hang = Hang()
    harness = Harness(store, ScriptedModel(hang))
    sid = await harness.feed("forget me")
    await asyncio.wait_for(hang.started.wait(), 10)
    assert await store.delete_session(sid)
    harness.dispatcher.session_erased(sid)
    await asyncio.wait_for(harness.dispatcher.wait_idle(), 10)  # the model never answered
    assert harness.turns("deleted") == 1
    assert await store.get_session(sid) is None


@pytest.mark.parametrize(
    ("status", "tries"),
    [(401, 1), (404, 1), (400, 1), (429, 3), (500, 3), (None, 3)],
)
async def test_dispatcher_does_not_retry_a_turn_the_model_server_can_only_refuse(
    store: SQLiteStore, status: int | None, tries: int
) -> None:
    """A bad key, a model that does not exist, a request refused as such: the same request is
    refused again, so retrying only kept the user waiting through the backoff (and ran the
    turn's tools again) before the same apology. "Later" statuses and failures without one
    are still retried."""
    boom = ModelBackendError("scripted", f"HTTP {status}", status)
    harness = Harness(store, ScriptedModel(boom, boom, boom), max_attempts=3, apology="Sorry!")
    sid = await harness.run("hello")
    [dead] = await store.list_dead_inbox()
    assert (dead.session_id, dead.attempts) == (sid, tries)
    assert await harness.replies(sid) == ["Sorry!"]


async def test_dispatcher_says_when_a_turn_that_ran_here_was_taken_over(
    db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """This process's lease ran out while a turn ran (the process, or its database link,
    stalled): another process took the session over, so the turn's commit writes nothing. That
    is said at WARNING and counted, not left to a DEBUG line: its tools ran for nothing and may
    run again."""
    hold = asyncio.Event()
    started = asyncio.Event()

    async def late(messages: Sequence[ModelMessage], tools: Sequence[ToolSpec]) -> ModelResponse:
        started.set()
        await hold.wait()
        return reply("late")

    async with SQLiteStore(db) as store, SQLiteStore(db) as other:
        await store.renew_lease(3600)
        harness = Harness(store, ScriptedModel(late, echo()))
        caplog.set_level(logging.INFO, logger="gateway.dispatcher")
        sid = await harness.feed("hello")
        await asyncio.wait_for(started.wait(), 5)
        conn = sqlite3.connect(db)
        with conn:
            conn.execute("DELETE FROM leases WHERE owner = ?", (store.owner,))  # it ran out
        conn.close()
        await other.renew_lease(3600)
        assert await other.interrupt_running() == [sid]
        hold.set()
        await harness.until_committed(1)  # looked at again here: the session is free again
        assert harness.turns("taken_over") == 1
        [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
        text = warning.getMessage()
        assert sid in text
        assert "another process took the session over" in text
        assert "store.lease_seconds" in text
        ended = [r.getMessage() for r in caplog.records if r.getMessage().startswith("turn ended")]
        assert ended == ["turn ended: taken_over", "turn ended: committed"]
        assert await harness.replies(sid) == ["re: hello"]  # the late reply was not written
        await harness.dispatcher.drain(1.0)


async def test_dispatcher_says_when_an_answer_to_waiting_messages_was_taken_over(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An operator handed the session back to a bot, whose turn answering the messages the user
    wrote meanwhile ran to its end while another process took the session over: nothing was
    written, and the user's messages wait for their next one. That was dropped without a word,
    as a refused begin is."""
    harness = Harness(store, ScriptedModel())
    runner = harness.runner

    async def taken_over(*args: Any, **kwargs: Any) -> None:
        raise TurnTakenOver("telegram-support-42")

    monkeypatch.setattr(runner, "answer_waiting", taken_over)
    caplog.set_level(logging.INFO, logger="gateway.dispatcher")
    assert await harness.dispatcher.answer_waiting("telegram-support-42") is False
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "telegram-support-42" in warning.getMessage()
    assert "another process took the session over" in warning.getMessage()
    assert harness.dispatcher.running_turns == 0


@dataclass
class HeldTypingStop(RecordingAdapter):
    """A Telegram adapter whose indicator, once shown, takes until ``release`` to stop: the
    turn has committed, and the lane still waits for its indicator to end."""

    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def send_typing(
        self,
        account: str,
        chat_id: str,
        message_id: str | None = None,
        thread_id: str | None = None,
    ) -> None:
        await super().send_typing(account, chat_id, message_id, thread_id)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.stopping.set()
            while not self.release.is_set():  # stopped again by the lane's wait: held still
                with contextlib.suppress(asyncio.CancelledError):
                    await self.release.wait()
            raise


async def test_dispatcher_a_second_cancel_after_the_cancelled_turn_committed_is_refused(
    store: SQLiteStore,
) -> None:
    """The turn had committed its cancel (the user saw turn_cancelled) while its lane waited
    for the typing indicator to stop: a cancel then was accepted again, for rows already done."""
    hang = Hang()
    adapter = HeldTypingStop("telegram")
    harness = Harness(store, ScriptedModel(hang), {"telegram": adapter}, typing_after_seconds=0)
    sid = await harness.feed("hello")
    await asyncio.wait_for(hang.started.wait(), 5)
    await asyncio.wait_for(adapter.typed.wait(), 5)
    try:
        assert await harness.dispatcher.cancel_turn(sid) is True
        await asyncio.wait_for(adapter.stopping.wait(), 5)  # stopped before the commit...
        await asyncio.wait_for(_logged(store, sid, "turn_cancelled"), 5)
        assert await harness.dispatcher.cancel_turn(sid) is False  # ...which is done
    finally:
        adapter.release.set()
    await asyncio.wait_for(harness.dispatcher.wait_idle(), 10)


async def _logged(store: SQLiteStore, sid: str, kind: str) -> None:
    """Until the session's event log holds an event of ``kind``: looked at after each commit
    that logs an event."""
    loop = asyncio.get_running_loop()
    changed = asyncio.Event()
    stop = store.watch_events(lambda _: loop.call_soon_threadsafe(changed.set))
    try:
        while kind not in [e.kind for e in await store.list_events(sid)]:
            await changed.wait()
            changed.clear()
    finally:
        stop()


class AlbumClock:
    """The dispatcher's clock, moved by the test; ahead of the store's, which stamps the rows
    due now (a row due later would be a retry in backoff)."""

    def __init__(self) -> None:
        self.now = time.time() + 60

    def __call__(self) -> float:
        return self.now


async def test_dispatcher_answers_a_telegram_album_in_one_turn(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An album's parts come as separate updates, a few milliseconds apart: the first part's
    turn started alone and the rest made a second, so the user got two answers to one album.
    The turn now waits until no part has come for ``album_wait_seconds``. (The parts are texts
    here: what counts is their media_group.)"""
    waits: list[float] = []
    waiting, go_on = asyncio.Event(), asyncio.Event()

    async def held_wait(event: asyncio.Event, seconds: float) -> bool:
        waits.append(seconds)
        waiting.set()
        await go_on.wait()
        go_on.clear()
        return False

    monkeypatch.setattr(_dispatcher, "wait_event", held_wait)
    clock = AlbumClock()
    harness = Harness(store, ScriptedModel(echo()), clock=clock, album_wait_seconds=1.5)

    async def part(n: int) -> str:
        [sid] = await add_inbox(store, inbound(f"photo {n}", n=n, media_group="album-1"))
        harness.dispatcher.wake([sid])
        return sid

    sid = await part(1)
    await asyncio.wait_for(waiting.wait(), 10)  # the lane holds the first part
    waiting.clear()
    await part(2)
    await part(3)
    clock.now += 1.0  # less than the wait since the first part: the last part starts it again
    go_on.set()
    await asyncio.wait_for(waiting.wait(), 10)
    clock.now += 1.5  # no new part for the whole wait
    go_on.set()
    await asyncio.wait_for(harness.dispatcher.wait_idle(), 10)
    assert waits == [1.5, 1.5]
    assert harness.turns("committed") == 1
    assert await harness.user_texts(sid) == ["photo 1\nphoto 2\nphoto 3"]


async def test_dispatcher_answers_a_message_outside_an_album_at_once(store: SQLiteStore) -> None:
    harness = Harness(store, ScriptedModel(echo()), album_wait_seconds=3600)
    sid = await harness.run("hello")
    assert await harness.replies(sid) == ["re: hello"]
