"""The webhook routes in-process on a real SQLite file: handshake, ack, duplicates, limits."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.channels import telegram_fakes as tg
from tests.channels import whatsapp_fakes as wa
from webhook_bot_gateway.gateway._keys import (
    ADAPTERS,
    BACKLOG,
    INTAKE_WAKE,
    METRICS,
    PACER,
    STORE,
    WRITER,
)
from webhook_bot_gateway.gateway.app import build_app

from .ingest_helpers import (
    counts,
    grown,
    rows,
    settings,
    tg_headers,
    tg_update,
    wa_delivery,
    wa_headers,
    wa_text,
)

Client = TestClient[web.Request, web.Application]
MakeClient = Callable[..., Awaitable[Client]]


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "gateway.db"


@pytest.fixture
def make_client(aiohttp_client: Any, db_path: Path) -> MakeClient:
    async def make(**sections: dict[str, Any]) -> Client:
        app = build_app(settings(db_path, **sections), ingest_only=True)
        client: Client = await aiohttp_client(app)
        return client

    return make


@pytest.fixture
async def client(make_client: MakeClient) -> Client:
    return await make_client()


def metric(client: Client, name: str, **labels: str) -> float:
    return client.app[METRICS].value(f"gateway_{name}_total", **labels)


async def test_whatsapp_handshake_answers_the_challenge(client: Client) -> None:
    query = {"hub.mode": "subscribe", "hub.verify_token": wa.VERIFY_TOKEN, "hub.challenge": "1158"}
    response = await client.get("/webhooks/whatsapp", params=query)
    assert response.status == 200
    assert await response.text() == "1158"


@pytest.mark.parametrize(
    "query",
    [
        {"hub.mode": "subscribe", "hub.verify_token": "wrong", "hub.challenge": "1"},
        {"hub.mode": "unsubscribe", "hub.verify_token": wa.VERIFY_TOKEN, "hub.challenge": "1"},
        {"hub.challenge": "1"},
    ],
)
async def test_whatsapp_handshake_refuses_with_403(client: Client, query: dict[str, str]) -> None:
    response = await client.get("/webhooks/whatsapp", params=query)
    assert response.status == 403
    assert (await response.json())["error"]["code"] == "bad_verify_token"


async def test_whatsapp_delivery_is_stored_with_its_keys_before_the_200(
    client: Client, db_path: Path
) -> None:
    body = wa.fixture_bytes("batch.json")
    response = await client.post("/webhooks/whatsapp", data=body, headers=wa_headers(body))
    assert response.status == 200
    assert await response.json() == {"ok": True}
    [(stored, keys, account)] = rows(db_path, "SELECT body, keys, account FROM deliveries")
    assert stored == body
    assert account is None
    assert set(json.loads(keys)) == set(client.app[ADAPTERS]["whatsapp"].delivery_keys(body))
    assert client.app[INTAKE_WAKE].is_set()
    assert metric(client, "webhooks_accepted", channel="whatsapp") == 1


async def test_an_acknowledged_delivery_tells_the_pacer_that_webhooks_arrive(
    client: Client,
) -> None:
    """Acks first: the pacer heeds the loop's lag only while webhooks arrive."""
    pacer = client.app[PACER]
    assert not pacer.webhooks_arriving
    before = time.monotonic()
    body = wa.fixture_bytes("batch.json")
    response = await client.post("/webhooks/whatsapp", data=body, headers=wa_headers(body))
    assert response.status == 200
    assert pacer.last_webhook_at >= before  # (arriving for QUIET seconds: too short to assert)


async def test_the_pacer_may_pace_only_once_the_backlog_read_from_the_store_is_large(
    make_client: MakeClient,
) -> None:
    """Acks first only when behind: deliveries this process just stored do not count until the
    backlog is read from the store (a flood answered as fast as it comes is not behind)."""
    client = await make_client(ingest={"ack_priority_backlog": 3})
    pacer, backlog = client.app[PACER], client.app[BACKLOG]
    for n in range(3):
        body = wa_delivery([wa_text(f"wamid.behind{n}")])
        response = await client.post("/webhooks/whatsapp", data=body, headers=wa_headers(body))
        assert response.status == 200
    assert backlog.count == 3  # the estimate counts them at once...
    assert not pacer.behind  # ...but the pacer waits for the store's word
    await backlog.sync()  # ingest_only: nothing answers them, so all three wait
    assert pacer.behind


