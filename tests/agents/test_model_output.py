"""What a model answers is made safe before it is stored (agents/_normalize.py), so the next
requests pass the strict fake in both modes, whatever the server sent."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from tests.openai_strict import Rules, StrictOpenAI, call, completion
from webhook_bot_gateway.agents import (
    ModelBackendError,
    OpenAIModel,
    OpenAIModelConfig,
    Reply,
    Runner,
    UserInput,
    tool,
)
from webhook_bot_gateway.agents.testing import ScriptedModel, reply
from webhook_bot_gateway.store import SQLiteStore

from .conftest import lookup_invoice, make_registry

Fake = tuple[StrictOpenAI, OpenAIModel]


async def _no_sleep(seconds: float) -> None:
    return None


@pytest.fixture(params=[Rules(), Rules(vllm=True)], ids=["strict", "vllm-strict"])
async def strict(request: pytest.FixtureRequest, aiohttp_server: Any) -> AsyncIterator[Fake]:
    api = StrictOpenAI(request.param)
    server: TestServer = await aiohttp_server(api.app())
    config = OpenAIModelConfig(base_url=str(server.make_url("/v1")), model="m", max_retries=0)
    backend = OpenAIModel("strict", config, sleep=_no_sleep)
    yield api, backend
    await backend.aclose()
    assert api.violations == []


async def _billing_turns(
    store: SQLiteStore, session_id: str, backend: OpenAIModel, *texts: str, **kw: Any
) -> list[tuple[Reply, ...]]:
    await store.update_session(session_id, active_agent="billing")
    runner = Runner(store, make_registry(backend, backend, **kw))
    return [(await runner.run_turn(session_id, UserInput(text))).replies for text in texts]


def _calls(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        c for m in body["messages"] if m["role"] == "assistant" for c in m.get("tool_calls", [])
    ]


async def test_repeated_and_empty_call_ids_get_unique_ones_paired_with_their_results(
    strict: Fake, store: SQLiteStore, session_id: str
) -> None:
    api, backend = strict
    invoice = '{"number": "INV-1"}'
    api.answer(
        completion(
            None,
            call("call_0", "lookup_invoice", invoice),
            call("call_0", "lookup_invoice", invoice),
        )
    )
    api.answer(completion(None, call("", "lookup_invoice", invoice)))
    api.answer(completion("Both paid."))
    api.answer(completion(None, call("call_0", "lookup_invoice", invoice)))  # next turn, same id
    api.answer(completion("Still paid."))
    replies = await _billing_turns(store, session_id, backend, "INV-1 twice?", "again?")
    assert [r.text for turn in replies for r in turn] == ["Both paid.", "Still paid."]
    ids = [c["id"] for c in _calls(api.bodies[-1])]
    assert len(set(ids)) == 4
    assert all(ids)
    assert ids[0] == "call_0"  # the server's id is kept where it is usable
    results = [m["tool_call_id"] for m in api.bodies[-1]["messages"] if m["role"] == "tool"]
    assert results == ids


async def test_invalid_or_unknown_function_names_are_tool_errors_stored_under_safe_names(
    strict: Fake, store: SQLiteStore, session_id: str
) -> None:
    api, backend = strict
    api.answer(
        completion(
            None,
            call("a", "functions.lookup_invoice", '{"number": "INV-1"}'),
            call("b", "x" * 70),
            call("c", "delete_everything"),
        )
    )
    api.answer(completion("Let me try again."))
    await _billing_turns(store, session_id, backend, "INV-1?")
    names = [c["function"]["name"] for c in _calls(api.bodies[1])]
    assert names == ["functions_lookup_invoice", "x" * 64, "delete_everything"]
    results = [m["content"] for m in api.bodies[1]["messages"] if m["role"] == "tool"]
    assert [r.split(";")[0] for r in results] == [
        "error: unknown tool 'functions.lookup_invoice'",
        f"error: unknown tool '{'x' * 70}'",
        "error: unknown tool 'delete_everything'",
    ]
    branch = await store.get_branch(session_id)
    stored = next(m for m in branch if m.data.get("tool_calls")).data["tool_calls"][0]
    assert stored["model_call"]["name"] == "functions.lookup_invoice"


@pytest.mark.parametrize("broken", ['{"number": "INV-1004', "[1, 2]", '"INV-1"'])
async def test_arguments_that_are_not_an_object_are_replayed_as_empty_with_the_error(
    strict: Fake, store: SQLiteStore, session_id: str, broken: str
) -> None:
    api, backend = strict
    ran: list[str] = []

    @tool
    def lookup_invoice_logged(number: str) -> str:
        """Look up an invoice."""
        ran.append(number)
        return "paid"

    api.answer(completion(None, call("a", "lookup_invoice_logged", broken)))
    api.answer(completion("Which invoice?"))
    api.answer(completion("Thanks."))
    tools = (lookup_invoice_logged,)
    await _billing_turns(store, session_id, backend, "INV-1004", "later", billing_tools=tools)
    for body in api.bodies[1:]:
        assert [c["function"]["arguments"] for c in _calls(body)] == ["{}"]
    result = next(m for m in api.bodies[2]["messages"] if m["role"] == "tool")
    assert result["content"].startswith("error: the arguments ")
    assert "not run" in result["content"]
    assert ran == []  # a call with broken arguments never reaches the tool


async def test_a_refusal_becomes_the_reply_and_is_recorded(
    strict: Fake, store: SQLiteStore, session_id: str
) -> None:
    api, backend = strict
    api.answer(completion(None, refusal="I can't help with that."))
    api.answer(completion("Sure."))
    replies = await _billing_turns(store, session_id, backend, "do something bad", "ok then")
    assert replies[0] == (Reply("I can't help with that.", "billing"),)
    roles = [m["role"] for m in api.bodies[1]["messages"]]
    assert roles == ["system", "user", "assistant", "user"]  # never two user messages in a row
    refused = next(m for m in await store.get_branch(session_id) if m.role == "assistant")
    assert refused.data["refusal"] == "I can't help with that."


async def test_a_refusal_is_answered_with_the_configured_reply(
    strict: Fake, store: SQLiteStore, session_id: str
) -> None:
    api, backend = strict
    api.answer(completion(None, refusal="No."))
    await store.update_session(session_id, active_agent="billing")
    runner = Runner(store, make_registry(backend, backend), refusal_reply="Sorry, I can't.")
    result = await runner.run_turn(session_id, UserInput("x"))
    assert result.replies == (Reply("Sorry, I can't.", "billing"),)


async def test_an_empty_tool_result_is_sent_as_a_placeholder(
    strict: Fake, store: SQLiteStore, session_id: str
) -> None:
    api, backend = strict

    @tool
    def silent() -> str:
        """Return nothing."""
        return ""

    api.answer(completion(None, call("a", "silent")))
    api.answer(completion("Done."))
    await _billing_turns(store, session_id, backend, "go", billing_tools=(silent, lookup_invoice))
    result = next(m for m in api.bodies[1]["messages"] if m["role"] == "tool")
    assert result["content"] == "(the tool returned nothing)"


@pytest.mark.parametrize("content", ["", None, "  \n  "], ids=["empty", "null", "blank"])
async def test_an_empty_or_blank_answer_fails_the_turn_and_writes_nothing(
    strict: Fake, store: SQLiteStore, session_id: str, content: str | None
) -> None:
    """It was committed silently (no reply), or, blank, stored as the assistant's answer and
    sent: the sender refused it and the user got nothing. Now it is a failed model call, which
    the dispatcher retries and then dead-letters with its apology."""
    api, backend = strict
    api.answer(completion(content))
    await store.update_session(session_id, active_agent="billing")
    runner = Runner(store, make_registry(backend, backend))
    with pytest.raises(ModelBackendError) as caught:
        await runner.run_turn(session_id, UserInput("hello"))
    assert str(caught.value) == (
        "model backend 'strict': the model gave an empty answer (no text, no tool call),"
        " finish_reason 'stop'"
    )
    assert await store.get_branch(session_id) == []  # rolled back


async def test_an_empty_answer_after_this_turns_reply_ends_the_turn_with_that_reply(
    strict: Fake, store: SQLiteStore, session_id: str
) -> None:
    """A model that answers and calls a tool in one message, then has nothing more to say
    once it reads the result (many do: content "" with finish_reason "stop"): that empty
    answer failed the turn, so the reply it had given was dropped, the tool ran again on
    every retry and the user got the dead letter's apology instead of the answer."""
    api, backend = strict
    api.answer(completion("INV-1 is paid.", call("a", "lookup_invoice", '{"number": "INV-1"}')))
    api.answer(completion(""))
    replies = await _billing_turns(store, session_id, backend, "INV-1?")
    assert replies == [(Reply("INV-1 is paid.", "billing"),)]
    roles = [(m.role, m.text) for m in await store.get_branch(session_id)]
    assert roles == [
        ("user", "INV-1?"),
        ("assistant", "INV-1 is paid."),
        ("tool", "INV-1: 49.00 EUR, paid"),
    ]


