"""The WhatsApp Cloud API channel: verify, parse, send, mark as read, download media."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

import aiohttp

from .._config import WhatsAppConfig
from .._errors import (
    ChannelError,
    FatalSendError,
    PermanentSendError,
    UncertainDelivery,
)
from .._media import MediaSource, origin
from .._model import OutboundMessage, ParseResult, SendResult
from .._parts import Part, send_parts
from ._graph import GraphClient
from ._keys import delivery_keys
from ._outbound import build_payloads
from ._parse import parse_delivery
from ._signature import check_signature, check_subscription

CHANNEL = "whatsapp"
log = logging.getLogger("channels.whatsapp")


class WhatsAppAdapter:
    """One Meta app: its app secret and verify token, and any number of phone numbers."""

    name: str = CHANNEL

    def __init__(
        self, config: WhatsAppConfig, session: aiohttp.ClientSession | None = None
    ) -> None:
        self._app_secret = config.app_secret.get_secret_value().encode()
        self._verify_token = config.verify_token.get_secret_value().encode()
        self._tokens = {n.phone_number_id: n.access_token for n in config.numbers}
        self._session = session
        self._owns_session = session is None
        self._origin = origin(config.graph_base_url)
        self._graph = GraphClient(
            config.graph_base_url, config.api_version, config.request_timeout, self._http
        )

    @property
    def accounts(self) -> frozenset[str]:
        """The configured phone_number_ids."""
        return frozenset(self._tokens)

    def verify(self, headers: Mapping[str, str], body: bytes, account: str | None = None) -> None:
        """Check X-Hub-Signature-256 over the raw body; ``account`` is unused here."""
        check_signature(self._app_secret, headers, body)

    def verify_subscription(self, query: Mapping[str, str]) -> str:
        """The GET handshake: return hub.challenge, or raise BadVerifyToken (403)."""
        return check_subscription(self._verify_token, query)

    def parse(self, body: bytes, account: str | None = None) -> ParseResult:
        """Parse every entry, change, message and status of one delivery."""
        try:
            return parse_delivery(body)
        except ChannelError:
            raise
        except Exception as exc:
            # A parser bug must not turn into a 500 and seven days of Meta retries: the delivery
            # goes to quarantine and can be replayed once the bug is fixed.
            log.exception("whatsapp parser failed on an authenticated delivery")
            raise ChannelError(CHANNEL, f"parser error: {type(exc).__name__}") from exc

    def delivery_keys(self, body: bytes, account: str | None = None) -> list[str]:
        """The dedup keys ``parse`` would give, cheaply; values of unconfigured numbers skipped."""
        return delivery_keys(body, self._tokens)

    async def send(self, message: OutboundMessage) -> SendResult:
        """Send one reply as one or more Graph API messages; returns every wamid in order."""
        token = self._token(message.account)
        path = f"{message.account}/messages"

        def part(payload: dict[str, Any]) -> Part:
            async def send() -> str:
                return _message_id(await self._graph.post(path, token, payload, idempotent=False))

            return send

        return await send_parts(
            [part(p) for p in build_payloads(message)], message.skip_parts, message.max_parts
        )

    async def mark_as_read(self, account: str, message_id: str, typing: bool = False) -> None:
        """Mark an inbound message read (and earlier ones); with ``typing``, show the indicator."""
        payload: dict[str, Any] = {
            "messaging_product": "whatsapp",
            "status": "read",
            "message_id": message_id,
        }
        if typing:
            payload["typing_indicator"] = {"type": "text"}
        path = f"{account}/messages"
        await self._graph.post(path, self._token(account), payload, idempotent=True)

    async def send_typing(
        self,
        account: str,
        chat_id: str,
        message_id: str | None = None,
        thread_id: str | None = None,
    ) -> None:
        """Mark the user's message read with the typing indicator (it lasts up to 25 s or until
        the reply); WhatsApp ties the indicator to a message, so none is shown without one."""
        if message_id is not None:
            await self.mark_as_read(account, message_id, typing=True)

    async def download_media(self, account: str, media_id: str) -> bytes:
        """GET /{media_id} for the short-lived URL, then GET that URL with the same token."""
        token = self._token(account)
        info = await self._graph.get_json(quote(media_id, safe=""), token)
        url = info.get("url")
        if not isinstance(url, str) or not url.startswith(("https://", "http://")):
            raise PermanentSendError(CHANNEL, f"no download url for media {media_id!r}")
        return await self._graph.get_bytes(url, token)

    async def media_source(self, account: str, media_id: str) -> MediaSource:
        """GET /{media_id} for the short-lived URL; it is fetched with the same bearer token."""
        token = self._token(account)
        info = await self._graph.get_json(quote(media_id, safe=""), token)
        url = info.get("url")
        if not isinstance(url, str) or not url.startswith(("https://", "http://")):
            raise PermanentSendError(CHANNEL, f"no download url for media {media_id!r}")
        mime_type, size = info.get("mime_type"), info.get("file_size")
        return MediaSource(
            url=url,
            headers={"Authorization": f"Bearer {token}"},
            trusted_origin=self._origin,
            content_type=mime_type if isinstance(mime_type, str) and mime_type else None,
            size=_size(size),
        )

    async def aclose(self) -> None:
        """Close the HTTP session if this adapter created it; idempotent."""
        session, self._session = self._session, None
        if session is not None and self._owns_session:
            await session.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession()
            self._owns_session = True
        return self._session

    def _token(self, account: str) -> str:
        token = self._tokens.get(account)
        if token is None:
            # Fatal, not permanent: nothing can go out for this number until the config names it.
            reason = f"phone_number_id {account!r} is not configured"
            raise FatalSendError(CHANNEL, reason, error_code="unknown_account")
        return token.get_secret_value()


def _size(value: object) -> int | None:
    # Graph documents file_size as a number; tolerate a decimal string too.
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.isascii() and value.isdecimal():
        return int(value)
    return None


def _message_id(answer: dict[str, Any]) -> str:
    messages = answer.get("messages")
    first = messages[0] if isinstance(messages, list) and messages else None
    wamid = first.get("id") if isinstance(first, dict) else None
    if not isinstance(wamid, str) or not wamid:
        raise UncertainDelivery(CHANNEL, "the Graph API accepted the message without an id")
    return wamid
