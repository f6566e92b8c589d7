"""Rows of the SQLite schema to the store's frozen dataclasses, and back."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Protocol, cast

from ._types import Attachment, Message, Role, Session, SessionEvent, SessionStatus

SESSION_COLUMNS = (
    "session_id, channel, account, chat_id, active_agent, status, head_id, metadata, "
    "created_at, updated_at"
)
MESSAGE_COLUMNS = "id, session_id, parent_id, role, text, agent, data, created_at"
EVENT_COLUMNS = "id, session_id, kind, detail, created_at, seq"
ATTACHMENT_COLUMNS = (
    "id, session_id, name, content_type, size, state, source, message_key, error, created_at,"
    " media_ref"
)


class Row(Protocol):
    """A row as either driver returns it: a sqlite3 tuple or an asyncpg Record, read by index."""

    def __getitem__(self, index: int, /) -> Any: ...


def to_datetime(seconds: float) -> datetime:
    """Unix seconds (as stored) to an aware UTC datetime."""
    return datetime.fromtimestamp(seconds, tz=UTC)


def dump_json(value: dict[str, Any]) -> str:
    """A JSON object as stored; raises TypeError or ValueError for what JSON cannot hold."""
    if not isinstance(value, dict):
        raise TypeError(f"expected a dict, got {type(value).__name__}")
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def load_json(text: str) -> dict[str, Any]:
    """A stored JSON object back to a dict."""
    return cast(dict[str, Any], json.loads(text))


def to_session(row: Row) -> Session:
    """A ``SESSION_COLUMNS`` row to a Session."""
    return Session(
        session_id=row[0],
        channel=row[1],
        account=row[2],
        chat_id=row[3],
        active_agent=row[4],
        status=cast(SessionStatus, row[5]),
        head_id=row[6],
        metadata=load_json(row[7]),
        created_at=to_datetime(row[8]),
        updated_at=to_datetime(row[9]),
    )


def to_message(row: Row) -> Message:
    """A ``MESSAGE_COLUMNS`` row to a Message."""
    return Message(
        id=row[0],
        session_id=row[1],
        parent_id=row[2],
        role=cast(Role, row[3]),
        text=row[4],
        agent=row[5],
        data=load_json(row[6]),
        created_at=to_datetime(row[7]),
    )


def to_event(row: Row) -> SessionEvent:
    """An ``EVENT_COLUMNS`` row to a SessionEvent."""
    return SessionEvent(
        id=row[0],
        session_id=row[1],
        kind=row[2],
        detail=load_json(row[3]),
        created_at=to_datetime(row[4]),
        seq=row[5],
    )


def to_attachment(row: Row) -> Attachment:
    """An ``ATTACHMENT_COLUMNS`` row to an Attachment."""
    return Attachment(
        id=row[0],
        session_id=row[1],
        name=row[2],
        content_type=row[3],
        size=row[4],
        state=row[5],
        source=row[6],
        message_key=row[7],
        error=row[8],
        created_at=to_datetime(row[9]),
        media_ref=load_json(row[10]),
    )


def merged_metadata(session: Session, updates: dict[str, Any]) -> str:
    """The session's metadata with ``updates`` merged in (shallow), as JSON text."""
    return dump_json({**session.metadata, **updates})


def attachment_event(attachment: Attachment) -> dict[str, Any]:
    """What the event log and /ws show of an attachment."""
    detail: dict[str, Any] = {
        "id": attachment.id,
        "name": attachment.name,
        "content_type": attachment.content_type,
        "size": attachment.size,
        "state": attachment.state,
        "message_key": attachment.message_key,
    }
    if attachment.error:
        detail["error"] = attachment.error
    return detail
