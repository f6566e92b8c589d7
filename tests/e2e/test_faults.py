"""Platform faults against the real gateway: 429 with retry_after, 5xx, and a send that hangs.

Each chat gets its own fault, all in one gateway run. Every reply still arrives, exactly once;
the 429's wait is measured by the fake server's clock; a hung send is recorded ``uncertain``
and never sent again (neither platform offers an idempotency key).
"""

from __future__ import annotations

import asyncio
import re
import signal

import aiohttp

from .conftest import MakeGateway, Platforms
from .gateway_proc import BOT, NUMBER, Gateway, eventually
from .webhooks import post, telegram_text, whatsapp_texts

HELP = "Hello! I can help with bills, invoices, refunds and payments, or pass you to a person."


def outbox(gateway: Gateway, session_id: str) -> list[str]:
    rows = gateway.query("SELECT state FROM outbox WHERE session_id = ? ORDER BY id", session_id)
    return [row[0] for row in rows]


def attempts(platforms: Platforms, chat_id: str) -> list[tuple[str, float]]:
    """(outcome, arrival time) of every send to ``chat_id``."""
    every = platforms.telegram.requests + platforms.graph.requests
    return [
        (r.outcome, r.at)
        for r in every
        if r.chat_id == chat_id and r.method in ("sendMessage", "message")
    ]


async def metric(
    http: aiohttp.ClientSession, gateway: Gateway, outcome: str, channel: str
) -> float:
    async with http.get(f"{gateway.url}/metrics") as response:
        text = await response.text()
    pattern = rf'gateway_outbox_total{{channel="{channel}",outcome="{outcome}"}} (\S+)'
    found = re.search(pattern, text)
    return float(found.group(1)) if found else 0.0


async def test_e2e_faults_429_5xx_and_hang_each_reply_arrives_once(
    make_gateway: MakeGateway, platforms: Platforms, http: aiohttp.ClientSession
) -> None:
    telegram, graph = platforms.telegram, platforms.graph
    telegram.fail("7001", "429:1")
    telegram.fail("7002", "500", "500")
    telegram.fail("7003", "hang")
    graph.fail("15557000001", "429:1")
    graph.fail("15557000002", "500")
    gateway = await make_gateway(sections={"telegram": {"request_timeout": 1}})
    posts = [telegram_text(8000 + n, 7000 + n, "hello") for n in range(1, 5)]
    posts += [whatsapp_texts(f"1555700000{n}", (f"wamid.f{n}", "hello")) for n in (1, 2)]
    assert await asyncio.gather(*(post(http, gateway.url, p) for p in posts)) == [200] * 6

    sessions = {f"telegram-{BOT}-700{n}": "sent" for n in (1, 2, 4)}
    sessions |= {f"whatsapp-{NUMBER}-1555700000{n}": "sent" for n in (1, 2)}
    sessions[f"telegram-{BOT}-7003"] = "uncertain"

    def settled() -> bool:
        return all(outbox(gateway, sid) == [state] for sid, state in sessions.items())

    await eventually(settled, "every reply sent, the hung one uncertain", seconds=30)

    for chat in ("7001", "15557000001"):  # 429: the retry waited out retry_after (1 s)
        (first, at_429), (second, at_ok) = attempts(platforms, chat)
        assert (first, second) == ("429", "ok")
        assert at_ok - at_429 >= 1.0, chat
    assert [o for o, _ in attempts(platforms, "7002")] == ["500", "500", "ok"]
    assert [o for o, _ in attempts(platforms, "15557000002")] == ["500", "ok"]
    assert [o for o, _ in attempts(platforms, "7003")] == ["hang"]  # arrived, never again
    assert [o for o, _ in attempts(platforms, "7004")] == ["ok"]  # others were not held up
    for chat in ("7001", "7002", "7004"):
        assert telegram.texts(chat) == [HELP]
    for chat in ("15557000001", "15557000002"):
        assert graph.texts(chat) == [HELP]

    async def counted() -> bool:
        """The sender counts a sent or uncertain row after the commit ``settled`` saw."""
        sent = await metric(http, gateway, "sent", "telegram")
        return sent >= 3 and await metric(http, gateway, "uncertain", "telegram") >= 1

    await eventually(counted, "the sends settled to be counted", seconds=10)
    assert await metric(http, gateway, "uncertain", "telegram") == 1
    assert await metric(http, gateway, "retried", "telegram") == 3
    assert await metric(http, gateway, "retried", "whatsapp") == 2
    assert await metric(http, gateway, "sent", "telegram") == 3
    telegram.release.set()
    assert await gateway.stop(signal.SIGTERM) == 0
    assert [o for o, _ in attempts(platforms, "7003")] == ["hang"]
