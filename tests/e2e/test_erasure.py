"""Erasure through the real ``gateway serve``: after ``DELETE /api/sessions/{id}`` no table (the
dedup keys excepted, as documented) and no file of the data folder holds the session's ids,
its chat id or its texts, while another chat's data is all still there."""

from __future__ import annotations

import re
from pathlib import Path

import aiohttp
import pytest

from .conftest import Platforms, Query
from .gateway_proc import ADMIN_TOKEN, BOT, Gateway, config_text, demo_agents, eventually, free_port
from .test_processes import shared_store
from .test_roundtrip import telegram_session
from .webhooks import Delivery, post, telegram_document, telegram_text

CHAT, OTHER = 5318008123, 5318008456
SID = telegram_session(CHAT)
SECRET_TEXT = "erase-me hello, my account number is 8812"
FILE_NAME = "erase-me-statement.pdf"
FILE_BYTES = b"%PDF-1.7 erase-me file content"
KEPT_TEXT = "keep-me, a message of another chat"
DEDUP = "processed_messages"
CHAT_TOKEN = re.compile(rb"(?<![\w-])" + str(CHAT).encode() + rb"(?![\w])")


def broken_update(chat_id: int) -> Delivery:
    """An authenticated Telegram body that cannot be parsed: it goes to quarantine whole."""
    body = f'{{"update_id": 7009, "message": {{"chat": {{"id": {chat_id}}}, "text": "erase-me'
    headers = telegram_text(1, chat_id, "").headers
    return Delivery(f"/webhooks/telegram/{BOT}", body.encode(), headers)


async def tables(query: Query, sqlite: bool) -> list[str]:
    sql = (
        "SELECT name FROM sqlite_master WHERE type = 'table'"
        if sqlite
        else "SELECT table_name FROM information_schema.tables"
        " WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
    )
    return sorted(row[0] for row in await query(sql))


def as_bytes(value: object) -> bytes:
    return bytes(value) if isinstance(value, bytes | memoryview) else str(value).encode()


async def store_hits(query: Query, sqlite: bool, needles: list[bytes]) -> dict[str, list[str]]:
    """The tables (dedup excepted) where a column of a row holds a needle or the chat id."""
    hits: dict[str, list[str]] = {}
    for table in await tables(query, sqlite):
        if table == DEDUP:
            continue
        cells = b"\x00".join(
            as_bytes(v) for row in await query(f"SELECT * FROM {table}") for v in row
        )
        found = [n.decode() for n in needles if n in cells]
        found += ["chat id"] if CHAT_TOKEN.search(cells) else []
        if found:
            hits[table] = found
    return hits


def file_hits(folder: Path, needles: list[bytes]) -> dict[str, list[str]]:
    """The files under ``folder`` that hold a needle or the chat id, file names included."""
    hits: dict[str, list[str]] = {}
    for path in sorted(folder.rglob("*")):
        content = str(path.relative_to(folder)).encode() + b"\x00"
        content += path.read_bytes() if path.is_file() else b""
        found = [n.decode() for n in needles if n in content]
        found += ["chat id"] if CHAT_TOKEN.search(content) else []
        if found:
            hits[str(path.relative_to(folder))] = found
    return hits


async def run_chats(http: aiohttp.ClientSession, gateway: Gateway, platforms: Platforms) -> str:
    """Two chats' traffic: texts, a downloaded file and a quarantined body for CHAT; the id of
    its attachment once everything was answered."""
    platforms.telegram.add_media("tg-erase", FILE_BYTES, file_path="documents/file_9.pdf")
    size = len(FILE_BYTES)
    document = telegram_document(7002, CHAT, "tg-erase", FILE_NAME, "application/pdf", size)
    for delivery in (
        telegram_text(7001, CHAT, SECRET_TEXT),
        document,
        broken_update(CHAT),
        telegram_text(7003, OTHER, KEPT_TEXT),
    ):
        assert await post(http, gateway.url, delivery) == 200
    await eventually(lambda: len(platforms.telegram.texts(str(CHAT))) == 2, "CHAT's replies")
    await eventually(lambda: len(platforms.telegram.texts(str(OTHER))) == 1, "OTHER's reply")
    files = await admin_get(http, gateway, f"/api/sessions/{SID}/export")
    [attachment] = files["attachments"]
    return str(attachment["id"])


async def admin_get(http: aiohttp.ClientSession, gateway: Gateway, path: str) -> dict[str, object]:
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    async with http.get(gateway.url + path, headers=headers) as response:
        assert response.status == 200, await response.text()
        found: dict[str, object] = await response.json()
        return found


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_e2e_delete_leaves_nothing_of_the_session_in_the_store_or_the_data_folder(
    backend: str, tmp_path: Path, platforms: Platforms, http: aiohttp.ClientSession
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    async with shared_store(backend, data) as (url, query):
        port = free_port()
        sections = {"store": {"url": url}, "media": {"root": str(data / "media")}}
        text = config_text(
            port=port,
            db=data / "unused.db",
            telegram_url=platforms.telegram_url,
            graph_url=platforms.graph_url,
            agents=demo_agents(),
            sections=sections,
        )
        gateway = Gateway(tmp_path, text, port, data / "shared.db")
        await gateway.start()
        try:
            attachment = await run_chats(http, gateway, platforms)
            await eventually(
                lambda: (data / "media" / SID / attachment).is_file(), "the file on disk"
            )
            needles = [n.encode() for n in (SID, attachment, SECRET_TEXT, FILE_NAME)]
            needles.append(FILE_BYTES)
            sqlite = backend == "sqlite"
            before = await store_hits(query, sqlite, needles)
            assert {"messages", "quarantine", "attachments", "inbox"} <= set(before)

            headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
            async with http.delete(f"{gateway.url}/api/sessions/{SID}", headers=headers) as r:
                assert r.status == 204

            assert await store_hits(query, sqlite, needles) == {}
            assert file_hits(data, needles) == {}
            kept = await store_hits(query, sqlite, [KEPT_TEXT.encode()])
            assert {"messages", "inbox"} <= set(kept)  # the other chat is untouched
        finally:
            await gateway.ensure_stopped()
