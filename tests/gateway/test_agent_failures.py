"""Agent answers that cannot go to the user (a blank model answer, a rules agent's tool error)
end as a failed turn: retried, then dead-lettered with the apology; never sent as they are."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from tests.openai_strict import StrictOpenAI, completion
from webhook_bot_gateway.agents import (
    Agent,
    ModelBackend,
    OpenAIModel,
    OpenAIModelConfig,
    Registry,
    Rule,
    RulesModel,
    Runner,
    Tool,
    tool,
)
from webhook_bot_gateway.gateway._metrics import Metrics
from webhook_bot_gateway.gateway._pipeline._dispatcher import Dispatcher
from webhook_bot_gateway.gateway.config import DispatcherConfig
from webhook_bot_gateway.store import SQLiteStore

from .pipeline_helpers import add_inbox, inbound

SECRET = "postgres://crm:hunter2@10.0.0.5/crm"
APOLOGY = "Sorry, something went wrong. A person will look into it."


@tool
def crm_lookup(number: str) -> str:
    """Look a customer up."""
    raise ConnectionError(f"could not connect to {SECRET}")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    async with SQLiteStore(tmp_path / "gateway.db") as opened:
        await opened.renew_lease(3600)
        yield opened


def two_agents(model: ModelBackend, tools: list[Tool] | None = None) -> Registry:
    triage = Agent("triage", "You route.", tools=tools or [], handoffs=["human"], model=model)
    return Registry([triage, Agent("human", kind="human")], "triage")


async def dead_letter_run(store: SQLiteStore, registry: Registry, text: str) -> str:
    """One message through a dispatcher that tries a turn twice; the session's id."""
    config = DispatcherConfig(max_attempts=2, retry_base_seconds=0, apology=APOLOGY)
    dispatcher = Dispatcher(
        store, Runner(store, registry), config, metrics=Metrics(), handoff_agent="human"
    )
    [sid] = await add_inbox(store, inbound(text, n=1))
    dispatcher.wake([sid])
    await asyncio.wait_for(dispatcher.wait_idle(), 10)
    return sid


async def sent_texts(store: SQLiteStore, sid: str) -> list[str]:
    return [row.payload["text"] for row in await store.list_outbox(sid)]


