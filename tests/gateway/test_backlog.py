"""The backlog bounds in-process on a real SQLite file: /readyz past ``ingest.backlog_ready``,
503 ``backlog_full`` at ``ingest.backlog_refuse`` with nothing stored, the gauge, and the
estimate that each read of the store replaces."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from pytest_aiohttp import AiohttpServer

from tests.channels import whatsapp_fakes as wa
from tests.e2e.ws_client import SlowModel, WebClient
from webhook_bot_gateway.gateway._keys import BACKLOG, METRICS
from webhook_bot_gateway.gateway._pipeline import _backlog
from webhook_bot_gateway.gateway._pipeline._backlog import Backlog
from webhook_bot_gateway.gateway.app import build_app
from webhook_bot_gateway.gateway.config import parse_settings
from webhook_bot_gateway.gateway.errors import ConfigError

from .ingest_helpers import (
    counts,
    grown,
    settings,
    tg_headers,
    tg_update,
    wa_delivery,
    wa_headers,
    wa_text,
)

Client = TestClient[web.Request, web.Application]
WA = "/webhooks/whatsapp"
DEADLINE_SECONDS = 20.0


@pytest.fixture(autouse=True)
def no_background_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only /readyz reads the count here, so every number a test sees is one it caused."""
    monkeypatch.setattr(_backlog, "SYNC_SECONDS", 3600.0)


