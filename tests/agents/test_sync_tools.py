"""Sync tools run in threads of their own: the event loop serves webhooks and other turns
meanwhile, and the turn's timeout fires while one hangs, naming it (agents/_tool_threads.py)."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar

import pytest

from webhook_bot_gateway.agents import (
    Reply,
    Runner,
    Tool,
    ToolContext,
    ToolError,
    ToolResult,
    TurnTimeout,
    UserInput,
    tool,
)
from webhook_bot_gateway.agents._tool_threads import ToolThreads
from webhook_bot_gateway.agents.testing import Hang, ScriptedModel, call, reply
from webhook_bot_gateway.store import SQLiteStore

from .conftest import make_registry

PERSONAL = "Jane Doe, 12 Main Street"  # an argument's value: never in a line or an error


async def until(done: Callable[[], bool], seconds: float = 10.0) -> None:
    """Poll ``done`` from the loop (a test that awaited a thread would prove nothing)."""
    for _ in range(int(seconds / 0.005)):
        if done():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"not done after {seconds:g} s")


class Gate:
    """A sync tool ``wait_here`` that blocks its thread until the test releases it (or 10 s
    pass: a tool run on the loop, which then cannot run the test, fails the test, not hangs)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.returned = threading.Event()
        self.threads: list[str] = []
        self.contexts: list[ToolContext] = []
        gate = self

        @tool
        def wait_here(note: str, call: ToolContext) -> str:
            """Wait until the test says so."""
            gate.threads.append(threading.current_thread().name)
            gate.contexts.append(call)
            gate.entered.set()
            released = gate.release.wait(10)
            gate.returned.set()
            return "released" if released else "never released"

        self.tool: Tool = wait_here


@pytest.fixture
def gate() -> Iterator[Gate]:
    opened = Gate()
    yield opened
    opened.release.set()  # no thread stays blocked past the test


async def test_a_sync_tool_runs_in_a_thread_while_the_loop_serves_other_turns(
    store: SQLiteStore, session_id: str, gate: Gate
) -> None:
    """A ``time.sleep(8)`` tool made /healthz take 7.6 s and every other turn stall."""
    triage = ScriptedModel(reply("Hi."))
    billing = ScriptedModel(call("wait_here", {"note": "n"}, id="c1"), reply("Done."))
    await store.update_session(session_id, active_agent="billing")
    runner = Runner(store, make_registry(triage, billing, billing_tools=(gate.tool,)))
    slow = asyncio.create_task(runner.run_turn(session_id, UserInput("wait")))
    await until(gate.entered.is_set)

    ticks = 0
    for _ in range(5):  # the test's own coroutine goes on...
        await asyncio.sleep(0.01)
        ticks += 1
    other = await store.create_session("test", "bot", "43", "triage")
    fast = await runner.run_turn(other.session_id, UserInput("hello"))  # ...and another turn
    assert ticks == 5
    assert fast.replies == (Reply("Hi.", "triage"),)
    assert not slow.done()
    assert not gate.returned.is_set()

    gate.release.set()
    result = await asyncio.wait_for(slow, 10)
    assert result.replies == (Reply("Done.", "billing"),)
    branch = await store.get_branch(session_id)
    assert [(m.role, m.text) for m in branch] == [
        ("user", "wait"),
        ("assistant", None),
        ("tool", "released"),
        ("assistant", "Done."),
    ]
    [thread] = gate.threads
    assert thread.startswith("tool-")
    assert thread != threading.main_thread().name


REQUEST: ContextVar[str] = ContextVar("request", default="unset")


async def test_a_sync_tool_sees_the_callers_context_variables_and_its_tool_context(
    store: SQLiteStore, session_id: str
) -> None:
    """The log's fields live in a context variable (gateway/_log_context.py): the thread gets
    the turn's context as a task would."""

    @tool
    def where(call: ToolContext) -> str:
        """Say where it runs."""
        REQUEST.set("changed in the tool")  # its own copy: the turn's is untouched
        return f"{threading.current_thread().name[:5]} {call.session_id} {call.agent}"

    @tool
    def request() -> str:
        """The request variable."""
        return REQUEST.get()

    billing = ScriptedModel(call("where", id="c1"), call("request", id="c2"), reply("Ok."))
    await store.update_session(session_id, active_agent="billing")
    runner = Runner(store, make_registry(ScriptedModel(), billing, billing_tools=(where, request)))
    REQUEST.set("req-7")
    await runner.run_turn(session_id, UserInput("where?"))
    texts = [m.text for m in await store.get_branch(session_id) if m.role == "tool"]
    assert texts == [f"tool- {session_id} billing", "req-7"]
    assert REQUEST.get() == "req-7"


@tool(name="fails")
def fails_sync(kind: str) -> str:
    """Fail."""
    if kind == "tool":
        raise ToolError("no invoice INV-9")
    raise ConnectionError(f"could not connect for {PERSONAL}")


@tool(name="fails")
async def fails_async(kind: str) -> str:
    """Fail."""
    result: str = fails_sync(kind=kind)
    return result


