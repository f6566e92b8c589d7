"""Routing per account: each bot and number starts its sessions at its own agent."""

from __future__ import annotations

import aiohttp

from .conftest import MakeGateway, Platforms
from .gateway_proc import BOT, BOT_SECRET, BOT_TOKEN, NUMBER, eventually
from .webhooks import post, telegram_text, whatsapp_texts

SALES_NUMBER = "100000000000002"
SALES_SECRET = "e2e-sales-secret"


def greeter(name: str) -> str:
    return f"""
[[agents.list]]
name = "{name}"
model = "rules"

[[agents.list.rules]]
reply = "{name} here"
"""


AGENTS = '\n[agents]\nstarting_agent = "general"\n' + "".join(
    greeter(name) for name in ("general", "sales", "support", "orders")
)
BOTS = [
    {"name": BOT, "token": BOT_TOKEN, "secret_token": BOT_SECRET, "starting_agent": "support"},
    {"name": "sales", "token": "222:AAH-e2e_sales_TOKEN", "secret_token": SALES_SECRET},
]
NUMBERS = [
    {"phone_number_id": NUMBER, "access_token": "e2e-access-token", "starting_agent": "orders"},
    {"phone_number_id": SALES_NUMBER, "access_token": "e2e-sales-token", "starting_agent": "sales"},
]


async def test_e2e_each_bot_and_number_starts_at_its_own_agent(
    make_gateway: MakeGateway, platforms: Platforms, http: aiohttp.ClientSession
) -> None:
    gateway = await make_gateway(AGENTS, bots=BOTS, numbers=NUMBERS)
    sent = [
        telegram_text(1, 501, "hi"),
        telegram_text(2, 502, "hi", bot="sales", secret=SALES_SECRET),
        whatsapp_texts("15550000001", ("wamid.a", "hi")),
        whatsapp_texts("15550000002", ("wamid.b", "hi"), number=SALES_NUMBER),
    ]
    for delivery in sent:
        assert await post(http, gateway.url, delivery) == 200
    telegram, graph = platforms.telegram, platforms.graph
    await eventually(
        lambda: (
            (telegram.texts("501"), telegram.texts("502")) == (["support here"], ["general here"])
        ),
        "each bot's greeting",
    )
    await eventually(
        lambda: (
            (graph.texts("15550000001"), graph.texts("15550000002"))
            == (["orders here"], ["sales here"])
        ),
        "each number's greeting",
    )
    agents = {
        sid: (await gateway.admin(http, f"/api/sessions/{sid}"))["active_agent"]
        for sid in (
            f"telegram-{BOT}-501",
            "telegram-sales-502",
            f"whatsapp-{NUMBER}-15550000001",
            f"whatsapp-{SALES_NUMBER}-15550000002",
        )
    }
    assert list(agents.values()) == ["support", "general", "orders", "sales"]
