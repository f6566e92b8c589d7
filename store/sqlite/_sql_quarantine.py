"""Quarantine statements: deliveries kept whole because they could not be parsed."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from .._erasure import names_chat
from .._errors import QuarantineNotFound
from .._pipeline_rows import QUARANTINE_COLUMNS, to_quarantine
from .._pipeline_types import QuarantineItem
from ._sql_insert import inserted_ids

_INSERT = (
    "INSERT INTO quarantine (channel, account, body, reason, received_at) VALUES (?, ?, ?, ?, ?)"
)


def insert_many(conn: sqlite3.Connection, rows: Sequence[tuple[object, ...]]) -> list[int]:
    """Insert ``(channel, account, body, reason, received_at)`` rows; their ids in order."""
    return inserted_ids(conn, "quarantine", _INSERT, rows)


def list_page(
    conn: sqlite3.Connection, limit: int, offset: int, pending_only: bool
) -> list[QuarantineItem]:
    """Quarantined deliveries, newest first; only those not replayed if ``pending_only``."""
    where = "WHERE replayed_at IS NULL" if pending_only else ""
    rows = conn.execute(
        f"SELECT {QUARANTINE_COLUMNS} FROM quarantine {where} ORDER BY id DESC LIMIT ? OFFSET ?",
        (limit, offset),
    ).fetchall()
    return [to_quarantine(row) for row in rows]


def get(conn: sqlite3.Connection, quarantine_id: int) -> QuarantineItem | None:
    """One quarantined delivery, or None."""
    row = conn.execute(
        f"SELECT {QUARANTINE_COLUMNS} FROM quarantine WHERE id = ?", (quarantine_id,)
    ).fetchone()
    return None if row is None else to_quarantine(row)


def mark_replayed(conn: sqlite3.Connection, quarantine_id: int, now: float) -> None:
    """Set ``replayed_at``; QuarantineNotFound if there is no such row."""
    cursor = conn.execute(
        "UPDATE quarantine SET replayed_at = ? WHERE id = ?", (now, quarantine_id)
    )
    if cursor.rowcount == 0:
        raise QuarantineNotFound(quarantine_id)


def delete(conn: sqlite3.Connection, quarantine_id: int) -> bool:
    """Delete one row; False if there was none."""
    cursor = conn.execute("DELETE FROM quarantine WHERE id = ?", (quarantine_id,))
    return cursor.rowcount > 0


def delete_naming_chat(
    conn: sqlite3.Connection, channel: str, chat_id: str, account: str | None = None
) -> int:
    """Delete the rows of ``channel`` whose body names ``chat_id`` as a whole token; only those
    of ``account`` (or of no account) if given. Return the count."""
    by_account = "" if account is None else " AND (account IS NULL OR account = :account)"
    rows = conn.execute(
        f"SELECT id, body FROM quarantine WHERE channel = :channel{by_account}"
        " AND instr(body, :chat) > 0",
        {"channel": channel, "account": account, "chat": chat_id.encode()},
    ).fetchall()
    ids = [(row[0],) for row in rows if names_chat(bytes(row[1]), chat_id)]
    conn.executemany("DELETE FROM quarantine WHERE id = ?", ids)
    return len(ids)
