"""The runner on a real SQLite file with scripted models: tools, handoffs, limits, one commit."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from webhook_bot_gateway.agents import (
    Agent,
    ModelResponse,
    Registry,
    Reply,
    Runner,
    StepLimitExceeded,
    UserInput,
    tool,
)
from webhook_bot_gateway.agents.testing import Hang, ScriptedModel, call, reply, tool_call, transfer
from webhook_bot_gateway.store import SQLiteStore, Turn, TurnActive

from .conftest import dump_tables, make_registry


async def test_runner_plain_reply_commits_user_and_assistant(
    store: SQLiteStore, session_id: str
) -> None:
    model = ScriptedModel(reply("Hello!", "Billing"))
    runner = Runner(store, make_registry(model))
    result = await runner.run_turn(session_id, UserInput("hi", {"message_id": "m1"}))
    model.assert_done()
    assert result.replies == (Reply("Hello!", "triage", ("Billing",)),)
    assert (result.agent_before, result.agent_after) == ("triage", "triage")
    branch = await store.get_branch(session_id)
    assert [m.id for m in branch] == list(result.message_ids)
    assert [(m.role, m.text, m.agent) for m in branch] == [
        ("user", "hi", None),
        ("assistant", "Hello!", "triage"),
    ]
    assert branch[0].data == {"message_id": "m1"}
    assert branch[1].data == {"buttons": ["Billing"]}
    session = await store.get_session(session_id)
    assert session is not None
    assert session.status == "idle"


async def test_runner_gives_model_instructions_history_and_tools(
    store: SQLiteStore, session_id: str
) -> None:
    model = ScriptedModel(reply("one"), reply("two"))
    runner = Runner(store, make_registry(model, ScriptedModel()))
    await runner.run_turn(session_id, UserInput("first"))
    await runner.run_turn(session_id, UserInput("second"))
    seen = model.calls[1]
    assert [(m.role, m.text) for m in seen.messages] == [
        ("system", "You route."),
        ("user", "first"),
        ("assistant", "one"),
        ("user", "second"),
    ]
    assert seen.tool_names == ["transfer_to_billing", "transfer_to_human"]
    assert seen.tools[0].parameters == {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }


async def test_runner_stores_a_nul_character_from_the_model_or_a_tool_as_u_fffd(
    store: SQLiteStore, session_id: str
) -> None:
    """The store refuses U+0000 in a message (PostgreSQL cannot hold one): the turn commits
    with U+FFFD in its place instead of failing."""

    @tool
    def read_label(number: str) -> str:
        """The label printed on an invoice."""
        return f"label\x00{number}"

    billing = ScriptedModel(call("read_label", {"number": "7"}, id="c1"), reply("P\x00aid."))
    await store.update_session(session_id, active_agent="billing")
    runner = Runner(store, make_registry(ScriptedModel(), billing, billing_tools=(read_label,)))
    result = await runner.run_turn(session_id, UserInput("hi"))
    assert result.replies == (Reply("P\ufffdaid.", "billing"),)
    branch = await store.get_branch(session_id)
    assert [m.text for m in branch[2:]] == ["label\ufffd7", "P\ufffdaid."]


async def test_runner_tool_call_then_answer(store: SQLiteStore, session_id: str) -> None:
    billing = ScriptedModel(call("lookup_invoice", {"number": "INV-7"}, id="c1"), reply("Paid."))
    await store.update_session(session_id, active_agent="billing")
    runner = Runner(store, make_registry(ScriptedModel(), billing))
    result = await runner.run_turn(session_id, UserInput("INV-7?"))
    billing.assert_done()
    tool_msg = billing.calls[1].messages[-1]
    assert (tool_msg.role, tool_msg.tool_call_id, tool_msg.text) == (
        "tool",
        "c1",
        "INV-7: 49.00 EUR, paid",
    )
    branch = await store.get_branch(session_id)
    assert [m.role for m in branch] == ["user", "assistant", "tool", "assistant"]
    assert branch[1].data == {
        "tool_calls": [{"id": "c1", "name": "lookup_invoice", "arguments": '{"number": "INV-7"}'}]
    }
    assert branch[2].data == {"tool_call_id": "c1", "name": "lookup_invoice"}
    assert result.replies == (Reply("Paid.", "billing"),)


async def test_runner_handoff_new_agent_answers_same_turn(
    store: SQLiteStore, session_id: str
) -> None:
    triage = ScriptedModel(transfer("billing"))
    billing = ScriptedModel(reply("Billing here."))
    runner = Runner(store, make_registry(triage, billing))
    result = await runner.run_turn(session_id, UserInput("my invoice"))
    triage.assert_done()
    billing.assert_done()
    assert (result.agent_before, result.agent_after) == ("triage", "billing")
    assert result.replies == (Reply("Billing here.", "billing"),)
    seen = billing.calls[0]
    assert seen.messages[0].text == "You do billing."
    assert [m.role for m in seen.messages[1:]] == ["user", "assistant", "tool"]
    assert seen.messages[-1].text == "Transferred to billing."
    assert seen.tool_names == ["lookup_invoice", "transfer_to_triage"]
    session = await store.get_session(session_id)
    assert session is not None
    assert session.active_agent == "billing"
    events = await store.list_events(session_id)
    assert [(e.kind, e.detail) for e in events] == [
        ("turn_started", {}),
        ("agent_changed", {"from": "triage", "to": "billing", "reason": "handoff"}),
        (
            "message",
            {
                "message_id": result.message_ids[-1],
                "role": "assistant",
                "text": "Billing here.",
                "agent": "billing",
                "attachments": [],
            },
        ),
        ("turn_finished", {"replies": 1}),
    ]
    assert [e.seq for e in events] == [1, 2, 3, 4]


async def test_runner_handoff_bound_refuses_further_handoffs(
    store: SQLiteStore, session_id: str
) -> None:
    triage = ScriptedModel(transfer("billing"), transfer("billing"), reply("triage again"))
    billing = ScriptedModel(transfer("triage"))
    runner = Runner(store, make_registry(triage, billing), max_handoffs=2)
    result = await runner.run_turn(session_id, UserInput("loop"))
    triage.assert_done()
    billing.assert_done()
    assert result.agent_after == "triage"
    refused = triage.calls[2].messages[-1]
    assert refused.role == "tool"
    assert refused.text == "error: no more handoffs in this turn; answer the user"
    events = await store.list_events(session_id)
    assert [e.kind for e in events].count("agent_changed") == 2


async def test_runner_takes_only_the_first_handoff_of_an_answer(
    store: SQLiteStore, session_id: str
) -> None:
    both = ModelResponse(
        tool_calls=(tool_call("transfer_to_billing"), tool_call("transfer_to_human"))
    )
    billing = ScriptedModel(reply("ok"))
    runner = Runner(store, make_registry(ScriptedModel(both), billing))
    result = await runner.run_turn(session_id, UserInput("x"))
    assert result.agent_after == "billing"
    tool_texts = [m.text for m in billing.calls[0].messages if m.role == "tool"]
    assert tool_texts == [
        "Transferred to billing.",
        "error: one handoff per answer; this one was ignored",
    ]


async def test_runner_handoff_to_human_tells_user_once_then_stays_silent(
    store: SQLiteStore, session_id: str
) -> None:
    triage = ScriptedModel(transfer("human"))
    runner = Runner(store, make_registry(triage))
    first = await runner.run_turn(session_id, UserInput("a person please"))
    assert first.replies == (Reply("A person will answer.", "human"),)
    assert first.agent_after == "human"
    second = await runner.run_turn(session_id, UserInput("hello?"))
    triage.assert_done()  # no model call for the human agent
    assert second.replies == ()
    branch = await store.get_branch(session_id)
    assert [(m.role, m.text) for m in branch][-2:] == [
        ("assistant", "A person will answer."),
        ("user", "hello?"),
    ]


OFFERED = "lookup_invoice, transfer_to_triage"


async def test_runner_unknown_tool_and_bad_arguments_are_tool_errors(
    store: SQLiteStore, session_id: str
) -> None:
    calls = ModelResponse(
        tool_calls=(
            tool_call("no_such_tool", id="a"),
            tool_call("lookup_invoice", '{"number": ', id="b"),
            tool_call("transfer_to_nowhere", id="c"),
        )
    )
    billing = ScriptedModel(calls, reply("Sorry."))
    await store.update_session(session_id, active_agent="billing")
    runner = Runner(store, make_registry(ScriptedModel(), billing))
    await runner.run_turn(session_id, UserInput("x"))
    results = [m for m in billing.calls[1].messages if m.role == "tool"]
    assert [(m.tool_call_id, m.text) for m in results] == [
        ("a", f"error: unknown tool 'no_such_tool'; the tools offered are: {OFFERED}"),
        ("b", results[1].text),
        ("c", f"error: unknown tool 'transfer_to_nowhere'; the tools offered are: {OFFERED}"),
    ]
    assert results[1].text is not None
    assert results[1].text.startswith("error: the arguments are not valid JSON")
    stored = [m for m in await store.get_branch(session_id) if m.role == "tool"]
    assert all(m.data.get("is_error") for m in stored)


async def test_runner_step_limit_raises_and_rolls_back(store: SQLiteStore, session_id: str) -> None:
    billing = ScriptedModel(*[call("lookup_invoice", {"number": "1"}) for _ in range(3)])
    await store.update_session(session_id, active_agent="billing")
    runner = Runner(store, make_registry(ScriptedModel(), billing), max_steps=3)
    with pytest.raises(StepLimitExceeded, match="after 3 model calls"):
        await runner.run_turn(session_id, UserInput("x"))
    assert await store.get_branch(session_id) == []


async def test_runner_refuses_a_second_concurrent_turn(store: SQLiteStore, session_id: str) -> None:
    hang = Hang()
    runner = Runner(store, make_registry(ScriptedModel(hang)))
    first = asyncio.create_task(runner.run_turn(session_id, UserInput("one")))
    await hang.started.wait()
    with pytest.raises(TurnActive):
        await runner.run_turn(session_id, UserInput("two"))
    hang.release.set()
    result = await first
    assert result.replies == ()
    branch = await store.get_branch(session_id)
    assert [m.text for m in branch] == ["one"]


async def test_runner_empty_model_answer_ends_turn_without_reply(
    store: SQLiteStore, session_id: str
) -> None:
    runner = Runner(store, make_registry(ScriptedModel(ModelResponse())))
    result = await runner.run_turn(session_id, UserInput("x"))
    assert result.replies == ()
    assert [m.role for m in await store.get_branch(session_id)] == ["user"]


async def test_runner_text_with_tool_call_is_a_reply_too(
    store: SQLiteStore, session_id: str
) -> None:
    triage = ScriptedModel(
        ModelResponse(text="Passing you on.", tool_calls=(tool_call("transfer_to_billing"),))
    )
    runner = Runner(store, make_registry(triage, ScriptedModel(reply("Billing."))))
    result = await runner.run_turn(session_id, UserInput("x"))
    assert [r.text for r in result.replies] == ["Passing you on.", "Billing."]


async def test_runner_rejects_non_positive_max_turns(store: SQLiteStore) -> None:
    registry = Registry([Agent("a", model=ScriptedModel())], "a")
    with pytest.raises(ValueError, match="max_turns"):
        Runner(store, registry, max_turns=0)


def test_runner_arguments_json_is_kept_verbatim() -> None:
    assert json.loads(call("x", {"a": 1}).tool_calls[0].arguments) == {"a": 1}


async def test_runner_before_commit_writes_with_the_turn(
    store: SQLiteStore, session_id: str
) -> None:
    seen: list[tuple[str, ...]] = []

    def hook(turn: Turn, replies: Sequence[Reply]) -> None:
        seen.append(tuple(r.text for r in replies))
        turn.update_metadata({"answered": len(replies)})

    runner = Runner(store, make_registry(ScriptedModel(reply("Hello!"))))
    await runner.run_turn(session_id, UserInput("hi"), before_commit=hook)
    assert seen == [("Hello!",)]
    session = await store.get_session(session_id)
    assert session is not None
    assert session.metadata["answered"] == 1


async def test_runner_before_commit_failure_rolls_the_turn_back(
    store: SQLiteStore, session_id: str, db_path: Path
) -> None:
    def hook(turn: Turn, replies: Sequence[Reply]) -> None:
        turn.update_metadata({"answered": True})
        raise RuntimeError("outbox refused")

    before = dump_tables(db_path)
    runner = Runner(store, make_registry(ScriptedModel(reply("Hello!"))))
    with pytest.raises(RuntimeError, match="outbox refused"):
        await runner.run_turn(session_id, UserInput("hi"), before_commit=hook)
    assert dump_tables(db_path) == before
