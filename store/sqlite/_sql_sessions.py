"""Session, history and event statements: plain functions over a ``sqlite3.Connection``.

Each function runs inside a transaction opened by the caller (see ``_conn.Connection``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection
from typing import Any

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
from ._sql_dedup import forget as forget_keys
from ._sql_quarantine import delete_naming_chat

_BRANCH = f"""
WITH RECURSIVE branch (id, depth) AS (
    SELECT ?, 0
    UNION ALL
    SELECT m.parent_id, b.depth + 1 FROM messages AS m JOIN branch AS b ON m.id = b.id
    WHERE m.parent_id IS NOT NULL
)
SELECT {", ".join("m." + c for c in MESSAGE_COLUMNS.split(", "))}
FROM branch AS b JOIN messages AS m ON m.id = b.id
"""


def select_session(conn: sqlite3.Connection, session_id: str) -> Session | None:
    """The session, or None."""
    row = conn.execute(
        f"SELECT {SESSION_COLUMNS} FROM sessions WHERE session_id = ?", (session_id,)
    ).fetchone()
    return None if row is None else to_session(row)


def require_session(conn: sqlite3.Connection, session_id: str) -> Session:
    """The session, or SessionNotFound."""
    session = select_session(conn, session_id)
    if session is None:
        raise SessionNotFound(session_id)
    return session


def insert_session(conn: sqlite3.Connection, values: dict[str, Any], now: float) -> Session | None:
    """Insert a new session; None if one with that id exists already."""
    row = conn.execute(
        "INSERT INTO sessions (session_id, channel, account, chat_id, active_agent, metadata,"
        " created_at, updated_at)"
        " VALUES (:session_id, :channel, :account, :chat_id, :active_agent, :metadata, :now, :now)"
        f" ON CONFLICT (session_id) DO NOTHING RETURNING {SESSION_COLUMNS}",
        {**values, "now": now},
    ).fetchone()
    return None if row is None else to_session(row)


def update_session(
    conn: sqlite3.Connection,
    session_id: str,
    active_agent: str | None,
    metadata: dict[str, Any] | None,
    now: float,
) -> Session:
    """Set the active agent and/or merge metadata keys (shallow); bump ``updated_at``."""
    session = require_session(conn, session_id)
    merged = merged_metadata(session, metadata or {})
    row = conn.execute(
        "UPDATE sessions SET active_agent = coalesce(?, active_agent), metadata = ?,"
        f" updated_at = ? WHERE session_id = ? RETURNING {SESSION_COLUMNS}",
        (active_agent, merged, now, session_id),
    ).fetchone()
    return to_session(row)


def delete_session(conn: sqlite3.Connection, session_id: str) -> bool:
    """Erase a session: its row, with everything that cascades from it (messages, events,
    attachments, inbox, outbox), the quarantined bodies that name its chat, and a web chat's
    dedup keys (store/_erasure.py); False if there was none."""
    session = select_session(conn, session_id)
    if session is None:
        return False
    conn.execute("DELETE FROM sessions WHERE session_id = ?", (session_id,))
    delete_naming_chat(conn, session.channel, session.chat_id, session.account)
    forget_keys(conn, client_key_prefixes([(session.channel, session.chat_id)]))
    return True


def truncate_wal(conn: sqlite3.Connection) -> bool:
    """Checkpoint the WAL into the database and empty it (so the pages an erasure replaced
    are gone from it too); False when a reader kept part of it (tried again next time).

    Without waiting: TRUNCATE waits through the busy timeout for another process's readers,
    and this connection is the store's only writer, so every webhook's ack would wait too."""
    (timeout,) = conn.execute("PRAGMA busy_timeout").fetchone()
    conn.execute("PRAGMA busy_timeout = 0")
    try:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        conn.execute(f"PRAGMA busy_timeout = {int(timeout)}")
    return not busy


def _where(filters: Filters, search: str | None = None) -> tuple[str, list[Any]]:
    clauses = [f"{col} = ?" for col in filters]
    params: list[Any] = list(filters.values())
    if search:
        pattern = "%" + search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        clauses.append("(chat_id LIKE ? ESCAPE '\\' OR session_id LIKE ? ESCAPE '\\')")
        params += [pattern, pattern]
    if not clauses:
        return "", []
    return " WHERE " + " AND ".join(clauses), params


def list_sessions(
    conn: sqlite3.Connection,
    filters: Filters,
    limit: int,
    offset: int,
    search: str | None = None,
) -> list[Session]:
    """A page of sessions, most recently updated first, then by id."""
    where, params = _where(filters, search)
    rows = conn.execute(
        f"SELECT {SESSION_COLUMNS} FROM sessions{where}"
        " ORDER BY updated_at DESC, session_id LIMIT ? OFFSET ?",
        (*params, limit, offset),
    ).fetchall()
    return [to_session(row) for row in rows]


def count_sessions(conn: sqlite3.Connection, filters: Filters, search: str | None = None) -> int:
    """How many sessions match the filters."""
    where, params = _where(filters, search)
    count: int = conn.execute(f"SELECT count(*) FROM sessions{where}", params).fetchone()[0]
    return count


LEASE_KEPT_SECONDS = 86400.0  # a lease row that ran out longer ago than this is deleted


def interrupt_running(
    conn: sqlite3.Connection, now: float, stale: tuple[str, Collection[str]] | None = None
) -> list[str]:
    """Mark ``running`` sessions whose owner holds no live lease ``interrupted``; their ids.

    A session whose owner's lease runs until ``now`` or later is left alone, whichever store
    that is: its turn is still running somewhere. Each one taken gets a ``turn_cancelled``
    event (its ``turn_started`` will not be followed by a finish) and loses its owner, so the
    old owner's commit, should it come after all, finds the session taken over. Leases that
    ran out more than ``LEASE_KEPT_SECONDS`` ago are deleted on the way.

    ``sessions_status`` finds the running sessions; each owner is one primary-key probe.
    """
    rows = conn.execute(
        "UPDATE sessions SET status = 'interrupted', owner = NULL WHERE status = 'running'"
        " AND (owner IS NULL OR NOT EXISTS (SELECT 1 FROM leases"
        " WHERE leases.owner = sessions.owner AND leases.expires_at >= ?))"
        " RETURNING session_id",
        (now,),
    ).fetchall()
    ids = sorted(row[0] for row in rows)
    if stale is not None:  # this store's own running sessions with no turn under way
        owner, running_here = stale
        own = conn.execute(
            "SELECT session_id FROM sessions WHERE status = 'running' AND owner = ?", (owner,)
        ).fetchall()
        left = sorted(sid for (sid,) in own if sid not in running_here)
        conn.executemany(
            "UPDATE sessions SET status = 'interrupted', owner = NULL WHERE session_id = ?",
            [(sid,) for sid in left],
        )
        ids = sorted([*ids, *left])
    for sid in ids:
        add_event(conn, sid, "turn_cancelled", {"reason": "interrupted"}, now)
    conn.execute("DELETE FROM leases WHERE expires_at < ?", (now - LEASE_KEPT_SECONDS,))
    return ids


def secret(conn: sqlite3.Connection, name: str, fresh: str) -> str:
    """The secret ``name``, stored as ``fresh`` if it has none yet."""
    conn.execute(
        "INSERT INTO secrets (name, value) VALUES (?, ?) ON CONFLICT DO NOTHING", (name, fresh)
    )
    value: str = conn.execute("SELECT value FROM secrets WHERE name = ?", (name,)).fetchone()[0]
    return value


def renew_lease(conn: sqlite3.Connection, owner: str, expires_at: float) -> None:
    """Hold ``owner``'s lease until ``expires_at``."""
    conn.execute(
        "INSERT INTO leases (owner, expires_at) VALUES (?, ?)"
        " ON CONFLICT (owner) DO UPDATE SET expires_at = excluded.expires_at",
        (owner, expires_at),
    )