async def test_an_empty_answer_after_another_agents_reply_still_fails_the_turn(
    strict: Fake, store: SQLiteStore, session_id: str
) -> None:
    """Triage's "billing will help" does not answer what the user asked billing."""
    api, backend = strict
    api.answer(completion("Billing will help.", call("t", "transfer_to_billing")))
    api.answer(completion(""))
    runner = Runner(store, make_registry(backend, backend))
    with pytest.raises(ModelBackendError, match="empty answer"):
        await runner.run_turn(session_id, UserInput("a refund"))
    assert await store.get_branch(session_id) == []


async def test_blank_text_beside_a_tool_call_is_no_reply(
    strict: Fake, store: SQLiteStore, session_id: str
) -> None:
    api, backend = strict
    api.answer(completion("\n\n", call("a", "lookup_invoice", '{"number": "INV-1"}')))
    api.answer(completion("INV-1 is paid."))
    replies = await _billing_turns(store, session_id, backend, "INV-1?")
    assert replies == [(Reply("INV-1 is paid.", "billing"),)]
    stored = [m.text for m in await store.get_branch(session_id) if m.role == "assistant"]
    assert stored == [None, "INV-1 is paid."]
    assert api.bodies[1]["messages"][2]["content"] is None


async def test_a_blank_answer_of_any_backend_is_neither_stored_nor_sent(
    store: SQLiteStore, session_id: str
) -> None:
    """A backend given in Python (here the scripted double) that answers blanks: the turn
    commits without a reply, as with no answer, and the history holds no blank answer that
    the next model would take for its own."""
    runner = Runner(store, make_registry(ScriptedModel(reply("  \n  "))))
    result = await runner.run_turn(session_id, UserInput("hello"))
    assert result.replies == ()
    assert [(m.role, m.text) for m in await store.get_branch(session_id)] == [("user", "hello")]
