"""A tool result that cannot be sent to the model is an error result, not a failed turn.

A failed turn is retried by the dispatcher, and its tools run again: a result that could not
be serialized once charged a card three times.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any

import pytest

from webhook_bot_gateway.agents import Agent, Registry, Runner, ToolResult, UserInput, tool
from webhook_bot_gateway.agents.testing import ScriptedModel, call, reply
from webhook_bot_gateway.store import SQLiteStore


class Receipt:
    """Not JSON: pydantic cannot serialize it."""


def _circular() -> dict[str, Any]:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    return loop


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (Receipt(), "Unable to serialize unknown type"),
        (_circular(), "Circular reference"),
        (b"\xff\xfe", "invalid utf-8"),
        ({"text": "\ud800"}, "surrogates not allowed"),
        ("lone \udc80 surrogate", "surrogates not allowed"),
    ],
)
async def test_unserializable_result_is_an_error_result(
    value: object, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    @tool
    def odd() -> object:
        """Returns what it is given."""
        return value

    result = await odd.invoke("{}")
    assert result.is_error
    assert result.text.startswith("error: odd returned a result that cannot be sent: ")
    assert why in result.text
    assert "tool odd returned a result that cannot be sent" in caplog.text


async def test_nul_characters_are_replaced_so_the_result_can_be_stored() -> None:
    @tool
    def nul() -> str:
        """Text with a NUL, which PostgreSQL refuses in text columns."""
        return "a\x00b"

    assert await nul.invoke("{}") == ToolResult("a\ufffdb")


async def test_unserializable_result_does_not_fail_the_turn_and_the_tool_runs_once(
    store: SQLiteStore, session_id: str
) -> None:
    charges: list[int] = []

    @tool
    def charge_card(cents: int) -> Receipt:
        """Charge the card on file."""
        charges.append(cents)
        return Receipt()

    model = ScriptedModel(call("charge_card", {"cents": 4900}, id="c1"), reply("Charged."))
    registry = Registry([Agent("triage", "You bill.", [charge_card], model=model)], "triage")
    result = await Runner(store, registry).run_turn(session_id, UserInput("pay"))
    model.assert_done()
    assert charges == [4900]
    assert [r.text for r in result.replies] == ["Charged."]
    answer = model.calls[1].messages[-1]
    assert answer.role == "tool"
    assert answer.text is not None
    assert answer.text.startswith("error: charge_card returned a result that cannot be sent")
    branch = await store.get_branch(session_id)
    assert [m.role for m in branch] == ["user", "assistant", "tool", "assistant"]
    assert branch[2].data == {"tool_call_id": "c1", "name": "charge_card", "is_error": True}


def _exiting_sync() -> str:
    sys.exit(2)  # a CLI library's way out, argparse's on input it refuses


async def _exiting_async() -> str:
    raise SystemExit(2)


def _cancelled_sync() -> str:
    raise asyncio.CancelledError  # a cancelled concurrent future's result(), say


async def _cancelled_async() -> str:
    future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    future.cancel()  # cancelled by the library the tool calls, not by the turn
    return await future


@pytest.mark.parametrize(
    ("body", "raised"),
    [
        (_exiting_sync, "SystemExit"),
        (_exiting_async, "SystemExit"),
        (_cancelled_sync, "CancelledError"),
        (_cancelled_async, "CancelledError"),
    ],
)
@pytest.mark.parametrize("with_cancel", [False, True], ids=["no_cancel", "cancel_event"])
async def test_a_tool_that_exits_or_cancels_itself_gives_an_error_result(
    store: SQLiteStore,
    session_id: str,
    body: Callable[[], Any],
    raised: str,
    with_cancel: bool,
) -> None:
    """SystemExit used to leave the event loop (the process stopped, and its restart ran the
    turn again, and stopped again); a CancelledError of the tool's own passed for the turn's
    cancel (a shutdown), so the dispatcher ran the turn again, tool and all, counting no try."""
    calls: list[int] = []

    async def charge_async(cents: int) -> str:
        calls.append(cents)
        return str(await body())

    def charge_sync(cents: int) -> str:
        calls.append(cents)
        return str(body())

    function = charge_async if asyncio.iscoroutinefunction(body) else charge_sync
    charge = tool(name="charge_card", description="Charge the card.")(function)
    model = ScriptedModel(call("charge_card", {"cents": 4900}), reply("It did not work."))
    registry = Registry([Agent("triage", "You bill.", [charge], model=model)], "triage")
    cancel = asyncio.Event() if with_cancel else None  # a web session's turn has one
    result = await Runner(store, registry).run_turn(session_id, UserInput("pay"), cancel=cancel)
    model.assert_done()
    assert calls == [4900]
    assert not result.cancelled
    assert [r.text for r in result.replies] == ["It did not work."]
    answer = model.calls[1].messages[-1]
    assert answer.text == f"error: charge_card failed: raised {raised}"


async def test_a_turn_cancelled_while_its_tool_runs_still_stops(
    store: SQLiteStore, session_id: str
) -> None:
    started, cancel = asyncio.Event(), asyncio.Event()

    @tool
    async def slow() -> str:
        """Waits until the turn is cancelled."""
        started.set()
        await asyncio.Event().wait()
        return "never"

    model = ScriptedModel(call("slow"))
    registry = Registry([Agent("triage", "You wait.", [slow], model=model)], "triage")
    running = asyncio.create_task(
        Runner(store, registry).run_turn(session_id, UserInput("wait"), cancel=cancel)
    )
    await asyncio.wait_for(started.wait(), 5)
    cancel.set()
    result = await asyncio.wait_for(running, 5)
    assert result.cancelled
    assert [m.role for m in await store.get_branch(session_id)] == ["user"]
