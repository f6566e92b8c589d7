"""Retention statements on PostgreSQL: the SQLite backend's ``_sql_retention``, awaited.

The rule and the order are in ``store/_retention.py``. Here other transactions run meanwhile,
so rows of sessions (messages, events, attachments) go only once their session's row is
locked ``FOR NO KEY UPDATE`` and seen not ``running``: a turn's begin takes the same lock, so
it either finished marking the session running (the rows stay) or waits for this chunk to
commit. ``SKIP LOCKED``: a session busy right now is left for the next day.
"""

from __future__ import annotations

import asyncpg

from .._erasure import client_key_prefixes
from .._retention import chosen
from ._db import noted_locked
from ._sql_dedup import forget as forget_keys

_NOT_RUNNING = "(SELECT status FROM sessions AS s WHERE s.session_id = t.session_id) <> 'running'"

# Per table: (old, may go, the session to lock or NULL); see the SQLite backend.
_SCANS = {
    "inbox": (
        "created_at < $1",
        "state <> 'pending' AND coalesce(finished_at, created_at) < $1",
        "NULL",
    ),
    "outbox": (
        "created_at < $1",
        "state <> 'pending' AND coalesce(sent_at, created_at) < $1",
        "NULL",
    ),
    "quarantine": ("received_at < $1", "true", "NULL"),
    "session_events": (
        "created_at < $1",
        f"{_NOT_RUNNING} AND seq < (SELECT max(seq) FROM session_events AS l"
        " WHERE l.session_id = t.session_id)",
        "session_id",
    ),
    "messages": ("created_at < $1", _NOT_RUNNING, "session_id"),
}

_LOCK_IDLE = (
    "SELECT session_id FROM sessions WHERE session_id = ANY($1::text[]) AND status <> 'running'"
    ' ORDER BY session_id COLLATE "C" FOR NO KEY UPDATE SKIP LOCKED'
)


async def lock_idle(conn: asyncpg.Connection, session_ids: set[str]) -> set[str]:
    """Lock the rows of these sessions that are not running (skipping busy ones); their ids."""
    if not session_ids:
        return set()
    locked = {row[0] for row in await conn.fetch(_LOCK_IDLE, sorted(session_ids))}
    noted_locked(locked)
    return locked


async def ordered_chunk(
    conn: asyncpg.Connection, table: str, cutoff: float, after: int, chunk_size: int
) -> tuple[int, int, bool]:
    """Scan up to ``chunk_size`` rows of ``table`` after id ``after`` and delete those that go;
    (deleted, last id scanned, walk over)."""
    old, allowed, owner = _SCANS[table]
    rows = await conn.fetch(
        f"SELECT id, {old}, {allowed}, {owner} FROM {table} AS t WHERE id > $2 ORDER BY id"
        " LIMIT $3",
        cutoff,
        after,
        chunk_size,
    )
    ids, done = chosen([(r[0], r[1], bool(r[2])) for r in rows], chunk_size)
    if owner != "NULL" and ids:
        session_of = {r[0]: r[3] for r in rows}
        idle = await lock_idle(conn, {session_of[i] for i in ids})
        ids = [i for i in ids if session_of[i] in idle]
    if ids:
        await _delete(conn, table, ids)
    return len(ids), rows[-1][0] if rows else after, done


async def _delete(conn: asyncpg.Connection, table: str, ids: list[int]) -> None:
    if table == "messages":  # kept children become roots; a head that goes leaves none
        await conn.execute(
            "UPDATE messages SET parent_id = NULL WHERE parent_id = ANY($1::bigint[])"
            " AND NOT id = ANY($1::bigint[])",
            ids,
        )
        await conn.execute(
            "UPDATE sessions SET head_id = NULL WHERE head_id = ANY($1::bigint[])", ids
        )
    await conn.execute(f"DELETE FROM {table} WHERE id = ANY($1::bigint[])", ids)


async def attachments_chunk(
    conn: asyncpg.Connection, cutoff: float, chunk_size: int
) -> list[tuple[str, str]]:
    """Delete up to ``chunk_size`` old attachment rows (not pending, session not running);
    their (session id, attachment id), for the files."""
    rows = await conn.fetch(
        "SELECT id, session_id FROM attachments AS t"
        f" WHERE created_at < $1 AND state <> 'pending' AND {_NOT_RUNNING} LIMIT $2",
        cutoff,
        chunk_size,
    )
    idle = await lock_idle(conn, {row[1] for row in rows})
    ids = [row[0] for row in rows if row[1] in idle]
    gone = await conn.fetch(
        "DELETE FROM attachments WHERE id = ANY($1::text[]) RETURNING session_id, id", ids
    )
    # A chunk that had to leave a busy session's rows comes back short, which ends the walk:
    # those rows wait for the next day rather than being scanned again at once.
    return [(row[0], row[1]) for row in gone]


EMPTY = (
    "s.updated_at < $1 AND s.status <> 'running' AND s.head_id IS NULL"
    " AND NOT EXISTS (SELECT 1 FROM messages AS m WHERE m.session_id = s.session_id)"
    " AND NOT EXISTS (SELECT 1 FROM inbox AS i WHERE i.session_id = s.session_id)"
    " AND NOT EXISTS (SELECT 1 FROM outbox AS o WHERE o.session_id = s.session_id)"
    " AND NOT EXISTS (SELECT 1 FROM attachments AS a WHERE a.session_id = s.session_id)"
    " AND NOT EXISTS (SELECT 1 FROM session_events AS e WHERE e.session_id = s.session_id"
    " AND e.created_at >= $1)"
)


async def empty_sessions_chunk(conn: asyncpg.Connection, cutoff: float, chunk_size: int) -> int:
    """Delete up to ``chunk_size`` sessions left with nothing (their last event goes with them),
    and a web chat's dedup keys with its session (store/_erasure.py)."""
    chats = await conn.fetch(
        "DELETE FROM sessions WHERE session_id IN (SELECT session_id FROM sessions AS s"
        f" WHERE {EMPTY} LIMIT $2 FOR UPDATE SKIP LOCKED) RETURNING channel, chat_id",
        cutoff,
        chunk_size,
    )
    await forget_keys(conn, client_key_prefixes((row[0], row[1]) for row in chats))
    return len(chats)
