"""What the dispatcher asks of the media worker: a turn's files, after a bounded wait."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from webhook_bot_gateway.agents import ImagePart
from webhook_bot_gateway.store import Attachment, Store


class MediaWait(Protocol):
    async def settle(self, message_keys: Sequence[str]) -> list[Attachment]:
        """The attachments of these inbound messages, once downloaded or after the wait."""

    async def images(self, files: Sequence[Attachment]) -> tuple[ImagePart, ...]:
        """The downloaded images among ``files``, for a model that can see."""


class StoredFiles:
    """No downloads in this process: the attachments as they are stored now."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def settle(self, message_keys: Sequence[str]) -> list[Attachment]:
        return await self._store.message_attachments(message_keys)

    async def images(self, files: Sequence[Attachment]) -> tuple[ImagePart, ...]:
        return ()
