"""The context a model receives: instructions first, then whole turns only."""

from __future__ import annotations

from webhook_bot_gateway.agents import Runner, UserInput
from webhook_bot_gateway.agents.testing import ScriptedModel, reply
from webhook_bot_gateway.store import NewMessage, SQLiteStore

from .conftest import make_registry


async def _long_history(store: SQLiteStore, session_id: str, turns: int) -> None:
    """``turns`` turns, each: user, assistant calling a tool, the tool result, an answer."""
    async with store.turn(session_id) as turn:
        turn.append(NewMessage("system", "Conversation started."))
        for n in range(turns):
            call = {"id": f"call-{n}", "name": "lookup_invoice", "arguments": "{}"}
            turn.append(NewMessage("user", f"question {n}"))
            turn.append(NewMessage("assistant", None, "triage", {"tool_calls": [call]}))
            turn.append(NewMessage("tool", f"result {n}", "triage", {"tool_call_id": f"call-{n}"}))
            turn.append(NewMessage("assistant", f"answer {n}", "triage"))


async def test_context_of_200_turns_keeps_40_whole_turns(
    store: SQLiteStore, session_id: str
) -> None:
    await _long_history(store, session_id, 200)
    model = ScriptedModel(reply("ok"))
    runner = Runner(store, make_registry(model), max_turns=40)
    await runner.run_turn(session_id, UserInput("question 200"))
    [seen] = model.calls
    messages = seen.messages
    # system first: the agent's instructions, then the history's system message
    assert [(m.role, m.text) for m in messages[:2]] == [
        ("system", "You route."),
        ("system", "Conversation started."),
    ]
    body = messages[2:]
    assert all(m.role != "system" for m in body)
    # 40 whole turns: 39 stored ones (161..199) and the current one; starts with a user message
    users = [m.text for m in body if m.role == "user"]
    assert users == [f"question {n}" for n in range(161, 201)]
    assert body[0].role == "user"
    assert len(body) == 39 * 4 + 1
    # no orphaned tool result: each follows the assistant message that made its call
    for index, message in enumerate(body):
        if message.role == "tool":
            previous = body[index - 1]
            assert previous.role == "assistant"
            assert [c.id for c in previous.tool_calls] == [message.tool_call_id]
    assert [m.text for m in body[1:5]] == [None, "result 161", "answer 161", "question 162"]


async def test_context_without_instructions_has_no_empty_system_message(
    store: SQLiteStore, session_id: str
) -> None:
    from webhook_bot_gateway.agents import Agent, Registry

    model = ScriptedModel(reply("ok"))
    runner = Runner(store, Registry([Agent("triage", model=model)], "triage"))
    await runner.run_turn(session_id, UserInput("hi"))
    assert [m.role for m in model.calls[0].messages] == ["user"]
