"""The ``rules`` backend: first matching rule; tool results answered; no loops."""

from __future__ import annotations

import json

import pytest

from webhook_bot_gateway.agents import ModelMessage, ModelResponse, Rule, RulesModel, ToolCall

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


async def test_rules_failed_handoff_is_not_repeated() -> None:
    call = ToolCall("c1", "transfer_to_triage", "{}")
    context = [
        user("menu"),
        ModelMessage("assistant", None, (call,)),
        ModelMessage("tool", "error: no", tool_call_id="c1", name="transfer_to_triage"),
    ]
    assert await RULES.complete(context, []) == ModelResponse()


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
