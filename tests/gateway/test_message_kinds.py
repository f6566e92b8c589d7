"""What an agent sees of WhatsApp's support message kinds (the fixtures through the parser):
one readable line each, and the structured part in the stored user message's data; a reaction
alone is recorded without running an agent."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.channels.telegram_fakes import FIXTURE_BOTS
from tests.channels.telegram_fakes import config as telegram_config
from tests.channels.whatsapp_fakes import fixture_bytes
from webhook_bot_gateway.agents import Runner
from webhook_bot_gateway.agents.testing import ScriptedModel, reply
from webhook_bot_gateway.channels import InboundMessage
from webhook_bot_gateway.channels.telegram import TelegramAdapter
from webhook_bot_gateway.channels.whatsapp import parse_delivery
from webhook_bot_gateway.gateway._convert import message_text, reply_target, user_input
from webhook_bot_gateway.gateway._metrics import Metrics
from webhook_bot_gateway.gateway._pipeline._dispatcher import Dispatcher
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
    "text_referral_ad.json": "[from ad: Chat with us | Summer succulents are here!"
    " | https://fb.me/3cr4Wqqkv] Hi! Do you ship the aloe to Haifa?",
    "image_referral_video_ad.json": "[from ad: Repot like a pro | Repotting in 3 easy steps."
    " Watch, then ask us anything. | https://fb.me/9kLp2Xw7q] [image]",
    "text_referred_product.json": "[about product HAMBURGER in catalog 354160437058781]"
    " Is this in stock?",
}
STRUCTURED = {
    "location.json": "location",
    "location_current.json": "location",
    "contacts.json": "contacts",
    "reaction.json": "reaction",
    "reaction_removed.json": "reaction",
    "order.json": "order",
    "interactive_nfm_reply.json": "flow",
    "text_referral_ad.json": "referral",
    "image_referral_video_ad.json": "referral",
    "text_referred_product.json": "referred_product",
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


@pytest.mark.parametrize(
    ("change", "line"),
    [
        ({"headline": None, "body": None}, "[from ad: https://fb.me/3cr4Wqqkv] hi"),
        (
            {"source_type": "post", "body": None},
            "[from post: Chat with us | https://fb.me/3cr4Wqqkv] hi",
        ),
        ({"headline": None, "body": None, "source_url": None}, "[from ad: 120226305854810726] hi"),
        ({"source_id": None, "headline": None, "body": None, "source_url": None}, "[from ad] hi"),
        ({"headline": None, "source_url": None, "body": "x" * 300}, f"[from ad: {'x' * 199}…] hi"),
    ],
)
def test_the_ad_line_shows_what_the_referral_has(change: dict[str, Any], line: str) -> None:
    event = parsed("text_referral_ad.json")
    assert event.referral is not None
    referral = event.referral.model_copy(update=change)
    assert message_text(event.model_copy(update={"referral": referral, "text": "hi"})) == line


def test_a_product_without_its_catalog_still_names_the_product() -> None:
    event = parsed("text_referred_product.json")
    assert event.referred_product is not None
    product = event.referred_product.model_copy(update={"catalog_id": None})
    line = message_text(event.model_copy(update={"referred_product": product}))
    assert line == "[about product HAMBURGER] Is this in stock?"


def test_ad_and_product_together_come_in_that_order() -> None:
    ad = parsed("text_referral_ad.json")
    product = parsed("text_referred_product.json").referred_product
    line = message_text(ad.model_copy(update={"referred_product": product, "text": "hi"}))
    assert line.startswith("[from ad: Chat with us")
    assert line.endswith(
        "| https://fb.me/3cr4Wqqkv] [about product HAMBURGER in catalog 354160437058781] hi"
    )


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


def fixture_row(name: str, n: int) -> InboxIn:
    event = parsed(name).model_copy(
        update={"dedup_key": f"whatsapp:{name}{n}", "account": "support"}
    )
    return InboxIn(
        "whatsapp", "support", event.chat_id, event.dedup_key, event.model_dump(mode="json")
    )


async def test_an_ad_lead_asking_about_a_product_reaches_the_agent_and_the_history(
    store: SQLiteStore, tmp_path: Path
) -> None:
    # The user came from an ad, then asked about a product: the agent reads both, and the stored
    # user message keeps the ad's attribution (ctwa_clid) and the product for operators and tools.
    model = ScriptedModel(reply("Yes, we ship there."))
    rows_in = (
        fixture_row("text_referral_ad.json", 1),
        fixture_row("text_referred_product.json", 2),
    )
    sid = await answer(store, model, *rows_in)
    assert model.calls[0].messages[-1].text == "\n".join(
        [LINES["text_referral_ad.json"], LINES["text_referred_product.json"]]
    )
    [(data,)] = rows(
        tmp_path / "gateway.db",
        "SELECT data FROM messages WHERE session_id = ? AND role = 'user'",
        sid,
    )
    ad, product = json.loads(data)["messages"]
    assert ad["referral"]["ctwa_clid"].startswith("Aff-n8ZTOD")
    assert ad["referral"]["welcome_message"] == "Hi there! Let us know how we can help!"
    assert "referred_product" not in ad
    assert product["referred_product"] == {
        "product_id": "HAMBURGER",
        "catalog_id": "354160437058781",
    }
    assert "referral" not in product


async def test_a_group_upgrade_notice_runs_no_agent_and_moves_the_replies(
    store: SQLiteStore, tmp_path: Path
) -> None:
    # The old group's service message names the supergroup: its replies (an operator's too) go
    # there at once, without a first send failing with ChatMigrated.
    upgrade = {
        "update_id": 9,
        "message": {
            "message_id": 70,
            "date": 1735689600,
            "chat": {"id": -4001, "title": "Team", "type": "group"},
            "from": {"id": 42, "is_bot": False, "first_name": "Al"},
            "migrate_to_chat_id": -1001987654321,
        },
    }
    adapter = TelegramAdapter(telegram_config(), identities=FIXTURE_BOTS)
    try:
        [event] = adapter.parse(json.dumps(upgrade).encode(), "support").events
    finally:
        await adapter.aclose()
    assert isinstance(event, InboundMessage)
    item = InboxIn("telegram", "support", event.chat_id, event.dedup_key, event.stored())
    sid = await answer(store, ScriptedModel(), item)
    db = tmp_path / "gateway.db"
    assert rows(db, "SELECT role, text FROM messages WHERE session_id = ?", sid) == [
        ("user", "[notice: this group became the supergroup -1001987654321]")
    ]
    assert rows(db, "SELECT count(*) FROM outbox") == [(0,)]
    session = await store.get_session(sid)
    assert reply_target(session.chat_id, session.metadata) == "-1001987654321"