async def test_telegram_update_is_stored_for_its_bot(client: Client, db_path: Path) -> None:
    body = tg.fixture_bytes("01_private_text.json")
    response = await client.post(
        "/webhooks/telegram/sales", data=body, headers=tg_headers(tg.OTHER_SECRET)
    )
    assert response.status == 200
    [(account, keys)] = rows(db_path, "SELECT account, keys FROM deliveries")
    assert account == "sales"
    assert json.loads(keys) == [f"telegram:sales:{json.loads(body)['update_id']}"]


async def test_the_same_delivery_posted_five_times_is_stored_once(
    client: Client, db_path: Path
) -> None:
    body = wa_delivery([wa_text("wamid.dup1")])
    for _ in range(5):
        response = await client.post("/webhooks/whatsapp", data=body, headers=wa_headers(body))
        assert response.status == 200
    assert counts(db_path)["deliveries"] == 1
    assert rows(db_path, "SELECT key FROM processed_messages") == [("whatsapp:wamid.dup1",)]
    assert metric(client, "webhooks_duplicate", channel="whatsapp") == 4


async def test_concurrent_duplicates_share_one_delivery_row(client: Client, db_path: Path) -> None:
    body = tg_update(77)
    posts = [
        client.post("/webhooks/telegram/support", data=body, headers=tg_headers()) for _ in range(5)
    ]
    responses = await asyncio.gather(*posts)
    assert [r.status for r in responses] == [200] * 5
    assert counts(db_path)["deliveries"] == 1


@pytest.mark.parametrize("char", ["\x00", "\ud800"], ids=["nul", "lone-surrogate"])
async def test_a_message_id_with_an_unstorable_char_is_acknowledged_and_fails_no_other_delivery(
    client: Client, db_path: Path, char: str
) -> None:
    """PostgreSQL's text holds no NUL, and no UTF-8 text a lone surrogate (a JSON escape such
    as \\ud800): the key is stored with U+FFFD in its place (a refusal would fail every
    delivery sharing its commit with 503, at each of Meta's retries)."""
    odd = wa_delivery([wa_text(f"wamid.odd{char}one")])
    plain = wa_delivery([wa_text("wamid.plain")])
    posts = [
        client.post("/webhooks/whatsapp", data=body, headers=wa_headers(body))
        for body in (odd, plain, odd)
    ]
    responses = await asyncio.gather(*posts)
    assert [r.status for r in responses] == [200, 200, 200]
    stored = [json.loads(keys) for (keys,) in rows(db_path, "SELECT keys FROM deliveries")]
    assert sorted(stored) == [["whatsapp:wamid.odd\ufffdone"], ["whatsapp:wamid.plain"]]
    again = await client.post("/webhooks/whatsapp", data=odd, headers=wa_headers(odd))
    assert again.status == 200
    assert counts(db_path)["deliveries"] == 2  # the redelivery is a duplicate


async def test_a_delivery_for_an_unconfigured_number_is_acknowledged_and_not_stored(
    client: Client, db_path: Path
) -> None:
    before = counts(db_path)
    body = wa_delivery([wa_text("wamid.other")], number="999999")
    response = await client.post("/webhooks/whatsapp", data=body, headers=wa_headers(body))
    assert response.status == 200
    assert grown(before, counts(db_path)) == {}
    assert metric(client, "updates_ignored", channel="whatsapp") == 1


@pytest.mark.parametrize("name", ["23_chat_join_request.json", "24_poll_update.json"])
async def test_an_update_type_not_handled_is_acknowledged_and_kept_whole_in_quarantine(
    client: Client, db_path: Path, name: str
) -> None:
    """CONTRACT.md: a type the code does not know is quarantined, to be replayed by a release
    that handles it (Telegram sends one only to a webhook set without our allowed_updates)."""
    before = counts(db_path)
    body = tg.fixture_bytes(name)
    response = await client.post("/webhooks/telegram/support", data=body, headers=tg_headers())
    assert response.status == 200
    assert grown(before, counts(db_path)) == {"quarantine": 1}
    [(stored, reason)] = rows(db_path, "SELECT body, reason FROM quarantine")
    assert stored == body
    assert "is not handled" in reason


async def chunks(body: bytes, size: int = 65536) -> AsyncIterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


