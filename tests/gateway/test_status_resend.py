"""A reply WhatsApp accepted and then reported failed, through the whole gateway in-process:
real signed webhooks, the pipeline, a real SQLite file and the fake Graph API on loopback.

A transient code (131056, the pair rate limit) sends the reply again, once, however often
Meta delivers that status; a permanent one (131026) sends nothing again.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from pytest_aiohttp import AiohttpServer

from tests.channels import whatsapp_fakes as wa
from webhook_bot_gateway.gateway._keys import STORE
from webhook_bot_gateway.gateway.app import build_app
from webhook_bot_gateway.store import SessionNotFound, Store

from .ingest_helpers import NUMBER, settings, wa_delivery, wa_headers, wa_text

Client = TestClient[web.Request, web.Application]
USER = "972987654321"
SESSION = f"whatsapp-{NUMBER}-{USER}"
DEADLINE = 20.0  # seconds before a wait fails the test (131056 first waits 1 s)
PAIR_LIMIT = {"code": 131056, "title": "(Business Account, Consumer Account) pair rate limit hit"}
UNDELIVERABLE = {"code": 131026, "title": "Message undeliverable"}


@pytest.fixture
async def graph(aiohttp_server: AiohttpServer) -> AsyncIterator[tuple[wa.FakeGraph, str]]:
    fake = wa.FakeGraph()
    server = await aiohttp_server(fake.app(), host="127.0.0.1")
    yield fake, str(server.make_url("")).rstrip("/")
    fake.release.set()


@pytest.fixture
async def client(aiohttp_client: Any, tmp_path: Path, graph: tuple[wa.FakeGraph, str]) -> Client:
    config = settings(
        tmp_path / "gateway.db",
        whatsapp={"graph_base_url": graph[1]},
        sender={"backoff_base_seconds": 0.0},  # only Meta's own wait for 131056: 1 s
    )
    made: Client = await aiohttp_client(build_app(config))
    return made


def replies(fake: wa.FakeGraph) -> list[Any]:
    """The messages the gateway sent (not its read receipts)."""
    sends = [r for r in fake.requests if r.path.endswith("/messages")]
    return [r.body for r in sends if r.body.get("status") != "read"]


def failed_status(wamid: str, error: dict[str, Any]) -> bytes:
    status = {"id": wamid, "status": "failed", "timestamp": "1735689600", "recipient_id": USER}
    value = {
        "messaging_product": "whatsapp",
        "metadata": {"display_phone_number": "15550000000", "phone_number_id": NUMBER},
        "statuses": [{**status, "errors": [error]}],
    }
    change = {"field": "messages", "value": value}
    body = {"object": "whatsapp_business_account", "entry": [{"id": "1", "changes": [change]}]}
    return json.dumps(body).encode()


async def post(client: Client, body: bytes) -> None:
    response = await client.post("/webhooks/whatsapp", data=body, headers=wa_headers(body))
    assert response.status == 200, await response.text()


async def user_writes(client: Client, wamid: str) -> None:
    await post(client, wa_delivery([wa_text(wamid, "hello")]))


async def until(store: Store, check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Wait, without polling, until ``check`` holds: it is looked at after each commit that
    logs a session event (every send recorded, every status applied)."""
    loop = asyncio.get_running_loop()
    changed = asyncio.Event()
    stop = store.watch_events(lambda _: loop.call_soon_threadsafe(changed.set))
    try:
        async with asyncio.timeout(DEADLINE):
            while True:
                changed.clear()
                if await check():
                    return
                await changed.wait()
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None
    finally:
        stop()


def sent_times(count: int, store: Store) -> Callable[[], Awaitable[bool]]:
    """Whether the session's replies were recorded as sent ``count`` times in all."""

    async def check() -> bool:
        try:
            events = await store.list_events(SESSION)
        except SessionNotFound:  # the ack came before the dispatcher stored the session
            return False
        sent = [e for e in events if e.kind == "status" and e.detail["state"] == "sent"]
        return len(sent) >= count

    return check


async def test_a_reply_failed_with_131056_is_sent_again_once(
    client: Client, graph: tuple[wa.FakeGraph, str]
) -> None:
    fake, store = graph[0], client.app[STORE]
    await user_writes(client, "wamid.in1")
    await until(store, sent_times(1, store), "the reply")
    [answer] = replies(fake)

    failed = failed_status("wamid.out1", PAIR_LIMIT)
    for _ in range(2):  # Meta delivers the same status twice
        await post(client, failed)
    await until(store, sent_times(2, store), "the reply sent again")
    await post(client, failed)  # and once more, after the second send
    await user_writes(client, "wamid.in2")  # a barrier: its reply goes after any other
    await until(store, sent_times(3, store), "the second message's reply")

    assert replies(fake) == [answer] * 3
    first, second = await store.list_outbox(SESSION)
    assert (first.state, first.platform_ids, first.attempts) == ("sent", ("wamid.out2",), 2)
    assert (second.state, second.platform_ids) == ("sent", ("wamid.out3",))
    resent = [e.detail for e in await store.list_events(SESSION) if "resend_at" in e.detail]
    assert [(d["outbox_id"], d["resend_part"]) for d in resent] == [(first.id, 0)]


async def test_a_reply_failed_with_131026_is_not_sent_again(
    client: Client, graph: tuple[wa.FakeGraph, str]
) -> None:
    fake, store = graph[0], client.app[STORE]
    await user_writes(client, "wamid.in1")
    await until(store, sent_times(1, store), "the reply")
    await post(client, failed_status("wamid.out1", UNDELIVERABLE))
    await user_writes(client, "wamid.in2")  # recorded after the status; the user is back
    await until(store, sent_times(2, store), "the second message's reply")

    assert len(replies(fake)) == 2
    first, second = await store.list_outbox(SESSION)
    assert (first.state, first.delivery_state, first.platform_ids) == (
        "sent",
        "failed",
        ("wamid.out1",),
    )
    assert (second.state, second.platform_ids) == ("sent", ("wamid.out2",))
