"""``handoff_history``: what an agent sees of the agents before it, checked against the
strict fake in its offered-only mode (Anthropic- or Bedrock-backed servers)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from tests.openai_strict import Rules, StrictOpenAI, call, check_request, completion, tool_calls_in
from webhook_bot_gateway.agents import (
    Agent,
    OpenAIModel,
    OpenAIModelConfig,
    Registry,
    Runner,
    UserInput,
)
from webhook_bot_gateway.store import SQLiteStore

from .conftest import lookup_invoice

INVOICE = '{"number": "INV-9"}'


@pytest.fixture
async def api(aiohttp_server: Any) -> StrictOpenAI:
    return StrictOpenAI(Rules(vllm=True))  # offered-only is checked after, on the bodies


@pytest.fixture
async def backend(api: StrictOpenAI, aiohttp_server: Any) -> AsyncIterator[OpenAIModel]:
    server: TestServer = await aiohttp_server(api.app())
    config = OpenAIModelConfig(base_url=str(server.make_url("/v1")), model="m", max_retries=0)
    model = OpenAIModel("strict", config)
    yield model
    await model.aclose()


def registry(backend: OpenAIModel, mode: Any) -> Registry:
    triage = Agent(
        "triage", "You route.", handoffs=["billing"], model=backend, handoff_history=mode
    )
    billing = Agent(
        "billing", "Billing.", [lookup_invoice], ["triage"], backend, handoff_history=mode
    )
    return Registry([triage, billing], "triage")


async def _conversation(
    api: StrictOpenAI, backend: OpenAIModel, store: SQLiteStore, mode: str
) -> None:
    session = await store.create_session("test", "bot", "1", "triage")
    runner = Runner(store, registry(backend, mode))
    for answer in (
        completion(None, call("t1", "transfer_to_billing")),
        completion(None, call("l1", "lookup_invoice", INVOICE)),
        completion("INV-9 is paid."),
        completion(None, call("t2", "transfer_to_triage")),
        completion("Anything else?"),
        completion("Bye."),
    ):
        api.answer(answer)
    for text in ("INV-9?", "menu", "no thanks"):
        await runner.run_turn(session.session_id, UserInput(text))


def _offered_violations(api: StrictOpenAI) -> list[str]:
    return [p for body in api.bodies for p in check_request(body, Rules(offered_only=True))]


async def test_handoff_history_messages_sends_no_call_to_a_tool_not_offered(
    api: StrictOpenAI, backend: OpenAIModel, store: SQLiteStore
) -> None:
    await _conversation(api, backend, store, "messages")
    assert api.violations == []
    assert _offered_violations(api) == []
    last = [(m["role"], m["content"]) for m in api.bodies[-1]["messages"]]
    assert ("user", "INV-9?") in last
    assert ("assistant", "INV-9 is paid.") in last  # the conversation's text stays


async def test_handoff_history_full_replays_earlier_agents_calls(
    api: StrictOpenAI, backend: OpenAIModel, store: SQLiteStore
) -> None:
    await _conversation(api, backend, store, "full")
    assert api.violations == []
    assert _offered_violations(api)  # what an offered-only server refuses
    assert (len(api.bodies) - 1, "lookup_invoice") in tool_calls_in(api.bodies)


async def test_handoff_history_summary_says_what_the_earlier_agents_tools_answered(
    api: StrictOpenAI, backend: OpenAIModel, store: SQLiteStore
) -> None:
    await _conversation(api, backend, store, "summary")
    assert _offered_violations(api) == []
    texts = [m["content"] for m in api.bodies[-1]["messages"] if m["role"] == "assistant"]
    assert (
        "[Earlier, billing used tools: lookup_invoice(" + INVOICE + ") answered "
        "'INV-9: 49.00 EUR, paid']"
    ) in texts
