"""The dispatcher on PostgreSQL: a failing turn whose error quotes a NUL character (a model
server's answer, say) is recorded like any other failure, and dead-lettered after its tries;
a user's cancel is answered as the turn then ends (tests/gateway/cancel_helpers.py).

PostgreSQL's text cannot hold a NUL: before the store replaced it in error texts, the failure
could not be recorded, the lane stopped, and the turn ran again at every poll, for ever.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.pg import fresh_schema
from webhook_bot_gateway.agents import ModelBackendError, Runner
from webhook_bot_gateway.agents.testing import ScriptedModel
from webhook_bot_gateway.gateway._metrics import TURNS, Metrics
from webhook_bot_gateway.gateway._pipeline._dispatcher import Dispatcher
from webhook_bot_gateway.gateway.config import DispatcherConfig
from webhook_bot_gateway.store import InboxIn, Store, open_store

from .cancel_helpers import CASES, Point, cancel_at, check_agrees
from .pipeline_helpers import add_inbox, inbound, registry


@pytest.fixture
async def store() -> AsyncIterator[Store]:
    async with fresh_schema() as url:  # skipped without GATEWAY_TEST_POSTGRES_URL
        opened = await open_store(url)
        try:
            await opened.renew_lease(3600)
            yield opened
        finally:
            await opened.aclose()


async def test_a_turn_failing_with_a_nul_in_its_error_is_dead_lettered(store: Store) -> None:
    boom = ModelBackendError("openai", 'HTTP 500: {"error": "bad\x00input"}', status=500)
    metrics = Metrics()
    config = DispatcherConfig(
        max_attempts=2, retry_base_seconds=0, apology="Sorry!", apology_no_person="Sorry!"
    )
    dispatcher = Dispatcher(
        store, Runner(store, registry(ScriptedModel(boom, boom))), config, metrics=metrics
    )
    [sid] = await add_inbox(store, inbound("hello", n=1))
    dispatcher.wake([sid])
    await asyncio.wait_for(dispatcher.wait_idle(), 10)
    [dead] = await store.list_dead_inbox()
    assert dead.session_id == sid
    assert dead.attempts == 2
    assert dead.error is not None
    assert "bad\ufffdinput" in dead.error
    assert metrics.value(TURNS, outcome="dead") == 1
    assert [row.payload["text"] for row in await store.list_outbox(sid)] == ["Sorry!"]


@pytest.mark.parametrize(("at", "event", "accepted", "replies"), CASES)
async def test_dispatcher_cancel_answer_agrees_with_what_the_turn_committed(
    store: Store,
    monkeypatch: pytest.MonkeyPatch,
    at: Point,
    event: InboxIn,
    accepted: bool,
    replies: list[str],
) -> None:
    check_agrees(await cancel_at(store, monkeypatch, at, event), accepted, replies)
