"""Attachment statements: files of a session, uploaded or brought in from a platform."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from .._errors import AttachmentNotFound
from .._rows import ATTACHMENT_COLUMNS, attachment_event, to_attachment
from .._types import Attachment
from ._sql_sessions import add_event, require_session


def insert(conn: sqlite3.Connection, values: dict[str, Any], now: float) -> Attachment:
    """Insert one attachment of an existing session; SessionNotFound otherwise."""
    require_session(conn, values["session_id"])
    row = conn.execute(
        "INSERT INTO attachments (id, session_id, name, content_type, size, state, source,"
        " message_key, media_ref, created_at) VALUES (:id, :session_id, :name, :content_type,"
        f" :size, :state, :source, :message_key, :media_ref, :now) RETURNING {ATTACHMENT_COLUMNS}",
        {**values, "now": now},
    ).fetchone()
    return to_attachment(row)


def get(conn: sqlite3.Connection, session_id: str, attachment_id: str) -> Attachment | None:
    """One attachment of the session, or None."""
    row = conn.execute(
        f"SELECT {ATTACHMENT_COLUMNS} FROM attachments WHERE id = ? AND session_id = ?",
        (attachment_id, session_id),
    ).fetchone()
    return None if row is None else to_attachment(row)


def of_session(conn: sqlite3.Connection, session_id: str) -> list[Attachment]:
    """The session's attachments, oldest first."""
    require_session(conn, session_id)
    rows = conn.execute(
        f"SELECT {ATTACHMENT_COLUMNS} FROM attachments WHERE session_id = ?"
        " ORDER BY created_at, id",
        (session_id,),
    ).fetchall()
    return [to_attachment(row) for row in rows]


def of_messages(conn: sqlite3.Connection, message_keys: Sequence[str]) -> list[Attachment]:
    """The attachments that came with these inbound messages, oldest first."""
    marks = ", ".join("?" * len(message_keys))
    rows = conn.execute(
        f"SELECT {ATTACHMENT_COLUMNS} FROM attachments WHERE message_key IN ({marks})"
        " ORDER BY created_at, id",
        tuple(message_keys),
    ).fetchall()
    return [to_attachment(row) for row in rows]


def pending(conn: sqlite3.Connection, limit: int) -> list[Attachment]:
    """Platform files still to download, oldest first."""
    rows = conn.execute(
        f"SELECT {ATTACHMENT_COLUMNS} FROM attachments WHERE state = 'pending'"
        " ORDER BY created_at, id LIMIT ?",
        (limit,),
    ).fetchall()
    return [to_attachment(row) for row in rows]


def link(
    conn: sqlite3.Connection, session_id: str, ids: Sequence[str], message_key: str, now: float
) -> None:
    """Tie uploaded attachments to the message that referenced them (first message wins), each
    with an ``attachment`` event: a watcher learns the file's name and type as it would a
    platform file's."""
    for attachment_id in ids:
        row = conn.execute(
            "UPDATE attachments SET message_key = ? WHERE id = ? AND session_id = ?"
            f" AND message_key IS NULL RETURNING {ATTACHMENT_COLUMNS}",
            (message_key, attachment_id, session_id),
        ).fetchone()
        if row is not None:
            add_event(conn, session_id, "attachment", attachment_event(to_attachment(row)), now)


def finish(
    conn: sqlite3.Connection,
    attachment_id: str,
    state: str,
    size: int,
    content_type: str | None,
    error: str | None,
    now: float,
) -> Attachment:
    """Record how a download ended, with an ``attachment`` event in the session's log."""
    row = conn.execute(
        "UPDATE attachments SET state = ?, size = ?, content_type = coalesce(?, content_type),"
        f" error = ? WHERE id = ? RETURNING {ATTACHMENT_COLUMNS}",
        (state, size, content_type, error, attachment_id),
    ).fetchone()
    if row is None:
        raise AttachmentNotFound(attachment_id)
    attachment = to_attachment(row)
    add_event(conn, attachment.session_id, "attachment", attachment_event(attachment), now)
    return attachment
