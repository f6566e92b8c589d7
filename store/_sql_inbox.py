"""Inbox statements: inbound messages of a session, pending until a turn commits them done."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from ._errors import InboxNotFound, InboxNotPending
from ._pipeline_rows import INBOX_COLUMNS, dump_ids, to_inbox
from ._pipeline_types import InboxItem

_IDS = "id IN (SELECT value FROM json_each(?))"  # one parameter, however many ids


def insert(conn: sqlite3.Connection, row: tuple[object, ...]) -> str | None:
    """Insert ``(session_id, dedup_key, event, now)``; its session id, or None if known."""
    found = conn.execute(
        "INSERT INTO inbox (session_id, dedup_key, event, next_attempt_at, created_at)"
        " VALUES (?1, ?2, ?3, ?4, ?4) ON CONFLICT (dedup_key) DO NOTHING RETURNING session_id",
        row,
    ).fetchone()
    return None if found is None else str(found[0])


def _refusal(
    conn: sqlite3.Connection, ids: Sequence[int], session_id: str | None
) -> InboxNotFound | InboxNotPending:
    """Why an update matched fewer rows than ``ids``: rows missing, else not pending."""
    rows = conn.execute(
        f"SELECT id, state, session_id FROM inbox WHERE {_IDS}", (dump_ids(ids),)
    ).fetchall()
    present = {row[0] for row in rows if session_id is None or row[2] == session_id}
    missing = tuple(i for i in ids if i not in present)
    if missing:
        return InboxNotFound(missing)
    return InboxNotPending(tuple(row[0] for row in rows if row[1] != "pending"))


def complete(conn: sqlite3.Connection, session_id: str, ids: Sequence[int], now: float) -> None:
    """Mark pending rows of the session done; raise (and so roll back) if any is not."""
    cursor = conn.execute(
        "UPDATE inbox SET state = 'done', finished_at = ?"
        f" WHERE session_id = ? AND state = 'pending' AND {_IDS}",
        (now, session_id, dump_ids(ids)),
    )
    if cursor.rowcount != len(ids):
        raise _refusal(conn, ids, session_id)


def fail(
    conn: sqlite3.Connection,
    ids: Sequence[int],
    error: str,
    next_attempt_at: float,
    dead: bool,
    now: float,
) -> None:
    """Record a failed try of pending rows; raise (and so roll back) if any is not pending."""
    cursor = conn.execute(
        "UPDATE inbox SET attempts = attempts + 1, error = ?, next_attempt_at = ?,"
        " state = CASE WHEN ? THEN 'dead' ELSE 'pending' END,"
        " finished_at = CASE WHEN ? THEN ? END"
        f" WHERE state = 'pending' AND {_IDS}",
        (error, next_attempt_at, dead, dead, now, dump_ids(ids)),
    )
    if cursor.rowcount != len(ids):
        raise _refusal(conn, ids, None)


def pending_sessions(conn: sqlite3.Connection) -> list[str]:
    """Sessions with pending rows, the one with the oldest pending row first."""
    rows = conn.execute(
        "SELECT session_id FROM inbox WHERE state = 'pending' GROUP BY session_id ORDER BY min(id)"
    ).fetchall()
    return [row[0] for row in rows]


def pending(conn: sqlite3.Connection, session_id: str, limit: int) -> list[InboxItem]:
    """A session's pending rows, oldest first."""
    rows = conn.execute(
        f"SELECT {INBOX_COLUMNS} FROM inbox WHERE session_id = ? AND state = 'pending'"
        " ORDER BY id LIMIT ?",
        (session_id, limit),
    ).fetchall()
    return [to_inbox(row) for row in rows]


def list_dead(conn: sqlite3.Connection, limit: int, offset: int) -> list[InboxItem]:
    """Dead rows, newest first."""
    rows = conn.execute(
        f"SELECT {INBOX_COLUMNS} FROM inbox WHERE state = 'dead' ORDER BY id DESC LIMIT ? OFFSET ?",
        (limit, offset),
    ).fetchall()
    return [to_inbox(row) for row in rows]


def purge_done_chunk(conn: sqlite3.Connection, cutoff: float, chunk_size: int) -> int:
    """Delete up to ``chunk_size`` rows done before ``cutoff``; return the count."""
    cursor = conn.execute(
        "DELETE FROM inbox WHERE id IN (SELECT id FROM inbox"
        " WHERE state = 'done' AND finished_at < ? ORDER BY id LIMIT ?)",
        (cutoff, chunk_size),
    )
    return cursor.rowcount