async def eventually(check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Poll ``check`` until true; fail naming ``what`` after the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_SECONDS
    while not await check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def post_wa(client: Client, wamid: str, sender: str = "972987654321") -> int:
    body = wa_delivery([wa_text(wamid, sender=sender)])
    response = await client.post(WA, data=body, headers=wa_headers(body))
    return response.status


async def readyz(client: Client) -> tuple[int, dict[str, Any]]:
    response = await client.get("/readyz")
    return response.status, await response.json()


def rejected(client: Client, channel: str) -> float:
    metrics = client.app[METRICS]
    return metrics.value("gateway_webhooks_rejected_total", channel=channel, reason="backlog_full")


# config


@pytest.mark.parametrize(("ready", "refuse"), [(10, 10), (10, 5), (30000, None)])
def test_backlog_refuse_not_above_ready_names_the_key(ready: int, refuse: int | None) -> None:
    ingest = {"backlog_ready": ready} | ({} if refuse is None else {"backlog_refuse": refuse})
    with pytest.raises(ConfigError) as caught:
        parse_settings({"ingest": ingest}, {})
    assert caught.value.key == "ingest.backlog_refuse"
    assert "greater than ingest.backlog_ready" in str(caught.value)


def test_backlog_bounds_have_defaults() -> None:
    ingest = parse_settings({}, {}).ingest
    assert (ingest.backlog_ready, ingest.backlog_refuse) == (5000, 20000)


# the refuse bound


async def test_deliveries_at_backlog_refuse_get_503_and_store_nothing(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    db = tmp_path / "gateway.db"
    ingest = {"backlog_ready": 1, "backlog_refuse": 3}
    client: Client = await aiohttp_client(build_app(settings(db, ingest=ingest), ingest_only=True))
    for i in range(3):  # below the bound: acknowledged and stored
        assert await post_wa(client, f"wamid.ok{i}") == 200
    assert counts(db)["deliveries"] == 3

    before = counts(db)
    refused = [
        await client.post(WA, data=body, headers=wa_headers(body))
        for body in (wa_delivery([wa_text("wamid.late")]), wa_delivery([wa_text("wamid.ok0")]))
    ]
    refused.append(
        await client.post("/webhooks/telegram/support", data=tg_update(5), headers=tg_headers())
    )
    for response in refused:
        assert response.status == 503
        assert (await response.json())["error"]["code"] == "backlog_full"
    assert grown(before, counts(db)) == {}  # not even a dedup key claimed
    assert (rejected(client, "whatsapp"), rejected(client, "telegram")) == (2, 1)

    handshake = {"hub.mode": "subscribe", "hub.verify_token": wa.VERIFY_TOKEN, "hub.challenge": "7"}
    assert (await client.get(WA, params=handshake)).status == 200
    assert (await client.get("/healthz")).status == 200
    status, body = await readyz(client)
    assert (status, body["error"]["code"], body["error"]["backlog"]) == (503, "backlog", 3)
    text = await (await client.get("/metrics")).text()
    assert "# TYPE gateway_backlog gauge\ngateway_backlog 3.0\n" in text

    # Deleting the rows stands in for the intake and the turns: once the count drops, they flow.
    _delete_deliveries(db)
    assert await readyz(client) == (200, {"status": "ready", "backlog": 0})
    assert await post_wa(client, "wamid.after") == 200


def _delete_deliveries(db: Path) -> None:
    conn = sqlite3.connect(db)
    try:
        conn.execute("DELETE FROM deliveries")
        conn.commit()
    finally:
        conn.close()


async def test_deliveries_waiting_for_their_commit_count_toward_the_refuse_bound(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    db = tmp_path / "gateway.db"
    ingest = {"backlog_ready": 4, "backlog_refuse": 5}
    client: Client = await aiohttp_client(build_app(settings(db, ingest=ingest), ingest_only=True))
    bodies = [wa_delivery([wa_text(f"wamid.f{i}")]) for i in range(12)]
    responses = await asyncio.gather(
        *(client.post(WA, data=body, headers=wa_headers(body)) for body in bodies)
    )
    statuses = sorted(response.status for response in responses)
    assert statuses == [200] * 5 + [503] * 7  # concurrent requests never pass the bound
    assert counts(db)["deliveries"] == 5
    assert client.app[BACKLOG].in_flight == 0


# the ready bound, with turns that wait on a model


async def test_readyz_turns_503_past_backlog_ready_and_back_when_the_backlog_drains(
    aiohttp_client: Any, aiohttp_server: AiohttpServer, tmp_path: Path
) -> None:
    model = SlowModel()
    server = await aiohttp_server(model.app(), host="127.0.0.1")
    agents = {
        "starting_agent": "slow",
        "models": {"slow": {"base_url": str(server.make_url("/v1")), "model": "slow"}},
        "list": [{"name": "slow", "model": "slow", "instructions": "Answer slowly."}],
    }
    sections = {"ingest": {"backlog_ready": 2, "backlog_refuse": 10}, "agents": agents}
    client: Client = await aiohttp_client(build_app(settings(tmp_path / "gateway.db", **sections)))
    try:
        for i in range(2):
            assert await post_wa(client, f"wamid.r{i}", sender=f"97250000000{i}") == 200
        assert await readyz(client) == (200, {"status": "ready", "backlog": 2})  # at, not past
        assert await post_wa(client, "wamid.r2", sender="972500000002") == 200
        status, body = await readyz(client)
        assert (status, body["error"]["code"], body["error"]["backlog"]) == (503, "backlog", 3)
        assert await post_wa(client, "wamid.r3", sender="972500000003") == 200  # acks go on

        async def every_turn_waits() -> bool:
            return model.calls >= 4

        await eventually(every_turn_waits, "every turn to reach the model")
        model.release.set()

        async def ready() -> bool:
            return await readyz(client) == (200, {"status": "ready", "backlog": 0})

        await eventually(ready, "/readyz to answer 200 once the turns committed")
        assert client.app[BACKLOG].count == 0
    finally:
        model.release.set()


# the estimate


class CountingStore:
    """Just ``backlog_count``: a number the test sets, or an error."""

    def __init__(self) -> None:
        self.count = 0
        self.error: Exception | None = None
        self.reads = 0

    async def backlog_count(self) -> int:
        self.reads += 1
        if self.error is not None:
            raise self.error
        return self.count


def make_backlog(store: CountingStore, *, ready: int = 5, refuse: int = 10) -> Backlog:
    return Backlog(store, ready=ready, refuse=refuse)  # type: ignore[arg-type]


async def test_backlog_adds_what_was_stored_since_the_last_read() -> None:
    store = CountingStore()
    backlog = make_backlog(store)
    store.count = 4
    assert await backlog.sync() == 4
    for _ in range(3):
        backlog.submitted()
        backlog.settled(stored=True)
    backlog.submitted()
    backlog.settled(stored=False)  # a duplicate: nothing stored
    assert backlog.count == 7
    assert backlog.ready is False
    assert backlog.full() is False
    store.count = 2  # meanwhile answered: the next read replaces the estimate
    assert await backlog.sync() == 2
    assert backlog.ready is True


async def test_backlog_refuses_at_the_bound_counting_deliveries_in_flight() -> None:
    store = CountingStore()
    backlog = make_backlog(store, refuse=3)
    store.count = 1
    await backlog.sync()
    backlog.submitted()
    assert backlog.full() is False
    backlog.submitted()
    assert backlog.full() is True  # 1 stored + 2 on their way
    backlog.settled(stored=False)
    assert backlog.full() is False


async def test_backlog_keeps_its_estimate_while_the_store_fails() -> None:
    store = CountingStore()
    backlog = make_backlog(store)
    store.count = 6
    await backlog.sync()
    store.error = RuntimeError("down")
    with pytest.raises(RuntimeError):
        await backlog.sync()
    assert backlog.count == 6


async def test_backlog_task_reads_the_store_again_and_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_backlog, "SYNC_SECONDS", 0.01)
    store = CountingStore()
    backlog = make_backlog(store)
    for _ in range(50):  # an estimate far off (deliveries counted, then answered elsewhere)
        backlog.submitted()
        backlog.settled(stored=True)
    backlog.start()
    try:
        store.error = RuntimeError("down")  # a failing read is survived

        async def failed_twice() -> bool:
            return store.reads >= 2

        await eventually(failed_twice, "two failed reads")
        assert backlog.count == 50
        store.error, store.count = None, 3

        async def corrected() -> bool:
            return backlog.count == 3

        await eventually(corrected, "the next read to replace the estimate")
    finally:
        await backlog.aclose()


async def test_web_messages_at_backlog_refuse_get_an_error_frame_and_store_nothing(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    db = tmp_path / "gateway.db"
    ingest = {"backlog_ready": 1, "backlog_refuse": 2}
    client: Client = await aiohttp_client(build_app(settings(db, ingest=ingest), ingest_only=True))
    async with client.ws_connect("/ws") as ws:
        socket = WebClient(ws)
        await socket.next()
        for cid in ("c1", "c2"):  # below the bound: acknowledged and stored
            await socket.say("hello", cid)
        before = counts(db)
        await socket.send({"type": "message", "data": {"text": "one more", "client_id": "c3"}})
        error = await socket.next()
        assert error["data"] == {
            "code": "backlog_full",
            "message": error["data"]["message"],
            "client_id": "c3",
        }
        assert grown(before, counts(db)) == {}
        _delete_deliveries(db)
        await readyz(client)  # reads the count again: the backlog drained
        await socket.say("one more", "c3")  # the client's re-send goes through