@pytest.mark.parametrize("kind", ["tool", "other"])
async def test_a_sync_tools_exception_is_reported_as_an_async_ones(
    caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    """Raised in the thread, it reaches ``invoke`` as it did on the loop: the same result,
    the same lines (the message at DEBUG only)."""
    seen = []
    for fails in (fails_sync, fails_async):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="agents.tools"):
            result = await fails.invoke(f'{{"kind": "{kind}"}}')
        seen.append(
            (result, result.failure, [(r.levelname, r.getMessage()) for r in caplog.records])
        )
    assert seen[0] == seen[1]
    assert PERSONAL not in repr(seen)
    if kind == "tool":
        assert seen[0][0] == ToolResult("error: fails failed: no invoice INV-9", is_error=True)
    else:
        assert seen[0][0] == ToolResult(
            "error: fails failed: raised ConnectionError", is_error=True
        )
        assert seen[0][2] == [("WARNING", "tool fails raised ConnectionError")]


async def test_a_turn_times_out_while_its_sync_tool_hangs_and_names_the_tool(
    store: SQLiteStore, session_id: str, gate: Gate, caplog: pytest.LogCaptureFixture
) -> None:
    """The timeout fires on time (the loop is free), names what the turn was waiting on and
    not the call's arguments; the thread keeps running until the tool returns, and what it
    returns then is dropped, with a line that says so."""
    billing = ScriptedModel(call("wait_here", {"note": PERSONAL}))
    await store.update_session(session_id, active_agent="billing")
    runner = Runner(
        store, make_registry(ScriptedModel(), billing, billing_tools=(gate.tool,)), turn_timeout=1
    )
    started = time.monotonic()
    with caplog.at_level(logging.INFO), pytest.raises(TurnTimeout) as caught:
        await runner.run_turn(session_id, UserInput("wait"))
    assert time.monotonic() - started < 5  # the tool waits 10 s unless released
    assert str(caught.value) == (
        f"session {session_id!r}: turn took longer than 1s"
        " (it was waiting on the tool 'wait_here'); rolled back"
    )
    assert caught.value.waiting_on == "the tool 'wait_here'"
    assert await store.get_branch(session_id) == []  # rolled back
    assert not gate.returned.is_set()  # a thread cannot be stopped

    gate.release.set()
    await until(lambda: "dropped" in caplog.text)
    dropped = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert len(dropped) == 1
    assert re.fullmatch(
        r"tool wait_here returned \d+\.\d s after its turn stopped waiting for it:"
        r" the result was dropped",
        dropped[0],
    )
    assert PERSONAL not in caplog.text
    assert await store.get_branch(session_id) == []


async def test_a_turn_that_times_out_waiting_on_the_model_names_the_model(
    store: SQLiteStore, session_id: str
) -> None:
    runner = Runner(store, make_registry(ScriptedModel(Hang())), turn_timeout=0.05)
    with pytest.raises(TurnTimeout) as caught:
        await runner.run_turn(session_id, UserInput("hello"))
    assert str(caught.value) == (
        f"session {session_id!r}: turn took longer than 0.05s"
        " (it was waiting on the model 'ScriptedModel'); rolled back"
    )


async def test_a_sync_tool_call_that_waited_for_a_thread_never_starts_once_abandoned(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, gate: Gate
) -> None:
    """With every thread taken by hung tools, a call waits in the queue; when its caller
    stops waiting (the turn's timeout), it is taken out: it does not run later."""
    monkeypatch.setattr("webhook_bot_gateway.agents._tools.TOOL_THREADS", ToolThreads(1))
    runs: list[str] = []

    @tool
    def quick(label: str) -> str:
        """Answer at once."""
        runs.append(label)
        return label

    context = ToolContext("s", "a", "k", "t", (), "c")
    hung = asyncio.create_task(gate.tool.invoke('{"note": "n"}', context))
    await until(gate.entered.is_set)
    with caplog.at_level(logging.WARNING, logger="agents.tools"), pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await quick.invoke('{"label": "abandoned"}')
    assert caplog.messages == [
        "tool quick waits for a thread: all 1 threads for sync tools are busy"
    ]
    gate.release.set()
    assert await asyncio.wait_for(hung, 10) == ToolResult("released")
    # One thread, first come first served: the abandoned call would have run before this one.
    assert await quick.invoke('{"label": "next"}') == ToolResult("next")
    assert runs == ["next"]


def test_tool_threads_start_no_more_than_their_bound_and_reuse_them() -> None:
    threads = ToolThreads(2, name="bounded")
    release = threading.Event()
    names: list[str] = []

    def block() -> str:
        names.append(threading.current_thread().name)
        release.wait(10)
        return "done"

    futures = [threads.submit(block) for _ in range(3)]
    deadline = time.monotonic() + 10
    while threads.busy < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert (threads.started, threads.busy) == (2, 2)
    assert not futures[2].running()  # waits for a thread
    release.set()
    assert [f.result(10) for f in futures] == ["done"] * 3
    assert [threads.submit(lambda: 5).result(10) for _ in range(10)] == [5] * 10
    assert threads.started == 2
    assert set(names) == {"bounded-1", "bounded-2"}


def test_tool_threads_hand_an_exception_to_the_caller() -> None:
    def boom() -> None:
        raise KeyError("k")

    with pytest.raises(KeyError):
        ToolThreads(1).submit(boom).result(10)
