"""Retention statements on SQLite: one chunk per call, inside the caller's write transaction.

The rule and the order are in ``store/_retention.py``. The write lock is held from the scan
to the delete, so a turn cannot begin in between: a session seen not ``running`` stays so.
"""

from __future__ import annotations

import sqlite3

from .._erasure import client_key_prefixes
from .._retention import chosen
from ._sql_dedup import forget as forget_keys

_NOT_RUNNING = "(SELECT status FROM sessions AS s WHERE s.session_id = t.session_id) <> 'running'"

# Per table: (old, may go). The newest event of a session stays, so the session's ``seq``
# goes on from where it was (a watcher that saw seq n reads seq > n).
_SCANS = {
    "inbox": (
        "created_at < :cutoff",
        "state <> 'pending' AND coalesce(finished_at, created_at) < :cutoff",
    ),
    "outbox": (
        "created_at < :cutoff",
        "state <> 'pending' AND coalesce(sent_at, created_at) < :cutoff",
    ),
    "quarantine": ("received_at < :cutoff", "1"),
    "session_events": (
        "created_at < :cutoff",
        f"{_NOT_RUNNING} AND seq < (SELECT max(seq) FROM session_events AS l"
        " WHERE l.session_id = t.session_id)",
    ),
    "messages": ("created_at < :cutoff", _NOT_RUNNING),
}

_IDS = "SELECT value FROM json_each(:ids)"


def ordered_chunk(
    conn: sqlite3.Connection, table: str, cutoff: float, after: int, chunk_size: int
) -> tuple[int, int, bool]:
    """Scan up to ``chunk_size`` rows of ``table`` after id ``after`` and delete those that go;
    (deleted, last id scanned, walk over)."""
    old, allowed = _SCANS[table]
    rows = conn.execute(
        f"SELECT id, {old}, {allowed} FROM {table} AS t WHERE id > :after ORDER BY id LIMIT :limit",
        {"cutoff": cutoff, "after": after, "limit": chunk_size},
    ).fetchall()
    ids, done = chosen([(r[0], bool(r[1]), bool(r[2])) for r in rows], chunk_size)
    if ids:
        _delete(conn, table, str(ids))  # a JSON array of ints: one parameter, any length
    return len(ids), rows[-1][0] if rows else after, done


def _delete(conn: sqlite3.Connection, table: str, ids: str) -> None:
    if table == "messages":  # kept children become roots; a head that goes leaves none
        conn.execute(
            f"UPDATE messages SET parent_id = NULL WHERE parent_id IN ({_IDS})"
            f" AND id NOT IN ({_IDS})",
            {"ids": ids},
        )
        conn.execute(f"UPDATE sessions SET head_id = NULL WHERE head_id IN ({_IDS})", {"ids": ids})
    conn.execute(f"DELETE FROM {table} WHERE id IN ({_IDS})", {"ids": ids})


def attachments_chunk(
    conn: sqlite3.Connection, cutoff: float, chunk_size: int
) -> list[tuple[str, str]]:
    """Delete up to ``chunk_size`` old attachment rows (not pending, session not running);
    their (session id, attachment id), for the files."""
    rows = conn.execute(
        "DELETE FROM attachments WHERE id IN (SELECT id FROM attachments AS t"
        f" WHERE created_at < ? AND state <> 'pending' AND {_NOT_RUNNING} LIMIT ?)"
        " RETURNING session_id, id",
        (cutoff, chunk_size),
    ).fetchall()
    return [(row[0], row[1]) for row in rows]


EMPTY = (
    "s.updated_at < :cutoff AND s.status <> 'running' AND s.head_id IS NULL"
    " AND NOT EXISTS (SELECT 1 FROM messages AS m WHERE m.session_id = s.session_id)"
    " AND NOT EXISTS (SELECT 1 FROM inbox AS i WHERE i.session_id = s.session_id)"
    " AND NOT EXISTS (SELECT 1 FROM outbox AS o WHERE o.session_id = s.session_id)"
    " AND NOT EXISTS (SELECT 1 FROM attachments AS a WHERE a.session_id = s.session_id)"
    " AND NOT EXISTS (SELECT 1 FROM session_events AS e WHERE e.session_id = s.session_id"
    " AND e.created_at >= :cutoff)"
)


def empty_sessions_chunk(conn: sqlite3.Connection, cutoff: float, chunk_size: int) -> int:
    """Delete up to ``chunk_size`` sessions left with nothing (their last event goes with them),
    and a web chat's dedup keys with its session (store/_erasure.py)."""
    chats = conn.execute(
        "DELETE FROM sessions WHERE session_id IN (SELECT session_id FROM sessions AS s"
        f" WHERE {EMPTY} LIMIT :limit) RETURNING channel, chat_id",
        {"cutoff": cutoff, "limit": chunk_size},
    ).fetchall()
    forget_keys(conn, client_key_prefixes((channel, chat_id) for channel, chat_id in chats))
    return len(chats)
