"""Web sessions are stored at their first message or upload, not at connect: a bare ``GET
/ws`` leaves no row, yet the id it gave out can be reattached (on any process of the database)
until then, and an id the gateway never gave out is ``unknown_session``. The whole app on a
real store, on each backend; rows are read through a second store on the same database."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.e2e.ws_client import WebClient, is_turn_end
from webhook_bot_gateway.gateway._web.ids import WebIds
from webhook_bot_gateway.gateway._web.ws import WEB_SESSION
from webhook_bot_gateway.gateway.app import build_app
from webhook_bot_gateway.store import open_store

from .ingest_helpers import settings
from .test_uploads import MULTIPART, error_of, form, multipart, url

Client = TestClient[web.Request, web.Application]
MAX_BYTES = 1000


@pytest.fixture
async def client(store_url: str, aiohttp_client: Any, tmp_path: Path) -> Client:
    media = {"root": str(tmp_path / "media"), "max_bytes": MAX_BYTES}
    made: Client = await aiohttp_client(build_app(gateway_settings(store_url, tmp_path, media)))
    return made


def gateway_settings(store_url: str, tmp_path: Path, media: dict[str, Any]) -> Any:
    return settings(tmp_path / "unused.db", store={"url": store_url}, media=media)


async def stored(store_url: str, session_id: str) -> bool:
    store = await open_store(store_url)
    try:
        return await store.get_session(session_id) is not None
    finally:
        await store.aclose()


@asynccontextmanager
async def attached(client: Client, query: str = "") -> AsyncIterator[tuple[WebClient, Any]]:
    """A socket and its first frame (``connection``, or a refusal's ``error``)."""
    async with client.ws_connect(f"/ws{query}") as ws:
        socket = WebClient(ws)
        yield socket, await socket.next()


async def given_out(client: Client) -> str:
    """The id of a new socket's session; the socket is closed at once."""
    async with attached(client) as (_, first):
        sid: str = first["data"]["session_id"]
        return sid


async def test_a_bare_connect_stores_nothing_and_its_id_can_be_reattached_until_used(
    client: Client, store_url: str
) -> None:
    sid = await given_out(client)
    assert WEB_SESSION.fullmatch(sid)
    assert not await stored(store_url, sid)
    async with attached(client, f"?session_id={sid}&after=0") as (again, first):
        assert first == {"type": "connection", "data": {"session_id": sid}}
        assert not await stored(store_url, sid)
        await again.say("hello", "c1")
        frames = await again.until(is_turn_end, "the first turn's end")
    assert await stored(store_url, sid)
    said = [f["data"] for f in frames if f["type"] == "message"]
    assert [(m["role"], m["text"]) for m in said][0] == ("user", "hello")
    assert [m["role"] for m in said][1:] == ["assistant"]


async def test_many_bare_connects_leave_no_row(client: Client, store_url: str) -> None:
    given = [await given_out(client) for _ in range(20)]
    assert len(set(given)) == 20
    store = await open_store(store_url)
    try:
        assert await store.count_sessions() == 0
    finally:
        await store.aclose()


@pytest.mark.parametrize(
    "made_by",
    [
        pytest.param(lambda: f"web-{uuid.uuid4()}", id="random-uuid4"),
        pytest.param(lambda: WebIds(secrets.token_bytes(32)).issue(), id="another-database"),
    ],
)
async def test_an_id_never_given_out_here_is_unknown(
    client: Client, store_url: str, made_by: Any
) -> None:
    sid = made_by()
    assert WEB_SESSION.fullmatch(sid)
    async with attached(client, f"?session_id={sid}") as (_, first):
        assert first["data"]["code"] == "unknown_session"
    assert await error_of(await client.post(url(sid), data=form(b"x")), 404) == "unknown_session"
    assert not await stored(store_url, sid)


async def test_another_process_on_the_database_knows_the_ids_given_out(
    client: Client, store_url: str, aiohttp_client: Any, tmp_path: Path
) -> None:
    media = {"root": str(tmp_path / "media")}
    other: Client = await aiohttp_client(build_app(gateway_settings(store_url, tmp_path, media)))
    sid = await given_out(client)
    async with attached(other, f"?session_id={sid}") as (_, first):
        assert first["type"] == "connection"


async def test_an_upload_stores_a_given_out_session_and_a_failed_one_does_not(
    client: Client, store_url: str, tmp_path: Path
) -> None:
    sid = await given_out(client)
    big = multipart(b"x" * (MAX_BYTES + 1), 'filename="big.bin"')
    too_large = await client.post(url(sid), data=big, headers=MULTIPART)
    assert await error_of(too_large, 413) == "too_large"
    cut_short = multipart(b"abc", 'filename="a.bin"').rsplit(b"\r\n--", 1)[0]  # no closing boundary
    broken = await client.post(url(sid), data=cut_short, headers=MULTIPART)
    assert await error_of(broken, 400) == "invalid_body"
    assert not await stored(store_url, sid)
    # Nothing on disk either: the session's media folder was left empty, one per id.
    assert not (tmp_path / "media" / sid).exists()
    response = await client.post(url(sid), data=form(b"notes"))
    assert response.status == 201, await response.text()
    assert await stored(store_url, sid)
    async with attached(client, f"?session_id={sid}") as (again, first):
        assert first["type"] == "connection"
        attachment = (await response.json())["attachment"]["id"]
        await again.say("my file", "c1", (attachment,))
        await again.until(is_turn_end, "the turn's end")


def test_ids_are_uuid4_with_a_mac_that_a_change_or_another_key_breaks() -> None:
    key = secrets.token_bytes(32)
    ids = WebIds(key)
    given = [ids.issue() for _ in range(200)]
    assert all(WEB_SESSION.fullmatch(sid) for sid in given)
    assert all(ids.issued(sid) for sid in given)
    assert all(WebIds(key).issued(sid) for sid in given)  # the key decides, not the object
    assert not any(WebIds(secrets.token_bytes(32)).issued(sid) for sid in given)
    first = given[0]
    changed = first[:-12] + ("0" if first[-12] != "0" else "1") + first[-11:]  # a random digit
    assert WEB_SESSION.fullmatch(changed)
    assert not ids.issued(changed)


async def test_a_message_naming_no_upload_on_a_given_out_session_is_refused_and_stores_nothing(
    client: Client, store_url: str
) -> None:
    async with attached(client) as (socket, first):
        sid = first["data"]["session_id"]
        data = {"text": "see file", "client_id": "c1", "attachments": ["0" * 32]}
        await socket.send({"type": "message", "data": data})
        error = await socket.has(lambda f: f["type"] == "error", "the refusal")
        assert error["data"]["code"] == "unknown_attachment"
        await socket.say("and now?", "c2")  # the socket stays open and usable
        await socket.until(is_turn_end, "the turn's end")
    assert await stored(store_url, sid)