async def test_a_rules_agents_tool_error_is_dead_lettered_not_sent(
    store: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    rule = Rule(
        match=r"(?P<n>\d+)",
        tool="crm_lookup",
        arguments={"number": "{n}"},
        reply="Customer: {result}",
    )
    registry = two_agents(RulesModel([rule]), [crm_lookup])
    with caplog.at_level(logging.INFO):
        sid = await dead_letter_run(store, registry, "customer 42")
    assert await sent_texts(store, sid) == [APOLOGY]  # never 'Customer: error: ...'
    [dead] = await store.list_dead_inbox()
    assert dead.error == (
        "ToolFailed: agent 'triage': tool 'crm_lookup' failed: raised ConnectionError"
        " (a rules agent has no model to tell, so the turn fails)"
    )
    branch = await store.get_branch(sid)
    assert not any("hunter2" in (m.text or "") for m in branch)
    assert "hunter2" not in caplog.text
    assert "tool crm_lookup raised ConnectionError" in caplog.text


@pytest.mark.parametrize("content", ["", None, "  \n  "], ids=["empty", "null", "blank"])
async def test_an_empty_model_answer_is_dead_lettered_with_the_apology(
    store: SQLiteStore, aiohttp_server: Any, content: str | None
) -> None:
    """It was committed silently (no reply, no warning), or, blank, sent and refused by the
    platform adapter: the user got nothing either way."""
    api = StrictOpenAI()
    server: TestServer = await aiohttp_server(api.app())
    config = OpenAIModelConfig(base_url=str(server.make_url("/v1")), model="m", max_retries=0)
    model = OpenAIModel("gpt", config)
    api.answer(completion(content))
    api.answer(completion(content))
    try:
        sid = await dead_letter_run(store, two_agents(model), "hello")
    finally:
        await model.aclose()
    assert await sent_texts(store, sid) == [APOLOGY]
    [dead] = await store.list_dead_inbox()
    assert dead.error is not None
    assert "the model gave an empty answer" in dead.error
    assert len(api.bodies) == 2  # tried again before the dead letter
    assert api.violations == []


KEY = "sk-SECRETKEY-walk-1234567890"
PROXY_PAGE = f"<html><body>Forbidden by proxy. Authorization: Bearer {KEY}</body></html>"


@pytest.mark.parametrize(
    ("status", "answer", "headers", "error"),
    [
        (
            403,
            PROXY_PAGE.encode(),
            {"Content-Type": "text/html"},
            f"HTTP 403 (content-type 'text/html', {len(PROXY_PAGE)} bytes)",
        ),
        (
            401,
            {"error": {"message": f"Incorrect API key provided: {KEY}", "code": "invalid_api_key"}},
            {},
            "HTTP 401: model said: Incorrect API key provided: <redacted> (code invalid_api_key)",
        ),
    ],
    ids=["proxy-page", "json-error"],
)
async def test_a_model_refusal_quoting_the_key_is_stored_and_logged_without_it(
    store: SQLiteStore,
    aiohttp_server: Any,
    caplog: pytest.LogCaptureFixture,
    status: int,
    answer: Any,
    headers: dict[str, str],
    error: str,
) -> None:
    """The dead letter's error (``inbox.error``, which the dead letters API shows)
    and every log record, DEBUG included and before the gateway's log filter: no key."""
    api = StrictOpenAI()
    server: TestServer = await aiohttp_server(api.app())
    config = OpenAIModelConfig(base_url=str(server.make_url("/v1")), model="m", max_retries=0)
    model = OpenAIModel("gpt", config, api_key=KEY)
    api.answer(answer, status=status, **headers)  # refused as such: not tried again
    try:
        with caplog.at_level(logging.DEBUG):
            sid = await dead_letter_run(store, two_agents(model), "hello")
    finally:
        await model.aclose()
    assert await sent_texts(store, sid) == [APOLOGY]
    [dead] = await store.list_dead_inbox()
    assert dead.error == f"ModelBackendError: model backend 'gpt': {error}"
    not_again = "; not tried again: the model's server refuses such a request"
    assert f"turn of session {sid} failed (try 1): {dead.error}{not_again}" in caplog.messages
    assert KEY not in caplog.text
    assert [h["Authorization"] for h in api.headers] == [f"Bearer {KEY}"]


class SpillingModel:
    """A model backend of a Python declaration whose error quotes its connection string."""

    async def complete(self, messages: Any, tools: Any) -> Any:
        raise RuntimeError(f"could not connect to {SECRET}")

    async def aclose(self) -> None:
        return None


async def test_a_foreign_exception_of_a_turn_is_stored_and_logged_by_its_type_only(
    store: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    """Not one of our errors: its message is whatever its code wrote. As a tool's, it is kept by
    its type; the traceback, message and all, is logged at DEBUG only."""
    with caplog.at_level(logging.DEBUG):
        sid = await dead_letter_run(store, two_agents(SpillingModel()), "hello")
    assert await sent_texts(store, sid) == [APOLOGY]
    [dead] = await store.list_dead_inbox()
    assert dead.error == "RuntimeError (its message is not kept: it is logged at DEBUG only)"
    assert f"turn of session {sid} failed (try 2): {dead.error}" in caplog.messages
    shown = [r for r in caplog.records if r.levelno > logging.DEBUG]
    assert not any("hunter2" in r.getMessage() or r.exc_info for r in shown)
    tracebacks = [r for r in caplog.records if r.levelno == logging.DEBUG and r.exc_info]
    assert [r.getMessage() for r in tracebacks] == [f"turn of session {sid} raised"] * 2
    assert "hunter2" in caplog.text  # in those tracebacks only
