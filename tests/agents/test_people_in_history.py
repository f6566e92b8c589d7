"""Operators and human phases in a model's context: marked as a person's words, and kept
through pruning so the reason for the handoff survives the phase."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from tests.openai_strict import Rules, StrictOpenAI, call, completion
from webhook_bot_gateway.agents import (
    OpenAIModel,
    OpenAIModelConfig,
    Runner,
    UserInput,
    prune_to_turns,
)
from webhook_bot_gateway.store import OUTSIDE_TURNS, SQLiteStore

from .conftest import make_registry

MARK = "[Operator Alice, a person and not you, wrote this to the user:] "


@pytest.fixture
async def strict(aiohttp_server: Any) -> AsyncIterator[tuple[StrictOpenAI, OpenAIModel]]:
    api = StrictOpenAI(Rules(vllm=True))
    server: TestServer = await aiohttp_server(api.app())
    config = OpenAIModelConfig(base_url=str(server.make_url("/v1")), model="m", max_retries=0)
    backend = OpenAIModel("strict", config)
    yield api, backend
    await backend.aclose()
    assert api.violations == []


async def test_after_a_handback_the_bot_sees_the_request_and_the_operators_replies(
    strict: tuple[StrictOpenAI, OpenAIModel], store: SQLiteStore, session_id: str
) -> None:
    api, backend = strict
    runner = Runner(store, make_registry(backend), max_turns=2)
    api.answer(completion(None, call("t1", "transfer_to_human")))
    await runner.run_turn(session_id, UserInput("I want to talk to a person"))
    for index in range(6):  # a long human phase: more messages than max_turns
        await runner.run_turn(session_id, UserInput(f"user to person {index}"))
        await store.append_message(
            session_id, "operator", f"reply {index}", agent="operator", data={"operator": "Alice"}
        )
    await store.append_message(
        session_id,
        "operator",
        "I'm handing you back.",
        agent="operator",
        data={"operator": "Alice"},
    )
    await store.set_agent(session_id, "triage", reason="operator")
    api.answer(completion("Welcome back."))
    await runner.run_turn(session_id, UserInput("thanks"))
    sent = [(m["role"], m["content"]) for m in api.bodies[-1]["messages"]]
    assert ("user", "I want to talk to a person") in sent
    assert ("assistant", MARK + "I'm handing you back.") in sent
    assert ("assistant", MARK + "reply 0") in sent
    assert ("assistant", "I'm handing you back.") not in sent  # never as the bot's own words
    branch = await store.get_branch(session_id)
    marked = [m.text for m in branch if m.role == "user" and m.data.get(OUTSIDE_TURNS)]
    assert marked == [f"user to person {index}" for index in range(6)]


async def test_pruning_counts_a_human_phase_with_the_turn_that_asked_for_a_person(
    store: SQLiteStore, session_id: str
) -> None:
    await store.append_message(session_id, "user", "old question")
    await store.append_message(session_id, "assistant", "old answer")
    await store.append_message(session_id, "user", "a person please")
    for index in range(4):
        data = {OUTSIDE_TURNS: True}
        await store.append_message(session_id, "user", f"to person {index}", data=data)
        await store.append_message(session_id, "operator", "op", agent="operator")
    await store.append_message(session_id, "user", "back with the bot")
    branch = await store.get_branch(session_id)
    kept = prune_to_turns(branch, 2)
    assert [m.text for m in kept][0] == "a person please"
    assert len(kept) == len(branch) - 2
