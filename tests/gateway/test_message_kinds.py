"""What an agent sees of WhatsApp's support message kinds (the fixtures through the parser):
one readable line each, and the structured part in the stored user message's data; a reaction
alone is recorded without running an agent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.channels.whatsapp_fakes import fixture_bytes
from webhook_bot_gateway.agents import Runner
from webhook_bot_gateway.agents.testing import ScriptedModel, reply
from webhook_bot_gateway.channels import InboundMessage
from webhook_bot_gateway.channels.whatsapp import parse_delivery
from webhook_bot_gateway.gateway._convert import message_text, reply_target, user_input
from webhook_bot_gateway.gateway._dispatcher import Dispatcher
from webhook_bot_gateway.gateway._metrics import Metrics
from webhook_bot_gateway.gateway.config import DispatcherConfig
from webhook_bot_gateway.store import InboxIn, SQLiteStore

from .pipeline_helpers import add_inbox, inbound, registry, rows

LINES = {
    "location.json": "[location 37.4611978,-122.2164385 Facebook HQ,"
    " 1 Hacker Way, Menlo Park, CA 94025]",
    "location_current.json": "[location 32.0853,34.7818]",
    "contacts.json": "[contacts: Chandler Bing (+1 555-555-5555); Monica (+1 666-666-6666);"
    " Rachel Green (+1 777-777-7777)]",
    "reaction.json": "[reaction 😮 to message wamid.yzxyzx=]",
    "reaction_removed.json": "[reaction removed from message wamid.yzxyzx=]",
    "order.json": "[order of 3 item(s): HAMBURGER x3 at 30 ILS; FRENCH_FRIES x2 at 35 ILS;"
    " SODA x2 at 10 ILS]",
    "interactive_nfm_reply.json": '[form flow submitted: {"flow_token":"ticket-4711",'
    '"issue":"damaged_item","order_number":"A-1017","contact_by_phone":true}]',
    "unsupported.json": "[unsupported message: pool (131051 Message type unknown)]",
    "errors_value_level.json": "[unsupported message: interactive (131000 Something went wrong)]",
    "unknown_type.json": "[unsupported message: request_welcome]",
}
STRUCTURED = {
    "location.json": "location",
    "location_current.json": "location",
    "contacts.json": "contacts",
    "reaction.json": "reaction",
    "reaction_removed.json": "reaction",
    "order.json": "order",
    "interactive_nfm_reply.json": "flow",
}


def parsed(name: str) -> InboundMessage:
    (event,) = parse_delivery(fixture_bytes(name)).events
    assert isinstance(event, InboundMessage)
    return event


@pytest.mark.parametrize("name", sorted(LINES))
def test_agent_reads_one_line_per_message_kind(name: str) -> None:
    assert message_text(parsed(name)) == LINES[name]


@pytest.mark.parametrize("name", sorted(STRUCTURED))
def test_stored_user_message_keeps_the_structured_part(name: str) -> None:
    event = parsed(name)
    data = user_input([event.model_dump(mode="json")]).data
    [reference] = data["messages"]
    key = STRUCTURED[name]
    assert reference[key] == event.model_dump(mode="json")[key]
    assert reference["kind"] == event.kind


def test_flow_answers_reach_the_agent_as_json() -> None:
    data = user_input([parsed("interactive_nfm_reply.json").model_dump(mode="json")]).data
    flow: dict[str, Any] = data["messages"][0]["flow"]
    assert flow["response"]["order_number"] == "A-1017"
    assert flow["flow_token"] == "ticket-4711"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    async with SQLiteStore(tmp_path / "gateway.db") as opened:
        await opened.renew_lease(3600)
        yield opened


def reaction_row(n: int) -> InboxIn:
    event = parsed("reaction.json").model_copy(
        update={"dedup_key": f"whatsapp:reaction{n}", "chat_id": "42", "account": "support"}
    )
    return InboxIn("whatsapp", "support", "42", event.dedup_key, event.model_dump(mode="json"))


async def answer(store: SQLiteStore, model: ScriptedModel, *items: InboxIn) -> str:
    [sid] = await add_inbox(store, *items)
    work = Dispatcher(
        store,
        Runner(store, registry(model)),
        DispatcherConfig(retry_base_seconds=0, double_texting="merge"),
        metrics=Metrics(),
    )
    work.wake([sid])
    await asyncio.wait_for(work.wait_idle(), 10)
    model.assert_done()
    return sid


async def test_a_reaction_alone_is_recorded_and_runs_no_agent(
    store: SQLiteStore, tmp_path: Path
) -> None:
    sid = await answer(store, ScriptedModel(), reaction_row(1))
    db = tmp_path / "gateway.db"
    assert rows(db, "SELECT role, text FROM messages WHERE session_id = ?", sid) == [
        ("user", "[reaction 😮 to message wamid.yzxyzx=]")
    ]
    assert rows(db, "SELECT state FROM inbox WHERE session_id = ?", sid) == [("done",)]
    assert rows(db, "SELECT count(*) FROM outbox") == [(0,)]


async def test_a_reaction_with_a_question_is_answered_in_one_turn(
    store: SQLiteStore, tmp_path: Path
) -> None:
    question = inbound("and my refund?", n=2, channel="whatsapp")
    model = ScriptedModel(reply("It is on its way."))
    sid = await answer(store, model, reaction_row(1), question)
    seen = model.calls[0].messages[-1]
    assert seen.text == "[reaction 😮 to message wamid.yzxyzx=]\nand my refund?"
    db = tmp_path / "gateway.db"
    assert rows(db, "SELECT count(*) FROM outbox WHERE session_id = ?", sid) == [(1,)]


def system_row(n: int) -> InboxIn:
    event = parsed("system_user_changed_number.json").model_copy(
        update={"dedup_key": f"whatsapp:system{n}", "account": "support"}
    )
    return InboxIn(
        "whatsapp", "support", event.chat_id, event.dedup_key, event.model_dump(mode="json")
    )


async def test_a_number_change_notice_runs_no_agent_and_moves_the_replies(
    store: SQLiteStore, tmp_path: Path
) -> None:
    # Meta's notice comes from the old number and names the new one; nothing was asked, and a
    # reply to the old number would reach no one (or whoever gets that number next).
    sid = await answer(store, ScriptedModel(), system_row(1))
    db = tmp_path / "gateway.db"
    assert rows(db, "SELECT role, text FROM messages WHERE session_id = ?", sid) == [
        ("user", "User A changed from 972987654321 to 972912345678")
    ]
    assert rows(db, "SELECT state FROM inbox WHERE session_id = ?", sid) == [("done",)]
    assert rows(db, "SELECT count(*) FROM outbox") == [(0,)]
    session = await store.get_session(sid)
    assert session.chat_id == "972987654321"
    assert reply_target(session.chat_id, session.metadata) == "972912345678"
