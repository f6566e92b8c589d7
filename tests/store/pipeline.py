"""Builders and raw readers shared by the pipeline tests."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from store import DeliveryIn, InboxIn, ParsedDelivery, SQLiteStore

from .conftest import raw_rows

CHANNEL = "whatsapp"
ACCOUNT = "15550001"
AGENT = "triage"


def sid(chat_id: str, account: str = ACCOUNT, channel: str = CHANNEL) -> str:
    return f"{channel}-{account}-{chat_id}"


def delivery(*keys: str, body: bytes = b'{"entry": []}', account: str | None = None) -> DeliveryIn:
    return DeliveryIn(CHANNEL, account, body, keys)


def message(chat_id: str, key: str, text: str = "hi", account: str = ACCOUNT) -> InboxIn:
    return InboxIn(CHANNEL, account, chat_id, key, {"text": text, "chat_id": chat_id})


async def inbox_of(store: SQLiteStore, *items: InboxIn) -> list[int]:
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


def count(path: Path, table: str) -> int:
    value: int = raw_rows(path, f"SELECT count(*) FROM {table}")[0][0]
    return value


def table_dump(path: Path, *tables: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of ``tables``, to compare before and after a refused call."""
    return {table: raw_rows(path, f"SELECT * FROM {table} ORDER BY 1") for table in tables}


PIPELINE_TABLES = ("deliveries", "quarantine", "inbox", "outbox", "outbox_platform_ids")


async def statements_of(store: SQLiteStore, action: Callable[[], Any]) -> list[str]:
    """The SQL statements ``action`` ran on the store's connection."""
    seen: list[str] = []

    def trace(conn: sqlite3.Connection, on: bool) -> None:
        conn.set_trace_callback(seen.append if on else None)

    await store._db.call(lambda conn: trace(conn, True))
    try:
        await action()
    finally:
        await store._db.call(lambda conn: trace(conn, False))
    return seen


def add_trigger(path: Path, table: str) -> None:
    """Make every insert into ``table`` fail, as a disk or constraint error would."""
    conn = sqlite3.connect(path)
    try:
        conn.execute(
            f"CREATE TRIGGER fail_{table} BEFORE INSERT ON {table}"
            " BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
        )
        conn.commit()
    finally:
        conn.close()