def release_lease(conn: sqlite3.Connection, owner: str) -> None:
    """Drop ``owner``'s lease: its running turns may be taken over at once."""
    conn.execute("DELETE FROM leases WHERE owner = ?", (owner,))


def begin_turn(conn: sqlite3.Connection, session_id: str, owner: str) -> None:
    """Mark the session ``running`` a turn of ``owner``; ``updated_at`` stays, so a turn
    rolled back leaves no trace."""
    conn.execute(
        "UPDATE sessions SET status = 'running', owner = ? WHERE session_id = ?",
        (owner, session_id),
    )


def select_branch(conn: sqlite3.Connection, head_id: int | None) -> list[Message]:
    """The messages from the root to ``head_id``, oldest first."""
    if head_id is None:
        return []
    rows = conn.execute(_BRANCH + " ORDER BY b.depth DESC", (head_id,)).fetchall()
    return [to_message(row) for row in rows]


# A turn starts at a user message that is not OUTSIDE_TURNS (see store/_types.py).
_STARTS = "({t}role = 'user' AND json_extract({t}data, '$.outside_turns') IS NOT 1)"
_RECENT = f"""
WITH RECURSIVE recent (id, parent_id, depth, users) AS (
    SELECT id, parent_id, 0, {_STARTS.format(t="")} FROM messages WHERE id = :head
    UNION ALL
    SELECT m.id, m.parent_id, r.depth + 1, r.users + {_STARTS.format(t="m.")}
    FROM recent AS r JOIN messages AS m ON m.id = r.parent_id
    WHERE r.users < :turns
)
SELECT {", ".join("m." + c for c in MESSAGE_COLUMNS.split(", "))}
FROM recent AS r JOIN messages AS m ON m.id = r.id
ORDER BY r.depth DESC
"""

