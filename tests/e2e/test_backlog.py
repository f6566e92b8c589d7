"""The real ``gateway serve`` under a flood while every turn waits on a model: past
``ingest.backlog_refuse`` deliveries get 503 and nothing is stored; once the model answers,
everything acknowledged is answered exactly once, and the refused deliveries, retried as the
platforms do, are accepted and answered too."""

from __future__ import annotations

import aiohttp
from pytest_aiohttp import AiohttpServer

from .conftest import MakeGateway, Platforms
from .gateway_proc import Gateway, eventually
from .webhooks import post, post_until_ok, telegram_text
from .ws_client import SlowModel, slow_agents

READY, REFUSE, FLOOD = 5, 10, 40
ANSWER = "a slow answer"  # what SlowModel says


async def readyz(http: aiohttp.ClientSession, gateway: Gateway) -> tuple[int, dict[str, object]]:
    async with http.get(f"{gateway.url}/readyz") as response:
        return response.status, await response.json()


def all_sent(gateway: Gateway, total: int) -> bool:
    return gateway.query("SELECT state, count(*) FROM outbox GROUP BY state") == [("sent", total)]


async def test_e2e_a_flood_past_backlog_refuse_gets_503_and_every_ack_is_answered_once(
    make_gateway: MakeGateway,
    platforms: Platforms,
    http: aiohttp.ClientSession,
    aiohttp_server: AiohttpServer,
) -> None:
    model = SlowModel()
    server = await aiohttp_server(model.app(), host="127.0.0.1")
    gateway = await make_gateway(
        agents=slow_agents(str(server.make_url("")).rstrip("/")),
        sections={"ingest": {"backlog_ready": READY, "backlog_refuse": REFUSE}},
    )
    chats = [7001 + i for i in range(FLOOD)]
    deliveries = {chat: telegram_text(9001 + i, chat, f"hello {i}") for i, chat in enumerate(chats)}
    try:
        statuses = {chat: await post(http, gateway.url, d) for chat, d in deliveries.items()}
        accepted = [chat for chat in chats if statuses[chat] == 200]
        refused = [chat for chat in chats if statuses[chat] == 503]
        assert len(accepted) + len(refused) == FLOOD, statuses
        # The estimate errs high for at most one read of the store: never past the bound.
        assert READY < len(accepted) <= REFUSE
        assert gateway.query("SELECT count(*) FROM processed_messages") == [(len(accepted),)]

        status, body = await readyz(http, gateway)
        assert status == 503
        assert body["error"] == {
            "code": "backlog",
            "message": f"{len(accepted)} messages wait for an answer, over {READY}",
            "backlog": len(accepted),
        }
        async with http.get(f"{gateway.url}/metrics") as response:
            text = await response.text()
        rejected = 'gateway_webhooks_rejected_total{channel="telegram",reason="backlog_full"}'
        assert f"{rejected} {float(len(refused))}\n" in text  # prometheus-client writes floats
        assert f"\ngateway_backlog {float(len(accepted))}\n" in text
        async with http.get(f"{gateway.url}/healthz") as response:
            assert response.status == 200
        await eventually(lambda: model.calls == len(accepted), "every accepted turn to wait")
    finally:
        model.release.set()

    await eventually(lambda: all_sent(gateway, len(accepted)), "the accepted messages' answers")
    for chat in refused:  # the platform tries again later, and now gets its 200
        await post_until_ok(http, gateway.url, deliveries[chat])
    await eventually(lambda: all_sent(gateway, FLOOD), "every answer")
    assert {chat: platforms.telegram.texts(str(chat)) for chat in chats} == {
        chat: [ANSWER] for chat in chats
    }
    assert gateway.query("SELECT state, count(*) FROM inbox GROUP BY state") == [("done", FLOOD)]
    assert model.calls == FLOOD  # one turn per message: none ran twice
    assert await readyz(http, gateway) == (200, {"status": "ready", "backlog": 0})
