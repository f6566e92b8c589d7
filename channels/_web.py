"""The web chat channel: a message typed into a ``/ws`` socket, as the pipeline stores it.

The gateway's ``/ws`` handler authenticates the socket (the session id is the credential) and
stores each message frame as a delivery body of this shape; from there it travels like a
webhook: dedup key, inbox, lane, turn. Replies are not sent through this adapter: a web
session's answers are written to its event log by the turn's own commit.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ._errors import ChannelError, PermanentSendError
from ._media import MediaSource
from ._model import InboundMessage, OutboundMessage, ParseResult, SendResult

CHANNEL = "web"
ACCOUNT = ""  # the web has no accounts: its session ids are web-<uuid>


class WebDelivery(BaseModel):
    """The stored body of one web message."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    chat_id: str = Field(min_length=1, max_length=64)  # the uuid of web-<uuid>
    client_id: str = Field(min_length=1, max_length=128)
    text: str
    attachments: tuple[str, ...] = ()
    received_at: float


def web_body(chat_id: str, client_id: str, text: str, attachments: tuple[str, ...]) -> bytes:
    """The delivery body the ``/ws`` handler stores for one message frame."""
    delivery = WebDelivery(
        chat_id=chat_id,
        client_id=client_id,
        text=text,
        attachments=attachments,
        received_at=datetime.now(UTC).timestamp(),
    )
    return delivery.model_dump_json().encode()


def web_dedup_key(chat_id: str, client_id: str) -> str:
    """A message re-sent with the same ``client_id`` (after a reconnect) is the same message."""
    return f"{CHANNEL}:{chat_id}:{client_id}"


def _load(body: bytes) -> WebDelivery:
    try:
        return WebDelivery.model_validate_json(body)
    except ValidationError as exc:
        raise ChannelError(CHANNEL, f"not a web delivery: {exc.error_count()} error(s)") from None


class WebAdapter:
    """Parses stored web deliveries; has nothing to verify, send or download."""

    name = CHANNEL

    def __init__(self, config: object = None, session: object = None) -> None:
        del config, session  # the registry's factory signature

    def verify(self, headers: Mapping[str, str], body: bytes, account: str | None = None) -> None:
        """Nothing to check: the ``/ws`` handler authenticated the socket."""

    def delivery_keys(self, body: bytes, account: str | None = None) -> list[str]:
        """The message's one key."""
        delivery = _load(body)
        return [web_dedup_key(delivery.chat_id, delivery.client_id)]

    def parse(self, body: bytes, account: str | None = None) -> ParseResult:
        """One text message (with the ids of its uploaded attachments)."""
        delivery = _load(body)
        message = InboundMessage(
            channel=CHANNEL,
            account=ACCOUNT,
            chat_id=delivery.chat_id,
            sender_id=delivery.chat_id,
            message_id=delivery.client_id,
            dedup_key=web_dedup_key(delivery.chat_id, delivery.client_id),
            timestamp=datetime.fromtimestamp(delivery.received_at, UTC),
            kind="text",
            text=delivery.text,
            attachments=delivery.attachments,
        )
        return ParseResult(events=(message,))

    async def send(self, message: OutboundMessage) -> SendResult:
        """Never used: web replies are delivered by the turn's commit to the event log."""
        raise PermanentSendError(CHANNEL, "web replies are written to the session's event log")

    async def send_typing(
        self,
        account: str,
        chat_id: str,
        message_id: str | None = None,
        thread_id: str | None = None,
    ) -> None:
        """The event log's ``turn_started`` tells a web client that an answer is coming."""

    async def download_media(self, account: str, media_id: str) -> bytes:
        """Web files arrive as uploads, never as platform media."""
        raise PermanentSendError(CHANNEL, "web attachments are uploaded, not downloaded")

    async def media_source(self, account: str, media_id: str) -> MediaSource:
        """Web files arrive as uploads, never as platform media."""
        raise PermanentSendError(CHANNEL, "web attachments are uploaded, not downloaded")

    async def aclose(self) -> None:
        """Nothing to close."""
