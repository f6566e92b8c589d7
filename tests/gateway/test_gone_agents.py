"""A start with sessions on agents that are not declared any more (a human agent renamed or
removed): a warning with their counts, and the users who wrote to a person answered by the
resolver's fallback, so that their messages do not wait for their next one."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from webhook_bot_gateway.agents import Runner
from webhook_bot_gateway.agents.testing import ScriptedModel, reply
from webhook_bot_gateway.gateway._metrics import Metrics
from webhook_bot_gateway.gateway._pipeline._dispatcher import Dispatcher
from webhook_bot_gateway.gateway._pipeline._gone_agents import answer_gone
from webhook_bot_gateway.gateway.config import DispatcherConfig
from webhook_bot_gateway.store import OUTSIDE_TURNS, SQLiteStore

from .pipeline_helpers import registry

SID = "telegram-support-42"


@pytest.fixture
async def store(tmp_path: Path) -> SQLiteStore:
    return await SQLiteStore.open(tmp_path / "gateway.db")


async def test_start_answers_a_user_waiting_on_a_human_agent_that_is_gone(
    store: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    await store.create_session("telegram", "support", "42", "human")
    await store.append_message(SID, "user", "a person please")
    await store.append_message(SID, "assistant", "A person will answer.", agent="human")
    await store.append_message(SID, "user", "hello? anyone?", data={OUTSIDE_TURNS: True})
    await store.create_session("telegram", "support", "43", "human")  # told, wrote nothing since
    await store.create_session("telegram", "support", "44", "old_bot")
    model = ScriptedModel(reply("I'm the bot again: how can I help?"))
    agents = registry(model, human=False)  # 'human' was renamed or removed
    dispatcher = Dispatcher(store, Runner(store, agents), DispatcherConfig(), metrics=Metrics())
    try:
        with caplog.at_level(logging.WARNING, logger="gateway.agents"):
            assert await answer_gone(store, agents, dispatcher) == 1
        assert (
            "3 session(s) have an active agent that is not declared any more: 'human' 2, 1 with"
            " messages to a person not answered yet: the fallback answers them now;"
            " 'old_bot' 1." in caplog.text
        )
        [row] = await store.list_outbox(SID)
        assert row.payload["text"] == "I'm the bot again: how can I help?"
        assert model.calls[0].messages[-1].text == "hello? anyone?"  # the waiting message
        session = await store.get_session(SID)
        assert session is not None
        assert session.active_agent == "triage"
        changed = [e.detail for e in await store.list_events(SID) if e.kind == "agent_changed"]
        assert changed == [{"from": "human", "to": "triage", "reason": "fallback"}]
        for untouched in ("telegram-support-43", "telegram-support-44"):
            assert await store.list_outbox(untouched) == []  # nobody waits for an answer there
        assert await answer_gone(store, agents, dispatcher) == 0  # answered: not again
        model.assert_done()
    finally:
        await store.aclose()


async def test_start_with_every_agent_declared_says_nothing(
    store: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    await store.create_session("telegram", "support", "42", "human")
    await store.append_message(SID, "user", "hello?", data={OUTSIDE_TURNS: True})
    model = ScriptedModel()
    agents = registry(model)
    dispatcher = Dispatcher(store, Runner(store, agents), DispatcherConfig(), metrics=Metrics())
    try:
        with caplog.at_level(logging.WARNING):
            assert await answer_gone(store, agents, dispatcher) == 0
        assert "not declared" not in caplog.text
        assert await store.list_outbox(SID) == []  # a person answers it
    finally:
        await store.aclose()
