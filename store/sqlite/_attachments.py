"""The attachment methods of ``SQLiteStore``: rows only; the gateway owns the files."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from .. import _args as args
from .._checks import MAX_LIST_LIMIT, check_int, check_text
from .._ids import validate_session_id
from .._types import Attachment
from . import _sql_attachments as sql
from ._conn import Connection


class AttachmentMethods:
    """Mixed into ``SQLiteStore``, which provides ``_db`` and ``_now``."""

    @property
    def _db(self) -> Connection:
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
        values = args.attachment_row(
            session_id,
            name=name,
            content_type=content_type,
            source=source,
            size=size,
            state=state,
            message_key=message_key,
            media_ref=media_ref,
            attachment_id_=attachment_id,
        )
        return await self._db.write(partial(sql.insert, values=values, now=self._now()))

    async def get_attachment(self, session_id: str, attachment_id: str) -> Attachment | None:
        """One attachment of the session, or None (also for an id of another session)."""
        validate_session_id(session_id)
        args.attachment_id(attachment_id)
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
        error = args.check_download_end(attachment_id, state, size, error)
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
