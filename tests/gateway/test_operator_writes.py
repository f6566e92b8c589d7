"""Operator writes to one session at the same moment (two operators, a double submit) wait for
each other and all land, in order; a model's turn running for the session still refuses them
with 409 ``run_active`` (gateway/_admin/_operator_writes.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from pytest_aiohttp import AiohttpServer

from tests.openai_strict import completion
from webhook_bot_gateway.gateway._admin._operator_writes import OperatorWrites, WaitedTooLong
from webhook_bot_gateway.gateway._keys import DISPATCHER, OPERATOR_WRITES, STORE
from webhook_bot_gateway.gateway.app import build_app
from webhook_bot_gateway.store import Store

from .ingest_helpers import AUTH, settings, tg_headers, tg_update

Client = TestClient[web.Request, web.Application]
SID = "telegram-support-42"
REPLY = f"/api/sessions/{SID}/reply"
WAIT = 10.0  # seconds a test waits for what it expects before it fails


# The lock itself


async def test_writes_of_one_session_go_one_at_a_time_in_arrival_order() -> None:
    writes, order = OperatorWrites(), []
    inside = asyncio.Event()
    release = asyncio.Event()

    async def write(n: int) -> None:
        async with writes.one_at_a_time(SID):
            order.append(n)
            if n == 0:
                inside.set()
                await release.wait()

    first = asyncio.create_task(write(0))
    await inside.wait()
    rest = [asyncio.create_task(write(n)) for n in range(1, 5)]
    await asyncio.sleep(0)  # every later write is waiting now, in the order it came
    assert order == [0]
    assert len(writes) == 1  # one entry for the session, however many wait
    release.set()
    await asyncio.wait_for(asyncio.gather(first, *rest), WAIT)
    assert order == [0, 1, 2, 3, 4]
    assert len(writes) == 0  # nothing kept once no write holds or waits


async def test_writes_of_other_sessions_do_not_wait() -> None:
    writes = OperatorWrites(wait=WAIT)
    async with writes.one_at_a_time(SID), writes.one_at_a_time("telegram-support-43"):
        assert len(writes) == 2
    assert len(writes) == 0


async def test_a_wait_past_the_bound_gives_up_holding_nothing() -> None:
    writes = OperatorWrites(wait=0.01)
    async with writes.one_at_a_time(SID):
        with pytest.raises(WaitedTooLong) as refused:
            async with writes.one_at_a_time(SID):
                pytest.fail("the second write ran while the first held the session")
        assert refused.value.session_id == SID
        assert "did not finish within 0.01 s" in str(refused.value)
        assert len(writes) == 1
    assert len(writes) == 0
    async with writes.one_at_a_time(SID):  # the session is free again
        pass


async def test_a_cancelled_waiter_leaves_nothing_behind() -> None:
    writes = OperatorWrites(wait=WAIT)
    async with writes.one_at_a_time(SID):
        waiting = asyncio.create_task(_enter(writes))
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
    assert len(writes) == 0


async def test_an_error_in_a_write_frees_the_session_for_the_next() -> None:
    writes = OperatorWrites(wait=WAIT)
    with pytest.raises(RuntimeError):
        async with writes.one_at_a_time(SID):
            raise RuntimeError("the store failed")
    assert len(writes) == 0
    await asyncio.wait_for(_enter(writes), WAIT)


async def _enter(writes: OperatorWrites) -> None:
    async with writes.one_at_a_time(SID):
        pass


# The admin API, on a real store (SQLite and PostgreSQL)


@pytest.fixture
async def client(store_url: str, aiohttp_client: Any, tmp_path: Path) -> Client:
    app = build_app(settings(tmp_path / "unused.db", store={"url": store_url}), ingest_only=True)
    made: Client = await aiohttp_client(app)
    await made.app[STORE].create_session("telegram", "support", "42", "triage")
    return made


async def test_simultaneous_replies_all_land_in_order_each_with_its_outbox_row(
    client: Client,
) -> None:
    texts = [f"operator reply {n}" for n in range(6)]
    responses = await asyncio.gather(
        *(client.post(REPLY, headers=AUTH, json={"text": text}) for text in texts)
    )
    answers = []
    for response in responses:
        assert response.status == 202, await response.text()
        answers.append(await response.json())
    store: Store = client.app[STORE]
    branch = await store.get_branch(SID)
    assert sorted(m.text or "" for m in branch) == sorted(texts)  # each its own message
    assert [m.parent_id for m in branch[1:]] == [m.id for m in branch[:-1]]  # one line, no fork
    outbox = await store.list_outbox(SID)
    assert [row.payload["text"] for row in outbox] == [m.text for m in branch]  # same order
    assert all(row.state == "pending" for row in outbox)
    by_message = {a["message"]["id"]: a["outbox_id"] for a in answers}
    assert by_message == {m.id: row.id for m, row in zip(branch, outbox, strict=True)}
    assert len(client.app[OPERATOR_WRITES]) == 0


async def test_a_reply_a_handoff_and_a_rewind_at_once_all_land(client: Client) -> None:
    store: Store = client.app[STORE]
    first = await store.append_message(SID, "user", "hello")
    reply, handoff, rewind = await asyncio.gather(
        client.post(REPLY, headers=AUTH, json={"text": "One moment."}),
        client.post(f"/api/sessions/{SID}/handoff", headers=AUTH, json={"agent": "human"}),
        client.post(f"/api/sessions/{SID}/rewind", headers=AUTH, json={"message_id": first.id}),
    )
    assert [reply.status, handoff.status, rewind.status] == [202, 200, 200]
    session = await store.get_session(SID)
    assert session is not None
    assert (session.active_agent, session.status) == ("human", "idle")
    texts = {m.text for m in await store.all_messages(SID)}  # a rewind may leave them off-branch
    assert "One moment." in texts
    assert "Thank you. A person from our team will answer you here shortly." in texts  # told
    assert len(await store.list_outbox(SID)) == 2


async def test_a_reply_that_waits_past_the_bound_is_409_and_writes_nothing(
    store_url: str, aiohttp_client: Any, tmp_path: Path
) -> None:
    app = build_app(settings(tmp_path / "unused.db", store={"url": store_url}), ingest_only=True)
    app[OPERATOR_WRITES] = writes = OperatorWrites(wait=0.05)
    client: Client = await aiohttp_client(app)
    await client.app[STORE].create_session("telegram", "support", "42", "triage")
    async with writes.one_at_a_time(SID):  # a write that does not finish
        response = await client.post(REPLY, headers=AUTH, json={"text": "x"})
    assert response.status == 409
    error = (await response.json())["error"]
    assert error["code"] == "run_active"
    assert "another operator's write did not finish" in error["message"]
    assert await client.app[STORE].list_outbox(SID) == []
    assert (await client.post(REPLY, headers=AUTH, json={"text": "y"})).status == 202


# A model's turn, run by the app's dispatcher


class HeldModel:
    """An OpenAI-compatible model server on loopback that holds its answer until released."""

    def __init__(self) -> None:
        self.asked = asyncio.Event()
        self.release = asyncio.Event()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.answer)
        return app

    async def answer(self, request: web.Request) -> web.Response:
        await request.read()
        self.asked.set()
        await self.release.wait()
        return web.json_response(completion("the bot's answer"))


@pytest.fixture
async def model(aiohttp_server: AiohttpServer) -> AsyncIterator[tuple[HeldModel, TestServer]]:
    held = HeldModel()
    server = await aiohttp_server(held.app())
    yield held, server
    held.release.set()


async def test_a_reply_while_the_dispatchers_turn_runs_is_409_then_lands_after_it(
    store_url: str,
    aiohttp_client: Any,
    tmp_path: Path,
    model: tuple[HeldModel, TestServer],
) -> None:
    held, server = model
    agents = {
        "starting_agent": "triage",
        "models": {"held": {"base_url": str(server.make_url("/v1")), "model": "m"}},
        "list": [{"name": "triage", "model": "held"}, {"name": "human", "kind": "human"}],
    }
    config = settings(tmp_path / "unused.db", store={"url": store_url}, agents=agents)
    client: Client = await aiohttp_client(build_app(config))  # the whole pipeline
    sid, reply = "telegram-support-123456789", "/api/sessions/telegram-support-123456789/reply"
    delivered = await client.post(
        "/webhooks/telegram/support", data=tg_update(1, "hello"), headers=tg_headers()
    )
    assert delivered.status == 200
    await asyncio.wait_for(held.asked.wait(), WAIT)  # the turn is asking its model
    store: Store = client.app[STORE]
    session = await store.get_session(sid)
    assert session is not None
    assert session.status == "running"

    refused = await client.post(reply, headers=AUTH, json={"text": "not now"})
    assert refused.status == 409
    assert (await refused.json())["error"]["code"] == "run_active"
    assert await store.list_outbox(sid) == []

    held.release.set()
    await asyncio.wait_for(client.app[DISPATCHER].wait_idle(), WAIT)
    landed = await client.post(reply, headers=AUTH, json={"text": "A person here."})
    assert landed.status == 202, await landed.text()
    branch = [(m.role, m.text) for m in await store.get_branch(sid)]
    assert branch == [
        ("user", "hello"),
        ("assistant", "the bot's answer"),
        ("operator", "A person here."),
    ]
