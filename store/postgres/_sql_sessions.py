"""Session, history and event statements: plain async functions over an ``asyncpg.Connection``.

The SQLite backend's ``_sql_sessions`` on PostgreSQL: same names, same arguments, awaited.
Each function runs inside the caller's transaction (``Database.write`` or ``read``).

SQLite has one writer at a time; here several processes write at once. So every function that
reads a session and then writes it, and every event insert (its ``seq`` is the session's
``max(seq) + 1``), first locks the session's row ``FOR NO KEY UPDATE``: the writers of one
session take turns, and the next statement's snapshot sees what the previous holder committed.
That lock, unlike ``FOR UPDATE``, does not wait for transactions that merely insert rows
referring to the session (a foreign key takes ``FOR KEY SHARE``), so two of those that then
log an event queue up instead of deadlocking.

Every event insert goes through ``append_events``, ``insert_event``, ``log_event`` or
``add_event``: they tell the running ``Database.write`` which sessions got events
(``noted_events``), which is how its listeners hear of them. A row lock taken here is noted
too (``noted_locked``): the event helpers skip a lock the transaction already holds.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import asyncpg

from .._args import Filters
from .._erasure import client_key_prefixes
from .._errors import MessageNotFound, RunActive, SessionNotFound
from .._rows import (
    EVENT_COLUMNS,
    MESSAGE_COLUMNS,
    SESSION_COLUMNS,
    dump_json,
    merged_metadata,
    to_event,
    to_message,
    to_session,
)
from .._types import Message, Session, SessionEvent
from ._db import holds_lock, noted_events, noted_locked, returned
from ._sql_dedup import forget as forget_keys
from ._sql_quarantine import delete_naming_chat

__all__ = [
    "Filters",
    "add_event",
    "append_events",
    "append_message",
    "branch_of",
    "count_sessions",
    "delete_session",
    "insert_event",
    "insert_message",
    "insert_messages",
    "insert_session",
    "interrupt_running",
    "latest_user_text",
    "list_events",
    "list_sessions",
    "lock_row",
    "lock_session",
    "log_event",
    "merged_metadata",
    "require_message",
    "require_session",
    "select_branch",
    "select_recent",
    "select_session",
    "set_active_head",
    "set_agent",
    "update_session",
    "with_older_system",
]

_M_COLUMNS = ", ".join("m." + c for c in MESSAGE_COLUMNS.split(", "))

# The walk carries the rows it reads, one primary-key probe a step (as ``_RECENT`` below).
_BRANCH = f"""
WITH RECURSIVE branch ({MESSAGE_COLUMNS}, depth) AS (
    SELECT {MESSAGE_COLUMNS}, 0 FROM messages WHERE id = $1::bigint
    UNION ALL
    SELECT {_M_COLUMNS}, b.depth + 1 FROM branch AS b JOIN messages AS m ON m.id = b.parent_id
)
SELECT {MESSAGE_COLUMNS} FROM branch
"""

_LOCK = f"SELECT {SESSION_COLUMNS} FROM sessions WHERE session_id = $1 FOR NO KEY UPDATE"


async def select_session(conn: asyncpg.Connection, session_id: str) -> Session | None:
    """The session, or None."""
    row = await conn.fetchrow(
        f"SELECT {SESSION_COLUMNS} FROM sessions WHERE session_id = $1", session_id
    )
    return None if row is None else to_session(row)


async def require_session(conn: asyncpg.Connection, session_id: str) -> Session:
    """The session, or SessionNotFound (no lock: also for read-only transactions)."""
    session = await select_session(conn, session_id)
    if session is None:
        raise SessionNotFound(session_id)
    return session


async def lock_row(conn: asyncpg.Connection, session_id: str) -> asyncpg.Record:
    """The session's ``SESSION_COLUMNS`` row, locked until the transaction ends; SessionNotFound.

    The writers of one session take turns here; a later statement of the transaction sees
    whatever the previous holder committed.
    """
    row = await conn.fetchrow(_LOCK, session_id)
    if row is None:
        raise SessionNotFound(session_id)
    noted_locked((session_id,))
    return row


async def lock_session(conn: asyncpg.Connection, session_id: str) -> Session:
    """``lock_row`` as a Session."""
    return to_session(await lock_row(conn, session_id))


async def insert_session(
    conn: asyncpg.Connection, values: dict[str, Any], now: float
) -> Session | None:
    """Insert a new session; None if one with that id exists already."""
    row = await conn.fetchrow(
        "INSERT INTO sessions (session_id, channel, account, chat_id, active_agent, metadata,"
        " created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $7)"
        f" ON CONFLICT (session_id) DO NOTHING RETURNING {SESSION_COLUMNS}",
        values["session_id"],
        values["channel"],
        values["account"],
        values["chat_id"],
        values["active_agent"],
        values["metadata"],
        now,
    )
    return None if row is None else to_session(row)


async def update_session(
    conn: asyncpg.Connection,
    session_id: str,
    active_agent: str | None,
    metadata: dict[str, Any] | None,
    now: float,
) -> Session:
    """Set the active agent and/or merge metadata keys (shallow); bump ``updated_at``."""
    session = await lock_session(conn, session_id)
    merged = merged_metadata(session, metadata or {})
    row = await conn.fetchrow(
        "UPDATE sessions SET active_agent = coalesce($1, active_agent), metadata = $2,"
        f" updated_at = $3 WHERE session_id = $4 RETURNING {SESSION_COLUMNS}",
        active_agent,
        merged,
        now,
        session_id,
    )
    return to_session(returned(row))


async def delete_session(conn: asyncpg.Connection, session_id: str) -> bool:
    """Erase a session: its row, with everything that cascades from it (messages, events,
    attachments, inbox, outbox), the quarantined bodies that name its chat, and a web chat's
    dedup keys (store/_erasure.py); False if there was none."""
    row = await conn.fetchrow(
        "DELETE FROM sessions WHERE session_id = $1 RETURNING channel, account, chat_id",
        session_id,
    )
    if row is None:
        return False
    channel, account, chat_id = row
    await delete_naming_chat(conn, channel, chat_id, account)
    await forget_keys(conn, client_key_prefixes([(channel, chat_id)]))
    return True


def _where(filters: Filters, search: str | None = None) -> tuple[str, list[Any]]:
    """The WHERE clause with ``$1``.. placeholders, and its parameters.

    ``ILIKE``: SQLite's LIKE ignores the case of ASCII letters; backslash escapes the wildcards.
    """
    params: list[Any] = list(filters.values())
    clauses = [f"{col} = ${n}" for n, col in enumerate(filters, start=1)]
    if search:
        pattern = "%" + search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        params.append(pattern)
        n = len(params)
        clauses.append(f"(chat_id ILIKE ${n} ESCAPE '\\' OR session_id ILIKE ${n} ESCAPE '\\')")
    if not clauses:
        return "", []
    return " WHERE " + " AND ".join(clauses), params


async def list_sessions(
    conn: asyncpg.Connection,
    filters: Filters,
    limit: int,
    offset: int,
    search: str | None = None,
) -> list[Session]:
    """A page of sessions, most recently updated first, then by id (byte order, as SQLite)."""
    where, params = _where(filters, search)
    n = len(params)
    rows = await conn.fetch(
        f"SELECT {SESSION_COLUMNS} FROM sessions{where}"
        f' ORDER BY updated_at DESC, session_id COLLATE "C" LIMIT ${n + 1} OFFSET ${n + 2}',
        *params,
        limit,
        offset,
    )
    return [to_session(row) for row in rows]


async def count_sessions(
    conn: asyncpg.Connection, filters: Filters, search: str | None = None
) -> int:
    """How many sessions match the filters."""
    where, params = _where(filters, search)
    count: int = await conn.fetchval(f"SELECT count(*) FROM sessions{where}", *params)
    return count


# A lease that ran out this long ago is deleted: its owner's sessions were long taken over.
LEASE_RETENTION = 86400.0

# Running sessions whose owner holds no lease that is still running. SKIP LOCKED: a row another
# transaction holds (a turn beginning or committing, another process interrupting it) is left
# for the next call, so two processes interrupting at once never wait for each other, and each
# session is taken by one of them (one that waited would re-check the row and find it taken).
_DEAD_RUNNING = (
    "SELECT session_id FROM sessions AS s WHERE status = 'running' AND (owner IS NULL"
    " OR NOT EXISTS (SELECT 1 FROM leases AS l WHERE l.owner = s.owner AND l.expires_at >= $1))"
    ' ORDER BY session_id COLLATE "C" FOR NO KEY UPDATE SKIP LOCKED'
)


_OWN_RUNNING = (
    "SELECT session_id FROM sessions WHERE status = 'running' AND owner = $1"
    ' ORDER BY session_id COLLATE "C" FOR NO KEY UPDATE SKIP LOCKED'
)


async def interrupt_running(
    conn: asyncpg.Connection, now: float, stale: tuple[str, Collection[str]] | None = None
) -> list[str]:
    """Mark ``running`` sessions whose owner holds no live lease ``interrupted`` (no owner);
    return their ids, sorted. Sessions of live owners (this store's too) are left alone.

    Each gets a ``turn_cancelled`` event: its ``turn_started`` will not be followed by a finish.
    Leases that ran out more than ``LEASE_RETENTION`` ago are deleted.
    """
    rows = await conn.fetch(_DEAD_RUNNING, now)
    ids = sorted(row[0] for row in rows)
    if stale is not None:  # this store's own running sessions with no turn under way
        owner, running_here = stale
        own = await conn.fetch(_OWN_RUNNING, owner)
        ids = sorted({*ids, *(row[0] for row in own if row[0] not in running_here)})
    noted_locked(ids)
    await conn.execute(
        "DELETE FROM leases WHERE owner IN (SELECT owner FROM leases WHERE expires_at < $1"
        " FOR UPDATE SKIP LOCKED)",
        now - LEASE_RETENTION,
    )
    if not ids:
        return []
    await conn.execute(
        "UPDATE sessions SET status = 'interrupted', owner = NULL"
        " WHERE session_id = ANY($1::text[])",
        ids,
    )
    detail = dump_json({"reason": "interrupted"})
    for sid in ids:
        await append_events(conn, sid, [("turn_cancelled", detail, now)])
    return ids


async def select_branch(conn: asyncpg.Connection, head_id: int | None) -> list[Message]:
    """The messages from the root to ``head_id``, oldest first."""
    if head_id is None:
        return []
    rows = await conn.fetch(_BRANCH + " ORDER BY depth DESC", head_id)
    return [to_message(row) for row in rows]


# The walk carries the rows it reads (no second join with ``messages``, which the planner,
# with no estimate for a recursive CTE, would make a hash join over a scan of the whole table):
# each step is one probe of the primary key. ``lowest`` (the same on every row) is the oldest
# system message of the session before the window, when the window does not reach the root:
# the ``messages_system`` index (session_id, id) answers it.
# A turn starts at a user message that is not OUTSIDE_TURNS (see store/_types.py).
_STARTS = (
    "({t}role = 'user' AND NOT coalesce({t}data::jsonb -> 'outside_turns' = 'true', false))::int"
)
_RECENT = f"""
WITH RECURSIVE recent ({MESSAGE_COLUMNS}, depth, users) AS (
    SELECT {MESSAGE_COLUMNS}, 0, {_STARTS.format(t="")} FROM messages WHERE id = $1::bigint
    UNION ALL
    SELECT {_M_COLUMNS}, r.depth + 1, r.users + {_STARTS.format(t="m.")}
    FROM recent AS r JOIN messages AS m ON m.id = r.parent_id
    WHERE r.users < $2::int
), oldest AS (
    SELECT id, parent_id FROM recent ORDER BY depth DESC LIMIT 1
)
SELECT {MESSAGE_COLUMNS}, (
    SELECT min(s.id) FROM oldest, messages AS s
    WHERE oldest.parent_id IS NOT NULL AND s.session_id = $3 AND s.id < oldest.id
    AND s.role = 'system'
) AS lowest
FROM recent
ORDER BY depth DESC
"""

# Ancestors of $1 down to id $2 (a parent's id is always below its child's), system messages
# only; the walk reads ids alone and stops at the oldest system message it could meet.
_OLDER_SYSTEM = f"""
WITH RECURSIVE up (id) AS (
    SELECT $1::bigint
    UNION ALL
    SELECT m.parent_id FROM up JOIN messages AS m ON m.id = up.id WHERE m.parent_id >= $2::bigint
)
SELECT {MESSAGE_COLUMNS} FROM messages WHERE id IN (SELECT id FROM up) AND role = 'system'
ORDER BY id
"""


async def select_recent(
    conn: asyncpg.Connection, session_id: str, head_id: int | None, turns: int
) -> list[Message]:
    """What ``prune_to_turns(branch, turns)`` can keep of the branch ending at ``head_id``.

    The branch from the ``turns``-th newest user message to ``head_id`` (all of it when it has
    fewer user messages), after every older system message of the branch; oldest first.
    See the SQLite backend's ``select_recent`` for why the walk is split so.
    """
    if head_id is None:
        return []
    rows = await conn.fetch(_RECENT, head_id, turns, session_id)
    return await with_older_system(conn, [to_message(row) for row in rows], rows[0]["lowest"])


async def with_older_system(
    conn: asyncpg.Connection, window: list[Message], lowest: int | None
) -> list[Message]:
    """The window of ``select_recent`` after the system messages of the branch older than it;
    ``lowest`` is the walk's (None: there are none)."""
    if not window or window[0].parent_id is None or lowest is None:
        return window
    older = await conn.fetch(_OLDER_SYSTEM, window[0].parent_id, lowest)
    return [to_message(row) for row in older] + window


async def require_message(conn: asyncpg.Connection, session_id: str, message_id: int) -> None:
    """Raise MessageNotFound unless the message exists and belongs to the session."""
    row = await conn.fetchval(
        "SELECT 1 FROM messages WHERE id = $1 AND session_id = $2", message_id, session_id
    )
    if row is None:
        raise MessageNotFound(session_id, message_id)


async def branch_of(
    conn: asyncpg.Connection, session_id: str, head_id: int | None
) -> list[Message]:
    """The current branch of a session, or the branch ending at ``head_id`` (of that session)."""
    session = await require_session(conn, session_id)
    if head_id is None:
        return await select_branch(conn, session.head_id)
    await require_message(conn, session_id, head_id)
    return await select_branch(conn, head_id)


async def all_messages(conn: asyncpg.Connection, session_id: str) -> list[Message]:
    """Every message of the session, of every branch, in id order; SessionNotFound."""
    await require_session(conn, session_id)
    rows = await conn.fetch(
        f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = $1 ORDER BY id", session_id
    )
    return [to_message(row) for row in rows]


async def latest_user_text(conn: asyncpg.Connection, session_id: str) -> str | None:
    """The text of the newest user message on the current branch."""
    session = await require_session(conn, session_id)
    if session.head_id is None:
        return None
    row = await conn.fetchrow(
        _BRANCH + " WHERE role = 'user' ORDER BY depth LIMIT 1", session.head_id
    )
    return None if row is None else to_message(row).text


async def insert_message(
    conn: asyncpg.Connection, session_id: str, parent_id: int | None, new: dict[str, Any]
) -> Message:
    """Insert one message; ``new`` holds role, text, agent, data (JSON text) and created_at."""
    row = await conn.fetchrow(
        "INSERT INTO messages (session_id, parent_id, role, text, agent, data, created_at)"
        f" VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {MESSAGE_COLUMNS}",
        session_id,
        parent_id,
        new["role"],
        new["text"],
        new["agent"],
        new["data"],
        new["created_at"],
    )
    return to_message(returned(row))


# Messages appended one after the other in one statement: the ids are drawn in order (the
# identity's sequence, as a plain INSERT draws it), each message's parent is the one before.
_INSERT_CHAIN = (
    "INSERT INTO messages (id, session_id, parent_id, role, text, agent, data, created_at)"
    " SELECT id, $1, coalesce(lag(id) OVER (ORDER BY n), $2), role, text, agent, data,"
    " created_at FROM (SELECT nextval(pg_get_serial_sequence('messages', 'id')) AS id, n, role,"
    " text, agent, data, created_at FROM unnest($3::text[], $4::text[], $5::text[], $6::text[],"
    " $7::float8[]) WITH ORDINALITY AS g (role, text, agent, data, created_at, n)"
    " ORDER BY n) AS given ORDER BY n"
    f" RETURNING {MESSAGE_COLUMNS}"
)


async def insert_messages(
    conn: asyncpg.Connection, session_id: str, parent_id: int | None, new: list[dict[str, Any]]
) -> list[Message]:
    """``insert_message`` of each of ``new`` in turn, the first after ``parent_id``: one
    statement. The messages, oldest first."""
    if len(new) < 2:
        return [await insert_message(conn, session_id, parent_id, one) for one in new]
    rows = await conn.fetch(
        _INSERT_CHAIN,
        session_id,
        parent_id,
        [one["role"] for one in new],
        [one["text"] for one in new],
        [one["agent"] for one in new],
        [one["data"] for one in new],
        [one["created_at"] for one in new],
    )
    messages = sorted((to_message(row) for row in rows), key=lambda message: message.id)
    if len(messages) != len(new):
        raise AssertionError(f"inserted {len(new)} messages, got {len(messages)} rows")
    return messages


async def append_message(
    conn: asyncpg.Connection, session_id: str, new: dict[str, Any], now: float
) -> Message:
    """Append after the head and move the head to the new message."""
    head = await conn.fetchrow(
        "SELECT head_id FROM sessions WHERE session_id = $1 FOR NO KEY UPDATE", session_id
    )
    if head is None:
        raise SessionNotFound(session_id)
    message = await insert_message(conn, session_id, head[0], new)
    await conn.execute(
        "UPDATE sessions SET head_id = $1, updated_at = $2 WHERE session_id = $3",
        message.id,
        now,
        session_id,
    )
    return message


async def set_active_head(
    conn: asyncpg.Connection, session_id: str, message_id: int, now: float
) -> Session:
    """Move the head to one of the session's messages; refused while a turn runs."""
    session = await lock_session(conn, session_id)
    if session.status == "running":
        raise RunActive(session_id)
    await require_message(conn, session_id, message_id)
    row = await conn.fetchrow(
        "UPDATE sessions SET head_id = $1, updated_at = $2 WHERE session_id = $3"
        f" RETURNING {SESSION_COLUMNS}",
        message_id,
        now,
        session_id,
    )
    detail = dump_json({"message_id": message_id})
    await append_events(conn, session_id, [("head_moved", detail, now)])
    return to_session(returned(row))


async def set_agent(
    conn: asyncpg.Connection, session_id: str, agent: str, reason: str, now: float
) -> Session:
    """Hand the session to ``agent`` with an ``agent_changed`` event; refused while running."""
    session = await lock_session(conn, session_id)
    if session.status == "running":
        raise RunActive(session_id)
    row = await conn.fetchrow(
        "UPDATE sessions SET active_agent = $1, updated_at = $2 WHERE session_id = $3"
        f" RETURNING {SESSION_COLUMNS}",
        agent,
        now,
        session_id,
    )
    if agent != session.active_agent:
        detail = dump_json({"from": session.active_agent, "to": agent, "reason": reason})
        await append_events(conn, session_id, [("agent_changed", detail, now)])
    return to_session(returned(row))


# One row per (kind, detail, created_at), numbered after the session's last seq, in order.
APPEND_EVENTS = (
    "INSERT INTO session_events (session_id, kind, detail, created_at, seq)"
    " SELECT $1, e.kind, e.detail, e.created_at, last.seq + e.n"
    " FROM unnest($2::text[], $3::text[], $4::float8[]) WITH ORDINALITY"
    " AS e (kind, detail, created_at, n),"
    " (SELECT coalesce(max(seq), 0) AS seq FROM session_events WHERE session_id = $1) AS last"
    " ORDER BY e.n RETURNING id"
)


def event_columns(events: list[tuple[str, str, float]]) -> tuple[list[str], list[str], list[float]]:
    """``APPEND_EVENTS``' $2, $3 and $4: the kinds, details and times of ``events``."""
    return [e[0] for e in events], [e[1] for e in events], [e[2] for e in events]


async def append_events(
    conn: asyncpg.Connection, session_id: str, events: list[tuple[str, str, float]]
) -> list[int]:
    """Append ``(kind, detail JSON text, created_at)`` events in one statement; their ids.

    Only for a caller that holds the session's row lock (``lock_row``, or an UPDATE of the
    row earlier in the transaction): that is what keeps two writers from taking one seq.
    """
    if not events:
        return []
    rows = await conn.fetch(APPEND_EVENTS, session_id, *event_columns(events))
    noted_events((session_id,))
    return sorted(row[0] for row in rows)


_INSERT_EVENT = (
    "INSERT INTO session_events (session_id, kind, detail, created_at, seq)"
    " VALUES ($1, $2, $3, $4, (SELECT coalesce(max(seq), 0) + 1 FROM session_events"
    " WHERE session_id = $1))"
)


async def _lock_for_event(conn: asyncpg.Connection, session_id: str) -> None:
    # A separate statement: the INSERT that follows takes its snapshot after the lock is held,
    # so its max(seq) counts the events the previous holder committed. Not sent again when
    # the transaction holds the lock already (its later statements' snapshots follow it).
    if not holds_lock(session_id):
        await lock_row(conn, session_id)


async def insert_event(
    conn: asyncpg.Connection, session_id: str, kind: str, detail: str, now: float
) -> SessionEvent:
    """Append one event to the session's log with its next ``seq``; ``detail`` is JSON text.

    Locks the session's row first (SessionNotFound if there is none), so no other writer can
    take the same seq.
    """
    await _lock_for_event(conn, session_id)
    row = await conn.fetchrow(
        f"{_INSERT_EVENT} RETURNING {EVENT_COLUMNS}", session_id, kind, detail, now
    )
    noted_events((session_id,))
    return to_event(returned(row))


async def log_event(
    conn: asyncpg.Connection, session_id: str, kind: str, detail: str, now: float
) -> None:
    """``insert_event`` for the many callers that do not read the row back (no RETURNING)."""
    await _lock_for_event(conn, session_id)
    await conn.execute(_INSERT_EVENT, session_id, kind, detail, now)
    noted_events((session_id,))


async def add_event(
    conn: asyncpg.Connection, session_id: str, kind: str, detail: dict[str, Any], now: float
) -> None:
    """``log_event`` with ``detail`` as a dict."""
    await log_event(conn, session_id, kind, dump_json(detail), now)


async def list_events(
    conn: asyncpg.Connection, session_id: str, after: int = 0, limit: int = -1
) -> list[SessionEvent]:
    """A session's events with ``seq > after``, oldest first (``limit`` < 0: all)."""
    await require_session(conn, session_id)
    rows = await conn.fetch(
        f"SELECT {EVENT_COLUMNS} FROM session_events WHERE session_id = $1 AND seq > $2"
        " ORDER BY seq LIMIT $3",
        session_id,
        after,
        None if limit < 0 else limit,  # LIMIT NULL: no limit
    )
    return [to_event(row) for row in rows]
