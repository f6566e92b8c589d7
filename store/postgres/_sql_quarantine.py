"""Quarantine statements: deliveries kept whole because they could not be parsed."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from .._erasure import names_chat
from .._errors import QuarantineNotFound
from .._pipeline_rows import QUARANTINE_COLUMNS, to_quarantine
from .._pipeline_types import QuarantineItem
from ._sql_insert import inserted_ids

_COLUMNS = (
    ("channel", "text"),
    ("account", "text"),
    ("body", "bytea"),
    ("reason", "text"),
    ("received_at", "float8"),
)


async def insert_many(conn: asyncpg.Connection, rows: Sequence[tuple[object, ...]]) -> list[int]:
    """Insert ``(channel, account, body, reason, received_at)`` rows; their ids in order."""
    return await inserted_ids(conn, "quarantine", _COLUMNS, rows)


async def list_page(
    conn: asyncpg.Connection, limit: int, offset: int, pending_only: bool
) -> list[QuarantineItem]:
    """Quarantined deliveries, newest first; only those not replayed if ``pending_only``."""
    where = "WHERE replayed_at IS NULL" if pending_only else ""
    rows = await conn.fetch(
        f"SELECT {QUARANTINE_COLUMNS} FROM quarantine {where} ORDER BY id DESC LIMIT $1 OFFSET $2",
        limit,
        offset,
    )
    return [to_quarantine(row) for row in rows]


async def get(conn: asyncpg.Connection, quarantine_id: int) -> QuarantineItem | None:
    """One quarantined delivery, or None."""
    row = await conn.fetchrow(
        f"SELECT {QUARANTINE_COLUMNS} FROM quarantine WHERE id = $1", quarantine_id
    )
    return None if row is None else to_quarantine(row)


async def mark_replayed(conn: asyncpg.Connection, quarantine_id: int, now: float) -> None:
    """Set ``replayed_at``; QuarantineNotFound if there is no such row."""
    found = await conn.fetchval(
        "UPDATE quarantine SET replayed_at = $1 WHERE id = $2 RETURNING id", now, quarantine_id
    )
    if found is None:
        raise QuarantineNotFound(quarantine_id)


async def delete(conn: asyncpg.Connection, quarantine_id: int) -> bool:
    """Delete one row; False if there was none."""
    found = await conn.fetchval("DELETE FROM quarantine WHERE id = $1 RETURNING id", quarantine_id)
    return found is not None


async def delete_naming_chat(
    conn: asyncpg.Connection, channel: str, chat_id: str, account: str | None = None
) -> int:
    """Delete the rows of ``channel`` whose body names ``chat_id`` as a whole token; only those
    of ``account`` (or of no account) if given. Return the count."""
    by_account = "" if account is None else " AND (account IS NULL OR account = $3)"
    params: list[object] = [channel, chat_id.encode()]
    if account is not None:
        params.append(account)
    rows = await conn.fetch(
        f"SELECT id, body FROM quarantine WHERE channel = $1{by_account}"
        " AND position($2::bytea in body) > 0",
        *params,
    )
    ids = [row[0] for row in rows if names_chat(bytes(row[1]), chat_id)]
    await conn.execute("DELETE FROM quarantine WHERE id = ANY($1::bigint[])", ids)
    return len(ids)
