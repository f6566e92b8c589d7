"""Inbox statements: inbound messages of a session, pending until a turn commits them done.

Where SQLite's single writer makes "update the pending rows" safe, here each changing
statement first locks its rows in id order (``ORDER BY id FOR UPDATE``) and updates only those
still pending once locked: two transactions never both act on a pending row, and two that
share rows wait for each other instead of deadlocking.
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from .._errors import InboxNotFound, InboxNotPending
from .._pipeline_rows import INBOX_COLUMNS, by_session, to_inbox
from .._pipeline_types import InboxItem


async def insert(conn: asyncpg.Connection, row: tuple[object, ...]) -> str | None:
    """Insert ``(session_id, dedup_key, event, now)``; its session id, or None if known."""
    session_id, dedup_key, event, now = row
    found = await conn.fetchval(
        "INSERT INTO inbox (session_id, dedup_key, event, next_attempt_at, created_at)"
        " VALUES ($1, $2, $3, $4, $4) ON CONFLICT (dedup_key) DO NOTHING RETURNING session_id",
        session_id,
        dedup_key,
        event,
        now,
    )
    return None if found is None else str(found)


async def _check_all(
    conn: asyncpg.Connection,
    ids: Sequence[int],
    updated: Sequence[asyncpg.Record],
    session_id: str | None,
) -> None:
    """Raise (so the caller's transaction rolls back) unless every id was updated."""
    await check_found(conn, ids, [row[0] for row in updated], session_id)


async def check_found(
    conn: asyncpg.Connection, ids: Sequence[int], found: Sequence[int], session_id: str | None
) -> None:
    """Raise InboxNotFound or InboxNotPending unless every id is among ``found`` (the rows a
    statement found pending); a caller in a transaction then rolls back."""
    if len(found) == len(ids):
        return
    done = set(found)
    refused = [i for i in ids if i not in done]
    rows = await conn.fetch(
        "SELECT id, session_id FROM inbox WHERE id = ANY($1::bigint[])", refused
    )
    present = {row[0] for row in rows if session_id is None or row[1] == session_id}
    missing = tuple(i for i in refused if i not in present)
    if missing:
        raise InboxNotFound(missing)
    raise InboxNotPending(tuple(refused))


async def complete(
    conn: asyncpg.Connection, session_id: str, ids: Sequence[int], now: float
) -> None:
    """Mark pending rows of the session done; raise (and so roll back) if any is not."""
    updated = await conn.fetch(
        "WITH mine AS (SELECT id FROM inbox WHERE id = ANY($3::bigint[]) AND session_id = $2"
        " AND state = 'pending' ORDER BY id FOR UPDATE)"
        " UPDATE inbox SET state = 'done', finished_at = $1 FROM mine"
        " WHERE inbox.id = mine.id AND inbox.state = 'pending' RETURNING inbox.id",
        now,
        session_id,
        list(ids),
    )
    await _check_all(conn, ids, updated, session_id)


async def fail(
    conn: asyncpg.Connection,
    ids: Sequence[int],
    error: str,
    next_attempt_at: float,
    dead: bool,
    now: float,
) -> None:
    """Record a failed try of pending rows; raise (and so roll back) if any is not pending."""
    updated = await conn.fetch(
        "WITH mine AS (SELECT id FROM inbox WHERE id = ANY($5::bigint[]) AND state = 'pending'"
        " ORDER BY id FOR UPDATE)"
        " UPDATE inbox SET attempts = attempts + 1, error = $1, next_attempt_at = $2,"
        " state = CASE WHEN $3 THEN 'dead' ELSE 'pending' END,"
        " finished_at = CASE WHEN $3 THEN $4::float8 END"
        " FROM mine WHERE inbox.id = mine.id AND inbox.state = 'pending' RETURNING inbox.id",
        error,
        next_attempt_at,
        dead,
        now,
        list(ids),
    )
    await _check_all(conn, ids, updated, None)


async def mark_cancelled(conn: asyncpg.Connection, ids: Sequence[int], now: float) -> None:
    """Mark the rows still pending as cancelled (see ``cancelled``); the others are left."""
    await conn.execute(
        "WITH mine AS (SELECT id FROM inbox WHERE id = ANY($2::bigint[]) AND state = 'pending'"
        " ORDER BY id FOR UPDATE)"
        " UPDATE inbox SET cancelled_at = $1 FROM mine"
        " WHERE inbox.id = mine.id AND inbox.state = 'pending'",
        now,
        list(ids),
    )


async def cancelled(
    conn: asyncpg.Connection, session_ids: Sequence[str] | None
) -> dict[str, frozenset[int]]:
    """Pending rows marked cancelled, by session: of every session, or of those given."""
    query = "SELECT session_id, id FROM inbox WHERE cancelled_at IS NOT NULL AND state = 'pending'"
    if session_ids is None:
        rows = await conn.fetch(query)
    else:
        rows = await conn.fetch(query + " AND session_id = ANY($1::text[])", list(session_ids))
    return by_session((str(row[0]), int(row[1])) for row in rows)


async def pending_sessions(conn: asyncpg.Connection) -> list[str]:
    """Sessions with pending rows, the one with the oldest pending row first."""
    rows = await conn.fetch(
        "SELECT session_id FROM inbox WHERE state = 'pending' GROUP BY session_id ORDER BY min(id)"
    )
    return [str(row[0]) for row in rows]


# The pending rows of the keys $1, each with the count of its session's pending rows.
RECORDED = (
    f"SELECT {INBOX_COLUMNS}, (SELECT count(*) FROM inbox AS other WHERE other.session_id ="
    " inbox.session_id AND other.state = 'pending') FROM inbox"
    " WHERE dedup_key = ANY($1::text[]) AND state = 'pending' ORDER BY id"
)


async def pending(conn: asyncpg.Connection, session_id: str, limit: int) -> list[InboxItem]:
    """A session's pending rows, oldest first."""
    rows = await conn.fetch(
        f"SELECT {INBOX_COLUMNS} FROM inbox WHERE session_id = $1 AND state = 'pending'"
        " ORDER BY id LIMIT $2",
        session_id,
        limit,
    )
    return [to_inbox(row) for row in rows]


async def pending_many(
    conn: asyncpg.Connection, reads: Sequence[tuple[str, int]]
) -> list[list[InboxItem]]:
    """``pending`` of each (session, limit), in one statement: each session's rows, in order."""
    rows = await conn.fetch(
        f"SELECT q.n, i.* FROM unnest($1::text[], $2::int[]) WITH ORDINALITY AS q (sid, lim, n)"
        f" CROSS JOIN LATERAL (SELECT {INBOX_COLUMNS} FROM inbox WHERE session_id = q.sid"
        " AND state = 'pending' ORDER BY id LIMIT q.lim) AS i ORDER BY q.n, i.id",
        [session_id for session_id, _ in reads],
        [limit for _, limit in reads],
    )
    found: list[list[InboxItem]] = [[] for _ in reads]
    for row in rows:
        found[row[0] - 1].append(to_inbox(tuple(row)[1:]))
    return found


async def list_dead(conn: asyncpg.Connection, limit: int, offset: int) -> list[InboxItem]:
    """Dead rows, newest first."""
    rows = await conn.fetch(
        f"SELECT {INBOX_COLUMNS} FROM inbox WHERE state = 'dead' ORDER BY id DESC"
        " LIMIT $1 OFFSET $2",
        limit,
        offset,
    )
    return [to_inbox(row) for row in rows]


async def purge_done_chunk(conn: asyncpg.Connection, cutoff: float, chunk_size: int) -> int:
    """Delete up to ``chunk_size`` rows done before ``cutoff``; return the count.

    No ORDER BY: the scan stops at the limit instead of sorting every done row. SKIP LOCKED:
    two processes purging at once take different rows instead of queueing on the same ones.
    """
    status = await conn.execute(
        "DELETE FROM inbox WHERE id IN (SELECT id FROM inbox"
        " WHERE state = 'done' AND finished_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)",
        cutoff,
        chunk_size,
    )
    return int(status.split()[-1])
