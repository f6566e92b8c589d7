"""The admin API and the web socket while the store fails: a store error no handler answers
itself (the SQLite file locked by another process past the busy timeout, a closed store) is a
JSON error with a code (an error frame on a socket, which stays open) and one log line, not
aiohttp's plain-text 500 with a traceback; once the fault clears the same request works. A
real SQLite file, locked by a second connection."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.e2e.ws_client import WebClient
from webhook_bot_gateway.gateway._keys import STORE
from webhook_bot_gateway.gateway.app import build_app
from webhook_bot_gateway.store.sqlite import _conn

from .ingest_helpers import AUTH, settings
from .test_console_api import web_turn

Client = TestClient[web.Request, web.Application]


@pytest.fixture
async def client(aiohttp_client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Client:
    monkeypatch.setattr(_conn, "BUSY_TIMEOUT_MS", 100)  # a held lock fails a write in 0.1 s
    media = {"root": str(tmp_path / "media")}
    made: Client = await aiohttp_client(build_app(settings(tmp_path / "gateway.db", media=media)))
    return made


async def test_a_write_while_another_process_holds_the_lock_is_503_then_works(
    client: Client, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sid = await web_turn(client, "a person please")  # the human queue: operators reply
    path, body = f"/api/sessions/{sid}/reply", {"text": "Hello, Ann here."}
    holder = sqlite3.connect(tmp_path / "gateway.db", isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # the write lock, as another process would hold it
        with caplog.at_level(logging.WARNING, logger="gateway"):
            refused = await client.post(path, json=body, headers=AUTH)
            assert refused.status == 503, await refused.text()
            assert (await refused.json())["error"]["code"] == "store_unavailable"
        [line] = [r for r in caplog.records if "the store failed" in r.getMessage()]
        assert line.exc_info is None
        assert sid not in line.getMessage()  # the route's pattern, not the web user's id
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    answered = await client.post(path, json=body, headers=AUTH)
    assert answered.status == 202, await answered.text()


async def test_a_closed_store_is_a_json_500_naming_the_code(client: Client) -> None:
    await client.app[STORE].aclose()
    response = await client.get("/api/sessions", headers=AUTH)
    assert response.status == 500
    assert (await response.json())["error"]["code"] == "store_error"


async def test_a_socket_frame_that_meets_a_failed_store_gets_an_error_frame(
    client: Client,
) -> None:
    """It raised out of the socket's handler: a traceback in the log and the socket dropped."""
    async with client.ws_connect("/ws") as ws:
        socket = WebClient(ws)
        await socket.next()  # connection
        await client.app[STORE].aclose()
        data = {"text": "see file", "client_id": "c1", "attachments": ["0" * 32]}
        await socket.send({"type": "message", "data": data})
        frame = await socket.has(lambda f: f["type"] == "error", "the error frame")
        assert frame["data"]["code"] == "store_unavailable"
        assert not ws.closed


async def test_an_upload_while_another_process_holds_the_lock_is_503_and_keeps_no_file(
    client: Client, tmp_path: Path
) -> None:
    """The upload stores a session given out and not used yet: a write, refused while locked."""
    async with client.ws_connect("/ws") as ws:
        sid = (await WebClient(ws).next())["data"]["session_id"]
    form = aiohttp.FormData()
    form.add_field("file", b"notes", filename="notes.txt", content_type="text/plain")
    holder = sqlite3.connect(tmp_path / "gateway.db", isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        refused = await client.post(f"/web/sessions/{sid}/attachments", data=form)
        assert refused.status == 503, await refused.text()
        assert (await refused.json())["error"]["code"] == "store_unavailable"
        assert [p for p in (tmp_path / "media").rglob("*") if p.is_file()] == []
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    form = aiohttp.FormData()
    form.add_field("file", b"notes", filename="notes.txt", content_type="text/plain")
    stored = await client.post(f"/web/sessions/{sid}/attachments", data=form)
    assert stored.status == 201, await stored.text()
