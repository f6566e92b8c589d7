"""WhatsApp's 24-hour window in turns: an agent's text outside it is not queued; the agent is
told why and sends a declared template with the ``whatsapp_template`` tool instead."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from webhook_bot_gateway.agents import NOT_SENT, Agent, ModelBackendError, Registry, Runner
from webhook_bot_gateway.agents.testing import ScriptedModel, call, reply
from webhook_bot_gateway.channels import WhatsAppConfig, WhatsAppTemplateConfig
from webhook_bot_gateway.gateway._metrics import Metrics
from webhook_bot_gateway.gateway._pipeline._dispatcher import Dispatcher
from webhook_bot_gateway.gateway._templates import TEMPLATE_TOOL, template_tool
from webhook_bot_gateway.gateway._window import WINDOW_SECONDS, window_of
from webhook_bot_gateway.gateway.config import DispatcherConfig
from webhook_bot_gateway.store import LAST_USER_MESSAGE_AT, SQLiteStore

from .pipeline_helpers import T0, FakeClock, add_inbox, inbound, rows

WHATSAPP = WhatsAppConfig(
    templates=(
        WhatsAppTemplateConfig(name="follow_up", language="en_US", parameters=("customer_name",)),
    )
)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "gateway.db"


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[SQLiteStore]:
    async with SQLiteStore(db_path) as opened:
        await opened.renew_lease(3600)  # as the gateway does before any turn
        yield opened


def dispatcher(store: SQLiteStore, model: ScriptedModel, clock: FakeClock) -> Dispatcher:
    agent = Agent("triage", "You help.", [template_tool(WHATSAPP)], model=model)
    runner = Runner(store, Registry([agent], "triage"))
    config = DispatcherConfig(retry_base_seconds=0)
    return Dispatcher(store, runner, config, metrics=Metrics(), clock=clock)


async def turn_at(store: SQLiteStore, model: ScriptedModel, hours_later: float) -> str:
    """One WhatsApp message stamped T0, answered ``hours_later`` by the dispatcher's clock."""
    clock = FakeClock((T0 + timedelta(hours=hours_later)).timestamp())
    item = inbound("hello?", n=1, channel="whatsapp", account="100", chat_id="15550001111")
    [sid] = await add_inbox(store, item)
    work = dispatcher(store, model, clock)
    work.wake([sid])
    await asyncio.wait_for(work.wait_idle(), 10)
    model.assert_done()
    return sid


def outbox(db_path: Path, sid: str) -> list[dict[str, object]]:
    found = rows(db_path, "SELECT payload FROM outbox WHERE session_id = ? ORDER BY id", sid)
    return [json.loads(payload) for (payload,) in found]


def test_window_is_24_hours_from_the_users_last_message() -> None:
    wrote = T0.timestamp()
    assert window_of({LAST_USER_MESSAGE_AT: wrote}, wrote + WINDOW_SECONDS - 1).open
    closed = window_of({LAST_USER_MESSAGE_AT: wrote}, wrote + WINDOW_SECONDS)
    assert (closed.open, closed.closes_at) == (False, wrote + WINDOW_SECONDS)
    assert window_of({}, wrote) == window_of({LAST_USER_MESSAGE_AT: True}, wrote)
    assert not window_of({}, wrote).open


async def test_agent_text_within_the_window_is_queued(store: SQLiteStore, db_path: Path) -> None:
    sid = await turn_at(store, ScriptedModel(reply("Hello!")), hours_later=23)
    assert [row.get("text") for row in outbox(db_path, sid)] == ["Hello!"]


async def test_agent_text_25_hours_later_is_refused_and_the_template_tool_sends_instead(
    store: SQLiteStore, db_path: Path
) -> None:
    model = ScriptedModel(reply("Sorry for the wait!"))
    arguments = {"name": "follow_up", "language": "en_US", "parameters": ["Bob"]}
    model.add(call(TEMPLATE_TOOL, arguments, id="t1"), reply("I sent a follow-up."))
    sid = await turn_at(store, model, hours_later=25)
    told = model.calls[1].messages[-1]
    assert told.role == "system"
    assert "24 hours" in (told.text or "")
    assert TEMPLATE_TOOL in (told.text or "")
    [row] = outbox(db_path, sid)
    assert "text" not in row
    assert row["template"] == {"name": "follow_up", "language": "en_US", "parameters": ["Bob"]}
    refused = rows(db_path, "SELECT text, data FROM messages WHERE role = 'assistant'")
    assert [(text, NOT_SENT in json.loads(data)) for text, data in refused] == [
        ("Sorry for the wait!", True),
        (None, False),
        ("I sent a follow-up.", True),
    ]


async def test_template_tool_refuses_an_undeclared_template_to_the_model(
    store: SQLiteStore, db_path: Path
) -> None:
    model = ScriptedModel(call(TEMPLATE_TOOL, {"name": "other", "language": "en_US"}, id="t1"))
    model.add(reply("Could not."))
    sid = await turn_at(store, model, hours_later=1)
    result = model.calls[1].messages[-1]
    assert result.role == "tool"
    assert "no template 'other' in language 'en_US' is declared" in (result.text or "")
    assert [row.get("text") for row in outbox(db_path, sid)] == ["Could not."]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("Bob\nSmith", "must not hold a line break or a tab"),
        ("Bob\tSmith", "must not hold a line break or a tab"),
        ("Bob     Smith", "must not hold more than 4 spaces in a row"),
        ("  ", "must not be empty or only whitespace"),
    ],
)
async def test_template_tool_refuses_a_parameter_whatsapp_refuses_to_the_model(
    store: SQLiteStore, db_path: Path, text: str, why: str
) -> None:
    """The API's check (Graph error 132018), before the template is queued with the turn."""
    arguments = {"name": "follow_up", "language": "en_US", "parameters": [text]}
    model = ScriptedModel(call(TEMPLATE_TOOL, arguments, id="t1"), reply("Could not."))
    sid = await turn_at(store, model, hours_later=1)
    result = model.calls[1].messages[-1]
    assert result.role == "tool"
    assert f"parameters.0 (customer_name): {why}" in (result.text or "")
    [row] = outbox(db_path, sid)  # the reply only: no template was queued
    assert (row.get("text"), row.get("template")) == ("Could not.", None)


async def test_a_dead_letters_apology_25_hours_later_is_kept_unsent(
    store: SQLiteStore, db_path: Path
) -> None:
    """The turn failed its last try after the window closed: the apology is kept, marked
    ``not_sent``, and queued for no platform that would refuse it (error 131047)."""
    boom = ModelBackendError("scripted", "HTTP 500")
    agent = Agent("triage", "You help.", model=ScriptedModel(boom))
    runner = Runner(store, Registry([agent], "triage"))
    config = DispatcherConfig(retry_base_seconds=0, max_attempts=1, dead_letter_handoff="")
    clock = FakeClock((T0 + timedelta(hours=25)).timestamp())
    work = Dispatcher(store, runner, config, metrics=Metrics(), clock=clock)
    item = inbound("hello?", n=1, channel="whatsapp", account="100", chat_id="15550001111")
    [sid] = await add_inbox(store, item)
    work.wake([sid])
    await asyncio.wait_for(work.wait_idle(), 10)
    assert outbox(db_path, sid) == []
    [(text, data)] = rows(db_path, "SELECT text, data FROM messages WHERE role = 'assistant'")
    assert text
    assert "24-hour window is closed" in json.loads(data)[NOT_SENT]
