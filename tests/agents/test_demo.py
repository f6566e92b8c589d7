"""The offline demo agents of config.example.toml, on the rules backend, across restarts."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from webhook_bot_gateway.agents import (
    AgentsConfig,
    Reply,
    Runner,
    TurnResult,
    UserInput,
    build_registry,
)
from webhook_bot_gateway.agents.demo import lookup_invoice
from webhook_bot_gateway.store import SQLiteStore

EXAMPLE = Path(__file__).resolve().parents[2] / "config.example.toml"


def demo_config() -> AgentsConfig:
    raw = tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))
    return AgentsConfig.model_validate(raw["agents"])


async def turn(db_path: Path, text: str) -> TurnResult:
    """One turn in a fresh process: a new store, registry and runner on the same file."""
    config = demo_config()
    registry = build_registry(config, environ={})
    async with SQLiteStore(db_path) as store:
        session = await store.get_or_create_session("web", "demo", "1", config.starting_agent)
        try:
            return await Runner.from_config(store, registry, config).run_turn(
                session.session_id, UserInput(text)
            )
        finally:
            await registry.aclose()


def texts(result: TurnResult) -> list[str]:
    return [reply.text for reply in result.replies]


async def test_demo_conversation(db_path: Path) -> None:
    hello = await turn(db_path, "hello")
    assert hello.replies == (
        Reply(
            "Hello! I can help with bills, invoices, refunds and payments, "
            "or pass you to a person.",
            "triage",
            ("Billing", "Talk to a person"),
        ),
    )
    billing = await turn(db_path, "I have a question about my invoice")
    assert (billing.agent_before, billing.agent_after) == ("triage", "billing")
    assert texts(billing) == [
        "Billing here. Send me an invoice number such as INV-1001, or say menu to go back."
    ]
    invoice = await turn(db_path, "what about inv-1002?")
    assert texts(invoice) == ["Invoice INV-1002: 120.50 EUR, open, due 2024-07-15."]
    menu = await turn(db_path, "menu")
    assert (menu.agent_after, menu.replies[0].agent) == ("triage", "triage")
    person = await turn(db_path, "Can I talk to a person?")
    assert person.agent_after == "human"
    assert texts(person) == ["Thank you. A person from our team will answer you here shortly."]
    waiting = await turn(db_path, "hello?")
    assert (waiting.agent_after, waiting.replies) == ("human", ())


@pytest.mark.parametrize("text", ["refund please", "Payment failed", "my BILL"])
async def test_demo_triage_billing_words_hand_off(db_path: Path, text: str) -> None:
    assert (await turn(db_path, text)).agent_after == "billing"


@pytest.mark.parametrize("text", ["operator!", "a human please", "real agent"])
async def test_demo_triage_human_words_hand_off(db_path: Path, text: str) -> None:
    assert (await turn(db_path, text)).agent_after == "human"


def test_demo_lookup_invoice_unknown_number() -> None:
    assert lookup_invoice(number="INV-9") == (
        "No invoice INV-9 was found. Demo invoices: INV-1001, INV-1002, INV-1003."
    )


async def test_demo_billing_passes_a_request_for_a_person_on(db_path: Path) -> None:
    await turn(db_path, "my invoice please")
    person = await turn(db_path, "I would like to talk to a person")
    assert (person.agent_before, person.agent_after) == ("billing", "human")
    assert texts(person) == ["Thank you. A person from our team will answer you here shortly."]


HELP = "Hello! I can help with bills, invoices, refunds and payments, or pass you to a person."


@pytest.mark.parametrize(
    "text", ["menu: a question about my bill", "back to the menu, I have a payment question"]
)
async def test_demo_a_message_handed_back_within_its_turn_is_answered(
    db_path: Path, text: str
) -> None:
    """triage hands it to billing (bill, payment), billing back to triage (menu): triage
    answers with its next rule. It used to answer nothing, and the user got no word."""
    await turn(db_path, "hello")  # at triage
    result = await turn(db_path, text)
    assert (result.agent_before, result.agent_after) == ("triage", "triage")
    assert texts(result) == [HELP]


async def test_demo_billing_handed_a_message_back_answers_it(db_path: Path) -> None:
    await turn(db_path, "my invoice please")  # at billing
    result = await turn(db_path, "menu, then my invoice")
    assert (result.agent_before, result.agent_after) == ("billing", "billing")
    assert texts(result) == [
        "Billing here. Send me an invoice number such as INV-1001, or say menu to go back."
    ]