# Ancestors of :start down to id :lowest (a parent's id is always below its child's), system
# messages only; the walk reads ids alone and stops at the oldest system message it could meet.
_OLDER_SYSTEM = f"""
WITH RECURSIVE up (id) AS (
    SELECT :start
    UNION ALL
    SELECT m.parent_id FROM up JOIN messages AS m ON m.id = up.id WHERE m.parent_id >= :lowest
)
SELECT {MESSAGE_COLUMNS} FROM messages WHERE id IN up AND role = 'system' ORDER BY id
"""


def select_recent(
    conn: sqlite3.Connection, session_id: str, head_id: int | None, turns: int
) -> list[Message]:
    """What ``prune_to_turns(branch, turns)`` can keep of the branch ending at ``head_id``.

    The branch from the ``turns``-th newest user message to ``head_id`` (all of it when it has
    fewer user messages), after every older system message of the branch; oldest first.
    The walk from the head stops at that user message, so its cost does not grow with the
    branch. Older system messages are found through ``messages_session (session_id, id)``:
    the session's messages older than the window, filtered on role inside SQLite (no row
    leaves it unless it is a system message); only when some exist does an id-only walk check
    which of them are on this branch (a rewind leaves others behind).
    """
    if head_id is None:
        return []
    rows = conn.execute(_RECENT, {"head": head_id, "turns": turns}).fetchall()
    window = [to_message(row) for row in rows]
    oldest = window[0]
    if oldest.parent_id is None:
        return window
    lowest = conn.execute(
        "SELECT min(id) FROM messages WHERE session_id = ? AND id < ? AND role = 'system'",
        (session_id, oldest.id),
    ).fetchone()[0]
    if lowest is None:
        return window
    older = conn.execute(_OLDER_SYSTEM, {"start": oldest.parent_id, "lowest": lowest})
    return [to_message(row) for row in older.fetchall()] + window


def require_message(conn: sqlite3.Connection, session_id: str, message_id: int) -> None:
    """Raise MessageNotFound unless the message exists and belongs to the session."""
    row = conn.execute(
        "SELECT 1 FROM messages WHERE id = ? AND session_id = ?", (message_id, session_id)
    ).fetchone()
    if row is None:
        raise MessageNotFound(session_id, message_id)


def branch_of(conn: sqlite3.Connection, session_id: str, head_id: int | None) -> list[Message]:
    """The current branch of a session, or the branch ending at ``head_id`` (of that session)."""
    session = require_session(conn, session_id)
    if head_id is None:
        return select_branch(conn, session.head_id)
    require_message(conn, session_id, head_id)
    return select_branch(conn, head_id)


def all_messages(conn: sqlite3.Connection, session_id: str) -> list[Message]:
    """Every message of the session, of every branch, in id order; SessionNotFound."""
    require_session(conn, session_id)
    rows = conn.execute(
        f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = ? ORDER BY id", (session_id,)
    ).fetchall()
    return [to_message(row) for row in rows]


def latest_user_text(conn: sqlite3.Connection, session_id: str) -> str | None:
    """The text of the newest user message on the current branch."""
    session = require_session(conn, session_id)
    if session.head_id is None:
        return None
    row = conn.execute(
        _BRANCH + " WHERE m.role = 'user' ORDER BY b.depth LIMIT 1", (session.head_id,)
    ).fetchone()
    return None if row is None else to_message(row).text


