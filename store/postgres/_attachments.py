"""The attachment methods of ``PostgresStore``: rows only; the gateway owns the files.

The same methods, checks and errors as the SQLite backend's; each call is one transaction of
``Database`` (see ``_sql_attachments`` for the locks it takes).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from functools import partial
from typing import Any

from .._checks import MAX_LIST_LIMIT, check_int, check_text
from .._ids import validate_session_id
from .._rows import dump_json
from .._types import ATTACHMENT_SOURCES, ATTACHMENT_STATES, Attachment
from . import _sql_attachments as sql
from ._db import Database

MAX_NAME = 255


def _check_id(attachment_id: object) -> str:
    if not isinstance(attachment_id, str) or len(attachment_id) != 32:
        raise ValueError("attachment id must be 32 hex digits")
    try:
        int(attachment_id, 16)
    except ValueError:
        raise ValueError("attachment id must be 32 hex digits") from None
    return attachment_id


def _check_choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return str(value)


class AttachmentMethods:
    """Mixed into ``PostgresStore``, which provides ``_db`` and ``_now``."""

    @property
    def _db(self) -> Database:
        raise NotImplementedError

    def _now(self) -> float:
        raise NotImplementedError

    async def create_attachment(
        self,
        session_id: str,
        *,
        name: str,
        content_type: str,
        source: str,
        size: int = 0,
        state: str = "ready",
        message_key: str | None = None,
        media_ref: dict[str, Any] | None = None,
        attachment_id: str | None = None,
    ) -> Attachment:
        """Record a file of the session (under a new id, unless the caller made one, e.g. to
        name the file before the row exists); SessionNotFound if there is no such session."""
        validate_session_id(session_id)
        if not isinstance(name, str) or len(name) > MAX_NAME:
            raise ValueError(f"name must be a string of at most {MAX_NAME} characters")
        values = {
            "id": uuid.uuid4().hex if attachment_id is None else _check_id(attachment_id),
            "session_id": session_id,
            "name": name,
            "content_type": check_text("content_type", content_type),
            "size": check_int("size", size, 0),
            "state": _check_choice("state", state, ATTACHMENT_STATES),
            "source": _check_choice("source", source, ATTACHMENT_SOURCES),
            "message_key": message_key,
            "media_ref": dump_json(media_ref or {}),
        }
        return await self._db.write(partial(sql.insert, values=values, now=self._now()))

    async def get_attachment(self, session_id: str, attachment_id: str) -> Attachment | None:
        """One attachment of the session, or None (also for an id of another session)."""
        validate_session_id(session_id)
        _check_id(attachment_id)
        run = partial(sql.get, session_id=session_id, attachment_id=attachment_id)
        return await self._db.read(run)

    async def list_attachments(self, session_id: str) -> list[Attachment]:
        """The session's attachments, oldest first; SessionNotFound for an unknown session."""
        validate_session_id(session_id)
        return await self._db.read(partial(sql.of_session, session_id=session_id))

    async def message_attachments(self, message_keys: Sequence[str]) -> list[Attachment]:
        """The attachments that came with these inbound messages (by dedup key)."""
        keys = [check_text("message_keys", key) for key in message_keys]
        if not keys:
            return []
        return await self._db.read(partial(sql.of_messages, message_keys=keys))

    async def pending_attachments(self, limit: int = 100) -> list[Attachment]:
        """Platform files still to download, oldest first."""
        check_int("limit", limit, 1, MAX_LIST_LIMIT)
        return await self._db.read(partial(sql.pending, limit=limit))

    async def finish_attachment(
        self,
        attachment_id: str,
        *,
        state: str,
        size: int = 0,
        content_type: str | None = None,
        error: str | None = None,
    ) -> Attachment:
        """Record how a download ended (``ready`` or ``failed``) and log it in the session."""
        _check_id(attachment_id)
        _check_choice("state", state, ("ready", "failed"))
        check_int("size", size, 0)
        run = partial(
            sql.finish,
            attachment_id=attachment_id,
            state=state,
            size=size,
            content_type=content_type,
            error=error,
            now=self._now(),
        )
        return await self._db.write(run)
