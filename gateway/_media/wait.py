"""What the dispatcher asks of the media worker: a turn's files, after a bounded wait."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from store import Attachment, Store


class MediaWait(Protocol):
    async def settle(self, message_keys: Sequence[str]) -> list[Attachment]:
        """The attachments of these inbound messages, once downloaded or after the wait."""


class StoredFiles:
    """No downloads in this process: the attachments as they are stored now."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def settle(self, message_keys: Sequence[str]) -> list[Attachment]:
        return await self._store.message_attachments(message_keys)
