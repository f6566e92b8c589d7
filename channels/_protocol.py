"""The one protocol every channel implements; a third platform is one new module."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from ._media import MediaSource
from ._model import OutboundMessage, ParseResult, SendResult


class ChannelAdapter(Protocol):
    """A platform: authenticates webhooks, parses them, sends replies.

    Attributes:
        name: the channel's registered name, e.g. ``"telegram"``; the first part of session ids.
    """

    name: str

    def verify(self, headers: Mapping[str, str], body: bytes, account: str | None = None) -> None:
        """Authenticate a delivery from its raw bytes, before any parsing.

        Args:
            headers: the request headers (case-insensitive mapping).
            body: the body exactly as received.
            account: the account named by the URL, where the platform puts it there.

        Raises:
            WebhookRejected: bad or missing signature or secret.
            UnknownAccount: ``account`` is not configured.
        """

    def parse(self, body: bytes, account: str | None = None) -> ParseResult:
        """Turn an authenticated delivery into events.

        Raises:
            ChannelError: the body as a whole is not JSON or not the platform's shape. A part
                that fails among good ones is reported in ``ParseResult.failures`` instead.
        """

    def delivery_keys(self, body: bytes, account: str | None = None) -> list[str]:
        """The dedup keys ``parse`` would put on this delivery's events, computed cheaply.

        Runs before the webhook is acknowledged, so no pydantic models or platform objects:
        ``json.loads`` and a walk. Parts ``parse`` would drop or fail give no key, and parts of
        accounts that are not configured are skipped; ``[]`` means nothing to record.

        Raises:
            ChannelError: the body is not JSON or not the platform's shape (or nothing in it
                is usable and some part is broken): the delivery goes to quarantine.
            UnknownAccount: ``account`` is not configured.
        """

    async def send(self, message: OutboundMessage) -> SendResult:
        """Send one reply.

        Raises:
            SendError: with a disposition saying whether and when to try again.
        """

    async def send_typing(
        self,
        account: str,
        chat_id: str,
        message_id: str | None = None,
        thread_id: str | None = None,
    ) -> None:
        """Show that the bot is typing, while a reply is being prepared.

        Args:
            account: the bot or number that will answer.
            chat_id: the chat to show it in.
            message_id: the user's message being answered, where the platform ties the
                indicator to one (WhatsApp marks it read); ignored elsewhere.
            thread_id: the forum topic the reply will go to (Telegram); ignored elsewhere.

        Raises:
            SendError: the indicator could not be shown (callers treat it as cosmetic).
        """

    async def download_media(self, account: str, media_id: str) -> bytes:
        """Fetch the bytes of an inbound media item."""

    async def media_source(self, account: str, media_id: str) -> MediaSource:
        """Ask the platform where an inbound media item can be downloaded; fetch nothing yet.

        Args:
            account: the bot or number that received the media.
            media_id: the platform's id of the item (``Media.id`` of the inbound message).

        Returns:
            The URL, the headers to send with it (only to its own origin) and what the platform
            said about the file. The URL and the headers may hold the account's token.

        Raises:
            SendError: the platform refused or failed; no token in the message.
        """

    async def aclose(self) -> None:
        """Release HTTP sessions; idempotent."""
