"""A tool result that cannot be sent to the model is an error result, not a failed turn.

A failed turn is retried by the dispatcher, and its tools run again: a result that could not
be serialized once charged a card three times.
"""

from __future__ import annotations

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