def insert_message(
    conn: sqlite3.Connection, session_id: str, parent_id: int | None, new: dict[str, Any]
) -> Message:
    """Insert one message; ``new`` holds role, text, agent, data (JSON text) and created_at."""
    row = conn.execute(
        "INSERT INTO messages (session_id, parent_id, role, text, agent, data, created_at)"
        " VALUES (:session_id, :parent_id, :role, :text, :agent, :data, :created_at)"
        f" RETURNING {MESSAGE_COLUMNS}",
        {**new, "session_id": session_id, "parent_id": parent_id},
    ).fetchone()
    return to_message(row)


def append_message(
    conn: sqlite3.Connection, session_id: str, new: dict[str, Any], now: float
) -> Message:
    """Append after the head and move the head to the new message."""
    row = conn.execute("SELECT head_id FROM sessions WHERE session_id = ?", (session_id,))
    head = row.fetchone()
    if head is None:
        raise SessionNotFound(session_id)
    message = insert_message(conn, session_id, head[0], new)
    conn.execute(
        "UPDATE sessions SET head_id = ?, updated_at = ? WHERE session_id = ?",
        (message.id, now, session_id),
    )
    return message


def set_active_head(
    conn: sqlite3.Connection, session_id: str, message_id: int, now: float
) -> Session:
    """Move the head to one of the session's messages; refused while a turn runs."""
    session = require_session(conn, session_id)
    if session.status == "running":
        raise RunActive(session_id)
    require_message(conn, session_id, message_id)
    row = conn.execute(
        f"UPDATE sessions SET head_id = ?, updated_at = ? WHERE session_id = ?"
        f" RETURNING {SESSION_COLUMNS}",
        (message_id, now, session_id),
    ).fetchone()
    add_event(conn, session_id, "head_moved", {"message_id": message_id}, now)
    return to_session(row)


def set_agent(
    conn: sqlite3.Connection, session_id: str, agent: str, reason: str, now: float
) -> Session:
    """Hand the session to ``agent`` with an ``agent_changed`` event; refused while running."""
    session = require_session(conn, session_id)
    if session.status == "running":
        raise RunActive(session_id)
    row = conn.execute(
        f"UPDATE sessions SET active_agent = ?, updated_at = ? WHERE session_id = ?"
        f" RETURNING {SESSION_COLUMNS}",
        (agent, now, session_id),
    ).fetchone()
    if agent != session.active_agent:
        detail = {"from": session.active_agent, "to": agent, "reason": reason}
        add_event(conn, session_id, "agent_changed", detail, now)
    return to_session(row)


_INSERT_EVENT = (
    "INSERT INTO session_events (session_id, kind, detail, created_at, seq)"
    " VALUES (?1, ?2, ?3, ?4, (SELECT coalesce(max(seq), 0) + 1 FROM session_events"
    " WHERE session_id = ?1))"
)


def insert_event(
    conn: sqlite3.Connection, session_id: str, kind: str, detail: str, now: float
) -> SessionEvent:
    """Append one event to the session's log with its next ``seq``; ``detail`` is JSON text.

    The caller's transaction holds the write lock, so no other writer can take the same seq.
    """
    row = conn.execute(
        f"{_INSERT_EVENT} RETURNING {EVENT_COLUMNS}", (session_id, kind, detail, now)
    ).fetchone()
    return to_event(row)


def log_event(
    conn: sqlite3.Connection, session_id: str, kind: str, detail: str, now: float
) -> None:
    """``insert_event`` for the many callers that do not read the row back (no RETURNING)."""
    conn.execute(_INSERT_EVENT, (session_id, kind, detail, now))


def add_event(
    conn: sqlite3.Connection, session_id: str, kind: str, detail: dict[str, Any], now: float
) -> None:
    """``log_event`` with ``detail`` as a dict."""
    log_event(conn, session_id, kind, dump_json(detail), now)


def list_events(
    conn: sqlite3.Connection, session_id: str, after: int = 0, limit: int = -1
) -> list[SessionEvent]:
    """A session's events with ``seq > after``, oldest first (``limit`` < 0: all)."""
    require_session(conn, session_id)
    rows = conn.execute(
        f"SELECT {EVENT_COLUMNS} FROM session_events WHERE session_id = ? AND seq > ?"
        " ORDER BY seq LIMIT ?",
        (session_id, after, limit),
    ).fetchall()
    return [to_event(row) for row in rows]
