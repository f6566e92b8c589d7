"""Inbox statements: inbound messages of a session, pending until a turn commits them done."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from .._errors import InboxNotFound, InboxNotPending
from .._pipeline_rows import (
    INBOX_COLUMNS,
    by_session,
    dump_ids,
    dump_list,
    to_inbox,
    to_session_inboxes,
)
from .._pipeline_types import InboxItem, SessionInbox

_IDS = "id IN (SELECT value FROM json_each(?))"  # one parameter, however many ids


def insert(conn: sqlite3.Connection, row: tuple[object, ...]) -> str | None:
    """Insert ``(session_id, dedup_key, event, now)``; its session id, or None if known."""
    found = conn.execute(
        "INSERT INTO inbox (session_id, dedup_key, event, next_attempt_at, created_at)"
        " VALUES (?1, ?2, ?3, ?4, ?4) ON CONFLICT (dedup_key) DO NOTHING RETURNING session_id",
        row,
    ).fetchone()
    return None if found is None else str(found[0])


def _check_all(
    conn: sqlite3.Connection,
    ids: Sequence[int],
    updated: list[tuple[int]],
    session_id: str | None,
) -> None:
    """Raise (so the caller's transaction rolls back) unless every id was updated."""
    if len(updated) == len(ids):
        return
    done = {row[0] for row in updated}
    refused = [i for i in ids if i not in done]
    rows = conn.execute(
        f"SELECT id, session_id FROM inbox WHERE {_IDS}", (dump_ids(refused),)
    ).fetchall()
    present = {row[0] for row in rows if session_id is None or row[1] == session_id}
    missing = tuple(i for i in refused if i not in present)
    if missing:
        raise InboxNotFound(missing)
    raise InboxNotPending(tuple(refused))


def complete(conn: sqlite3.Connection, session_id: str, ids: Sequence[int], now: float) -> None:
    """Mark pending rows of the session done; raise (and so roll back) if any is not."""
    updated = conn.execute(
        "UPDATE inbox SET state = 'done', finished_at = ?"
        f" WHERE session_id = ? AND state = 'pending' AND {_IDS} RETURNING id",
        (now, session_id, dump_ids(ids)),
    ).fetchall()
    _check_all(conn, ids, updated, session_id)


def check_pending(conn: sqlite3.Connection, session_id: str, ids: Sequence[int]) -> None:
    """Raise as ``complete`` would, writing nothing, unless every id is a pending row of the
    session (a turn checks the batch it answers before it begins)."""
    found = conn.execute(
        f"SELECT id FROM inbox WHERE session_id = ? AND state = 'pending' AND {_IDS}",
        (session_id, dump_ids(ids)),
    ).fetchall()
    _check_all(conn, ids, found, session_id)


def fail(
    conn: sqlite3.Connection,
    ids: Sequence[int],
    error: str,
    next_attempt_at: float,
    dead: bool,
    now: float,
) -> None:
    """Record a failed try of pending rows; raise (and so roll back) if any is not pending."""
    updated = conn.execute(
        "UPDATE inbox SET attempts = attempts + 1, error = ?, next_attempt_at = ?,"
        " state = CASE WHEN ? THEN 'dead' ELSE 'pending' END,"
        " finished_at = CASE WHEN ? THEN ? END"
        f" WHERE state = 'pending' AND {_IDS} RETURNING id",
        (error, next_attempt_at, dead, dead, now, dump_ids(ids)),
    ).fetchall()
    _check_all(conn, ids, updated, None)


def mark_cancelled(conn: sqlite3.Connection, ids: Sequence[int], now: float) -> None:
    """Mark the rows still pending as cancelled (see ``cancelled``); the others are left."""
    conn.execute(
        f"UPDATE inbox SET cancelled_at = ? WHERE state = 'pending' AND {_IDS}",
        (now, dump_ids(ids)),
    )


def cancelled(
    conn: sqlite3.Connection, session_ids: Sequence[str] | None
) -> dict[str, frozenset[int]]:
    """Pending rows marked cancelled, by session: of every session, or of those given."""
    query = "SELECT session_id, id FROM inbox WHERE cancelled_at IS NOT NULL AND state = 'pending'"
    if session_ids is None:
        rows = conn.execute(query).fetchall()
    else:
        where = " AND session_id IN (SELECT value FROM json_each(?))"
        rows = conn.execute(query + where, (dump_list(list(session_ids)),)).fetchall()
    return by_session(rows)


def pending_sessions(conn: sqlite3.Connection) -> list[str]:
    """Sessions with pending rows, the one with the oldest pending row first."""
    rows = conn.execute(
        "SELECT session_id FROM inbox WHERE state = 'pending' GROUP BY session_id ORDER BY min(id)"
    ).fetchall()
    return [row[0] for row in rows]


# "+state": not the state index (a scan of every pending row); the keys' unique index instead.
_RECORDED = (
    f"SELECT {INBOX_COLUMNS}, (SELECT count(*) FROM inbox AS other WHERE other.session_id ="
    " inbox.session_id AND other.state = 'pending') FROM inbox"
    " WHERE dedup_key IN (SELECT value FROM json_each(?)) AND +state = 'pending' ORDER BY id"
)


def recorded(
    conn: sqlite3.Connection, session_ids: Sequence[str], keys: Sequence[str]
) -> list[SessionInbox]:
    """The sessions given rows, each with its pending rows of ``keys`` (see
    ``to_session_inboxes``)."""
    rows = conn.execute(_RECORDED, (dump_list(list(keys)),)).fetchall() if session_ids else []
    return to_session_inboxes(session_ids, rows)


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
    """Delete up to ``chunk_size`` rows done before ``cutoff``; return the count.

    No ORDER BY: the scan walks index ``inbox_due`` (state, next_attempt_at), where old rows
    come first, and stops at the limit instead of sorting every done row.
    """
    cursor = conn.execute(
        "DELETE FROM inbox WHERE id IN (SELECT id FROM inbox"
        " WHERE state = 'done' AND finished_at < ? LIMIT ?)",
        (cutoff, chunk_size),
    )
    return cursor.rowcount