async def test_a_chunked_body_over_the_limit_gets_413(client: Client, db_path: Path) -> None:
    before = counts(db_path)
    body = tg_update(5, "x" * (1024 * 1024))
    response = await client.post(
        "/webhooks/telegram/support", data=chunks(body), headers=tg_headers()
    )
    assert response.status == 413
    assert (await response.json())["error"]["code"] == "body_too_large"
    assert grown(before, counts(db_path)) == {}
    assert metric(client, "webhooks_rejected", channel="telegram", reason="body_too_large") == 1


async def test_a_chunked_body_under_the_limit_is_accepted(client: Client, db_path: Path) -> None:
    body = wa_delivery([wa_text(f"wamid.c{i}", "y" * 1000) for i in range(300)])
    response = await client.post(
        "/webhooks/whatsapp", data=chunks(body, 4096), headers=wa_headers(body)
    )
    assert response.status == 200
    [(stored,)] = rows(db_path, "SELECT body FROM deliveries")
    assert stored == body


async def test_a_body_that_never_finishes_gets_408(make_client: MakeClient, db_path: Path) -> None:
    client = await make_client(server={"read_timeout": 0.2})
    never = asyncio.Event()

    async def stalled() -> AsyncIterator[bytes]:
        yield b'{"update_id": 1,'
        await never.wait()

    response = await client.post("/webhooks/telegram/support", data=stalled(), headers=tg_headers())
    assert response.status == 408
    assert (await response.json())["error"]["code"] == "request_timeout"
    assert counts(db_path)["deliveries"] == 0


async def test_a_store_failure_answers_503_so_the_platform_retries(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    """With one log line of the webhook's own: an outage refuses thousands of retries."""
    await client.app[STORE].aclose()
    body = tg_update(9)
    caplog.set_level(logging.INFO, logger="gateway.webhooks")
    response = await client.post("/webhooks/telegram/support", data=body, headers=tg_headers())
    assert response.status == 503
    assert (await response.json())["error"]["code"] == "store_unavailable"
    assert metric(client, "webhooks_rejected", channel="telegram", reason="store_unavailable") == 1
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "gateway.webhooks"]
    assert lines == [("ERROR", "telegram delivery not recorded: StoreError")]


async def test_concurrent_webhooks_share_commits(client: Client, db_path: Path) -> None:
    bodies = [wa_delivery([wa_text(f"wamid.g{i}")]) for i in range(40)]
    posts = [client.post("/webhooks/whatsapp", data=b, headers=wa_headers(b)) for b in bodies]
    responses = await asyncio.gather(*posts)
    assert [r.status for r in responses] == [200] * 40
    assert counts(db_path)["deliveries"] == 40
    assert client.app[WRITER].batches < 40


async def test_metrics_count_received_accepted_and_rejected(client: Client) -> None:
    body = tg_update(10)
    await client.post("/webhooks/telegram/support", data=body, headers=tg_headers())
    await client.post("/webhooks/telegram/support", data=body, headers=tg_headers("wrong"))
    text = await (await client.get("/metrics")).text()
    assert 'gateway_webhooks_received_total{channel="telegram"} 2' in text
    assert 'gateway_webhooks_accepted_total{channel="telegram"} 1' in text
    assert 'gateway_webhooks_rejected_total{channel="telegram",reason="bad_secret_token"} 1' in text


async def test_logs_never_hold_a_secret_or_a_body(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    marker = "PRIVATE-USER-WORDS"
    good = tg_update(11, marker)
    bad = b'{"update_id": 12, "message": "' + marker.encode() + b'"'  # not JSON
    await client.post("/webhooks/telegram/support", data=good, headers=tg_headers())
    await client.post("/webhooks/telegram/support", data=bad, headers=tg_headers())
    await client.post("/webhooks/telegram/support", data=good, headers=tg_headers("bad-guess"))
    body = wa_delivery([wa_text("wamid.log", marker)])
    await client.post("/webhooks/whatsapp", data=body, headers={"X-Hub-Signature-256": "sha256=00"})
    # aiosqlite logs each call's arguments at DEBUG; `gateway` keeps that logger at WARNING.
    text = "\n".join(r.getMessage() for r in caplog.records if r.name != "aiosqlite")
    for secret in (marker, tg.SECRET, tg.TOKEN, "bad-guess", wa.APP_SECRET):
        assert secret not in text
