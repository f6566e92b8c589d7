"""What was said before the user's first message reaches the model.

An operator may write first (or an agent greet); the history then starts with assistant
messages. Providers want the conversation after the system messages to start with a user
message, so those messages are not sent as assistant messages: they become one system note,
after the other system messages.
"""

from __future__ import annotations

from webhook_bot_gateway.agents import Agent, Registry, Runner, UserInput
from webhook_bot_gateway.agents._context import build_context
from webhook_bot_gateway.agents.testing import ScriptedModel, reply
from webhook_bot_gateway.store import NewMessage, SQLiteStore

AGENT = Agent("triage", "You route.")
NOTE = "Before the user's first message, the user was sent:"


async def test_operator_who_wrote_first_is_seen_after_the_handback(
    store: SQLiteStore, session_id: str
) -> None:
    await store.append_message(session_id, "system", "Conversation started.")
    await store.update_session(session_id, active_agent="human")
    for text in ("Your parcel is held at customs.", "Reply here if you need help."):
        async with store.turn(session_id) as turn:  # as the admin API's operator reply does
            turn.append(NewMessage("assistant", text, "operator", {"operator": "ann"}))
    await store.set_agent(session_id, "triage", reason="operator")  # handed back
    model = ScriptedModel(reply("It should arrive Friday."))
    runner = Runner(store, Registry([Agent("triage", "You route.", model=model)], "triage"))
    await runner.run_turn(session_id, UserInput("when will it come?"))
    messages = model.calls[0].messages
    assert [m.role for m in messages] == ["system", "system", "system", "user"]
    assert [m.text for m in messages[:2]] == ["You route.", "Conversation started."]
    assert messages[2].text == (
        "Before the user's first message, the user was sent:\n"
        "[operator] Your parcel is held at customs.\n"
        "[operator] Reply here if you need help."
    )
    assert messages[3].text == "when will it come?"


def test_leading_tool_traffic_is_left_out_and_texts_kept() -> None:
    call = {"id": "c1", "name": "t", "arguments": "{}"}
    history = [
        NewMessage("assistant", "Hello!", "triage", {"tool_calls": [call]}),
        NewMessage("tool", "result", "triage", {"tool_call_id": "c1", "name": "t"}),
        NewMessage("assistant", None, "triage", {"tool_calls": [call]}),
        NewMessage("user", "hi"),
        NewMessage("tool", "late", "triage", {"tool_call_id": "c1", "name": "t"}),  # orphan
    ]
    context = build_context(AGENT, history, 5)
    assert [(m.role, m.text) for m in context] == [
        ("system", "You route."),
        ("system", f"{NOTE}\n[triage] Hello!"),
        ("user", "hi"),
    ]


def test_leading_messages_go_once_the_window_is_full() -> None:
    """They count as a turn of their own: kept only while fewer than max_turns user turns are."""
    history = [NewMessage("assistant", "Hello!", "operator")]
    history += [NewMessage("user", f"q{n}") for n in range(3)]
    kept = build_context(AGENT, history, 4)
    assert [m.role for m in kept] == ["system", "system", "user", "user", "user"]
    full = build_context(AGENT, history, 3)
    assert [m.role for m in full] == ["system", "user", "user", "user"]


def test_no_user_message_at_all() -> None:
    history = [NewMessage("assistant", "Hello!", None)]
    assert [(m.role, m.text) for m in build_context(Agent("a"), history, 2)] == [
        ("system", f"{NOTE}\n[assistant] Hello!")
    ]
