"""A cancel whose turn runs in another process that does not answer (PostgreSQL): the admin
API answers 503 ``cancel_unanswered`` and the socket an error frame with that code, not a
``no_turn_running`` that would claim the turn is not running. (The relayed cancel itself, two
``gateway serve`` processes, is in tests/e2e/test_processes.py.)"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.e2e.ws_client import WebClient
from tests.pg import fresh_schema
from webhook_bot_gateway.gateway._keys import METRICS
from webhook_bot_gateway.gateway._metrics import CANCELS
from webhook_bot_gateway.gateway._pipeline import _dispatcher
from webhook_bot_gateway.gateway.app import build_app
from webhook_bot_gateway.store import SQLiteStore, Store
from webhook_bot_gateway.store.postgres import PostgresStore

from .ingest_helpers import AUTH, settings

Client = TestClient[web.Request, web.Application]
LEASE = 60.0


@pytest.fixture
async def url() -> AsyncIterator[str]:
    async with fresh_schema() as made:
        yield made


@pytest.fixture
async def client(url: str, aiohttp_client: Any, tmp_path: Path) -> Client:
    """The app on the schema of ``url`` (set up first, so dropped after the app closed)."""
    config = settings(tmp_path / "unused.db", store={"url": url})
    made: Client = await aiohttp_client(build_app(config))
    return made


async def turn_held_elsewhere(store: Store) -> str:
    """A web session whose turn another live process runs, one that hears no cancels."""
    session = await store.create_session("web", "", str(uuid.uuid4()), "triage")
    await store.renew_lease(LEASE)
    await store.turn(session.session_id).__aenter__()  # entered, never left
    return session.session_id


async def test_a_cancel_the_running_process_does_not_answer_is_503(
    client: Client, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_dispatcher, "CANCEL_RELAY_SECONDS", 0.05)
    async with PostgresStore(url) as elsewhere:
        sid = await turn_held_elsewhere(elsewhere)
        response = await client.post(f"/api/sessions/{sid}/cancel", headers=AUTH)
        assert response.status == 503, await response.text()
        error = (await response.json())["error"]
        assert error["code"] == "cancel_unanswered"
        assert "did not answer" in error["message"]
        async with client.ws_connect(f"/ws?session_id={sid}&after=0") as ws:
            socket = WebClient(ws)
            await socket.next()  # connection
            await socket.send({"type": "cancel_turn"})
            frame = await socket.has(lambda f: f["type"] == "error", "the error frame")
            assert frame["data"]["code"] == "cancel_unanswered"
    assert client.app[METRICS].value(CANCELS, outcome="unanswered") == 2


async def test_a_cancel_of_a_turn_another_process_runs_on_sqlite_says_so(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    """SQLite passes no cancel between processes (a rolling deploy's minutes): the 409 used to
    say "no turn of this session is running" while GET /api/sessions/{id} said running."""
    db = tmp_path / "gateway.db"
    client: Client = await aiohttp_client(build_app(settings(db)))
    async with SQLiteStore(db) as elsewhere:
        sid = await turn_held_elsewhere(elsewhere)
        response = await client.post(f"/api/sessions/{sid}/cancel", headers=AUTH)
        session = await client.get(f"/api/sessions/{sid}", headers=AUTH)
    assert response.status == 409
    error = (await response.json())["error"]
    assert error["code"] == "no_turn_running"
    assert "another gateway process" in error["message"]
    assert (await session.json())["status"] == "running"
