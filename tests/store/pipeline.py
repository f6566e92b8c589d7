"""Builders shared by the pipeline tests (raw rows: the ``raw`` fixture of conftest)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from webhook_bot_gateway.store import DeliveryIn, InboxIn, ParsedDelivery, SQLiteStore, Store

CHANNEL = "whatsapp"
ACCOUNT = "15550001"
AGENT = "triage"

PIPELINE_TABLES = ("deliveries", "quarantine", "inbox", "outbox", "outbox_platform_ids")


def sid(chat_id: str, account: str = ACCOUNT, channel: str = CHANNEL) -> str:
    return f"{channel}-{account}-{chat_id}"


def delivery(*keys: str, body: bytes = b'{"entry": []}', account: str | None = None) -> DeliveryIn:
    return DeliveryIn(CHANNEL, account, body, keys)


def message(chat_id: str, key: str, text: str = "hi", account: str = ACCOUNT) -> InboxIn:
    return InboxIn(CHANNEL, account, chat_id, key, {"text": text, "chat_id": chat_id})


async def inbox_of(store: Store, *items: InboxIn) -> list[int]:
    """Record ``items`` through a real delivery; return the inbox ids of the new rows."""
    keys = tuple(item.dedup_key for item in items)
    [result] = await store.ingest([delivery(*keys)])
    assert result.delivery_id is not None
    await store.record_parsed(result.delivery_id, ParsedDelivery(inbox=items), starting_agent=AGENT)
    wanted = set(keys)
    ids: list[int] = []
    for session_id in dict.fromkeys(sid(item.chat_id, item.account) for item in items):
        ids += [row.id for row in await store.pending_inbox(session_id) if row.dedup_key in wanted]
    return sorted(ids)


async def statements_of(store: SQLiteStore, action: Callable[[], Any]) -> list[str]:
    """SQLite backend: the SQL statements ``action`` ran on the store's connection."""
    seen: list[str] = []

    def trace(conn: sqlite3.Connection, on: bool) -> None:
        conn.set_trace_callback(seen.append if on else None)

    await store._db.call(lambda conn: trace(conn, True))
    try:
        await action()
    finally:
        await store._db.call(lambda conn: trace(conn, False))
    return seen
