"""Attachment statements: files of a session, uploaded or brought in from a platform.

The SQLite backend's ``_sql_attachments`` on an ``asyncpg.Connection``: same names, same
arguments, awaited. Each function runs inside the caller's transaction (``Database.write`` or
``read``). Where SQLite reads then writes under its single write lock, these lock the session
row first, with the lock every writer of a session takes (``_sql_sessions.lock_row``,
``FOR NO KEY UPDATE``): a concurrent ``delete_session`` then waits for this transaction, or has
already won and the session is not found, never a foreign-key error or a half-done write; and
the writers of one session's events take turns, session row first.

Ids are compared byte-wise (``COLLATE "C"``) when ordering, as SQLite does, so a caller's
upper-case id sorts the same on both backends whatever the database's collation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg

from .._errors import AttachmentNotFound
from .._rows import ATTACHMENT_COLUMNS, attachment_event, to_attachment
from .._types import Attachment
from ._db import noted_locked, returned
from ._sql_sessions import add_event, lock_row, require_session

_ORDER = ' ORDER BY created_at, id COLLATE "C"'


async def insert(conn: asyncpg.Connection, values: dict[str, Any], now: float) -> Attachment:
    """Insert one attachment of an existing session; SessionNotFound otherwise."""
    await lock_row(conn, values["session_id"])
    row = await conn.fetchrow(
        "INSERT INTO attachments (id, session_id, name, content_type, size, state, source,"
        " message_key, media_ref, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
        f" RETURNING {ATTACHMENT_COLUMNS}",
        values["id"],
        values["session_id"],
        values["name"],
        values["content_type"],
        values["size"],
        values["state"],
        values["source"],
        values["message_key"],
        values["media_ref"],
        now,
    )
    return to_attachment(returned(row))


async def get(conn: asyncpg.Connection, session_id: str, attachment_id: str) -> Attachment | None:
    """One attachment of the session, or None."""
    row = await conn.fetchrow(
        f"SELECT {ATTACHMENT_COLUMNS} FROM attachments WHERE id = $1 AND session_id = $2",
        attachment_id,
        session_id,
    )
    return None if row is None else to_attachment(row)


async def of_session(conn: asyncpg.Connection, session_id: str) -> list[Attachment]:
    """The session's attachments, oldest first."""
    await require_session(conn, session_id)
    rows = await conn.fetch(
        f"SELECT {ATTACHMENT_COLUMNS} FROM attachments WHERE session_id = $1{_ORDER}",
        session_id,
    )
    return [to_attachment(row) for row in rows]


async def of_messages(conn: asyncpg.Connection, message_keys: Sequence[str]) -> list[Attachment]:
    """The attachments that came with these inbound messages, oldest first."""
    rows = await conn.fetch(
        f"SELECT {ATTACHMENT_COLUMNS} FROM attachments WHERE message_key = ANY($1::text[]){_ORDER}",
        list(message_keys),
    )
    return [to_attachment(row) for row in rows]


async def pending(conn: asyncpg.Connection, limit: int) -> list[Attachment]:
    """Platform files still to download, oldest first."""
    rows = await conn.fetch(
        f"SELECT {ATTACHMENT_COLUMNS} FROM attachments WHERE state = 'pending'{_ORDER} LIMIT $1",
        limit,
    )
    return [to_attachment(row) for row in rows]


async def link(
    conn: asyncpg.Connection, session_id: str, ids: Sequence[str], message_key: str, now: float
) -> None:
    """Tie uploaded attachments to the message that referenced them (first message wins), each
    with an ``attachment`` event, in the message's order (the caller holds the session's lock)."""
    if not ids:
        return
    rows = await conn.fetch(
        "UPDATE attachments SET message_key = $1 WHERE id = ANY($2::text[])"
        f" AND session_id = $3 AND message_key IS NULL RETURNING {ATTACHMENT_COLUMNS}",
        message_key,
        list(ids),
        session_id,
    )
    linked = sorted((to_attachment(row) for row in rows), key=lambda a: ids.index(a.id))
    for attachment in linked:
        await add_event(conn, session_id, "attachment", attachment_event(attachment), now)


async def finish(
    conn: asyncpg.Connection,
    attachment_id: str,
    state: str,
    size: int,
    content_type: str | None,
    error: str | None,
    now: float,
) -> Attachment:
    """Record how a download ended, with an ``attachment`` event in the session's log.

    The session row is locked (as ``lock_row`` does) before the attachment is written: the
    order every writer of a session's events takes, so downloads of one session finishing
    together log in turn, and a deleted session's attachment is not found.
    """
    owner = await conn.fetchval(
        "SELECT s.session_id FROM attachments AS a JOIN sessions AS s"
        " ON s.session_id = a.session_id WHERE a.id = $1 FOR NO KEY UPDATE OF s",
        attachment_id,
    )
    if owner is None:
        raise AttachmentNotFound(attachment_id)
    noted_locked((owner,))
    row = await conn.fetchrow(
        "UPDATE attachments SET state = $1, size = $2, content_type = coalesce($3, content_type),"
        f" error = $4 WHERE id = $5 RETURNING {ATTACHMENT_COLUMNS}",
        state,
        size,
        content_type,
        error,
        attachment_id,
    )
    if row is None:  # deleted with its session before the lock was granted
        raise AttachmentNotFound(attachment_id)
    attachment = to_attachment(row)
    await add_event(conn, attachment.session_id, "attachment", attachment_event(attachment), now)
    return attachment
