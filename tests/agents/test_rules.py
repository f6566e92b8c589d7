"""The ``rules`` backend: first matching rule; tool results answered; no loops."""

from __future__ import annotations

import json
import logging

import pytest

from webhook_bot_gateway.agents import (
    Agent,
    ModelMessage,
    ModelResponse,
    Registry,
    Rule,
    RulesModel,
    Runner,
    ToolCall,
    ToolFailed,
    UserInput,
    tool,
)
from webhook_bot_gateway.store import SQLiteStore

from .conftest import make_registry

RULES = RulesModel(
    [
        Rule(match=r"\bmenu\b", handoff="triage", reply="Back to the menu."),
        Rule(
            match=r"(?P<number>INV-\d+)",
            tool="lookup_invoice",
            arguments={"number": "{number}"},
            reply="{number}: {result}",
        ),
        Rule(reply="Send an invoice number.", buttons=("menu",)),
    ]
)


def user(text: str) -> ModelMessage:
    return ModelMessage("user", text)


async def test_rules_first_match_calls_tool_with_named_groups() -> None:
    response = await RULES.complete([user("where is inv-1001?")], [])
    assert response.text is None
    [call] = response.tool_calls
    assert call.name == "lookup_invoice"
    assert json.loads(call.arguments) == {"number": "inv-1001"}


async def test_rules_answers_with_the_tool_result() -> None:
    call = ToolCall("c1", "lookup_invoice", "{}")
    context = [
        user("INV-1001"),
        ModelMessage("assistant", None, (call,)),
        ModelMessage("tool", "paid", tool_call_id="c1", name="lookup_invoice"),
    ]
    assert await RULES.complete(context, []) == ModelResponse(text="INV-1001: paid")


async def test_rules_handoff_with_reply() -> None:
    response = await RULES.complete([user("Menu please")], [])
    assert response.text == "Back to the menu."
    assert [c.name for c in response.tool_calls] == ["transfer_to_triage"]


@pytest.mark.parametrize("result", ["error: no", "Transferred to triage."])
async def test_rules_handoff_made_or_refused_this_turn_gives_way_to_the_next_rule(
    result: str,
) -> None:
    """Refused, or handed back to this agent: the next rule that matches answers, rather than
    the handoff again (a loop) or nothing (the user left without a word)."""
    call = ToolCall("c1", "transfer_to_triage", "{}")
    context = [
        user("menu"),
        ModelMessage("assistant", None, (call,)),
        ModelMessage("tool", result, tool_call_id="c1", name="transfer_to_triage"),
    ]
    assert await RULES.complete(context, []) == ModelResponse(
        text="Send an invoice number.", buttons=("menu",)
    )


async def test_rules_handoff_of_an_earlier_turn_is_made_again() -> None:
    call = ToolCall("c1", "transfer_to_triage", "{}")
    context = [
        user("menu"),
        ModelMessage("assistant", None, (call,)),
        ModelMessage(
            "tool", "Transferred to triage.", tool_call_id="c1", name="transfer_to_triage"
        ),
        user("menu again"),
    ]
    response = await RULES.complete(context, [])
    assert [c.name for c in response.tool_calls] == ["transfer_to_triage"]


async def test_rules_default_reply_with_buttons() -> None:
    response = await RULES.complete([ModelMessage("system", "x"), user("hello")], [])
    assert response == ModelResponse(text="Send an invoice number.", buttons=("menu",))


async def test_rules_matches_the_last_user_message_only() -> None:
    context = [user("INV-1"), ModelMessage("assistant", "ok"), user("thanks")]
    assert (await RULES.complete(context, [])).text == "Send an invoice number."


async def test_rules_without_match_gives_empty_answer() -> None:
    model = RulesModel([Rule(match="^yes$", reply="ok")])
    assert await model.complete([user("no")], []) == ModelResponse()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"match": "x"}, "needs a reply, a tool or a handoff"),
        ({"tool": "t", "handoff": "a"}, "not both"),
        ({"match": "(", "reply": "x"}, "bad pattern"),
        ({"match": "(?P<n>x)", "reply": "{m}"}, "unknown template field"),
        ({"reply": "{result}"}, "unknown template field"),
        ({"tool": "t", "arguments": {"a": "{missing}"}}, "unknown template field"),
    ],
)
def test_rule_rejects_inconsistent_declarations(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Rule(**kwargs)  # type: ignore[arg-type]


async def test_rules_reply_that_renders_blank_is_no_answer_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = RulesModel([Rule(match=r"^(?P<word>[a-z]*)", reply="{word}  \n")])
    with caplog.at_level(logging.WARNING, logger="agents.rules"):
        assert await model.complete([user("  !")], []) == ModelResponse()
    assert "rules[0]: the reply renders to blank text: no answer" in caplog.text


async def test_rules_blank_reply_is_not_stored_or_sent(store: SQLiteStore, session_id: str) -> None:
    """It was stored as the assistant's answer and sent: the sender refused it ("nothing to
    send") and dead-lettered the row, and the user got nothing."""
    model = RulesModel([Rule(match=r"^(?P<word>[a-z]*)", reply="{word} ")])
    runner = Runner(store, make_registry(model))
    result = await runner.run_turn(session_id, UserInput("  !"))
    assert result.replies == ()
    assert [m.role for m in await store.get_branch(session_id)] == ["user"]


SECRET = "postgres://crm:hunter2@10.0.0.5/crm"


@tool
def crm_lookup(number: int) -> str:
    """Look a customer up."""
    raise ConnectionError(f"could not connect to {SECRET}")


def crm_registry(arguments: dict[str, str]) -> Registry:
    rule = Rule(
        match=r"(?P<n>\S+)", tool="crm_lookup", arguments=arguments, reply="Customer: {result}"
    )
    agent = Agent("triage", tools=[crm_lookup], model=RulesModel([rule]))
    return Registry([agent], "triage")


@pytest.mark.parametrize(
    ("text", "failure"),
    [
        ("42", "raised ConnectionError"),
        ("forty-two", "invalid arguments (number: int_parsing)"),
    ],
    ids=["tool-raises", "invalid-arguments"],
)
async def test_rules_tool_error_fails_the_turn_and_never_reaches_the_user(
    store: SQLiteStore,
    session_id: str,
    caplog: pytest.LogCaptureFixture,
    text: str,
    failure: str,
) -> None:
    """The user was sent 'Customer: error: crm_lookup failed: ConnectionError: could not
    connect to postgres://crm:hunter2@...'. Now the turn fails (rolled back; the dispatcher
    retries it and then sends its apology), and neither its error nor the log names the
    tool's message."""
    runner = Runner(store, crm_registry({"number": "{n}"}))
    with caplog.at_level(logging.INFO), pytest.raises(ToolFailed) as caught:
        await runner.run_turn(session_id, UserInput(text))
    assert str(caught.value) == (
        f"agent 'triage': tool 'crm_lookup' failed: {failure}"
        " (a rules agent has no model to tell, so the turn fails)"
    )
    assert await store.get_branch(session_id) == []  # rolled back: nothing to send
    assert "hunter2" not in caplog.text
    assert "forty-two" not in str(caught.value)  # the user's text is not in the stored error


async def test_a_raising_tools_message_is_logged_at_debug_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG, logger="agents.tools"):
        result = await crm_lookup.invoke('{"number": 1}')
    assert result.is_error  # a model still reads the whole error, as documented
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == ["tool crm_lookup raised ConnectionError"]
    assert [r for r in caplog.records if r.levelno >= logging.INFO and r.exc_info] == []
    assert "hunter2" in caplog.text  # the traceback, at DEBUG
