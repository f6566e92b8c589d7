"""The platform webhooks: read within limits, verify, key, record durably, then acknowledge.

Order: Content-Encoding (415 unless identity; nothing read) -> a read slot (503 ``busy`` past
``server.max_concurrent_reads`` bodies read at once) -> size (413) and read time (408) ->
signature or secret (401; 404 for an unknown bot) ->
the backlog's refuse bound (503 ``backlog_full``, nothing stored, the platform retries later) ->
delivery_keys (ChannelError: the body goes to quarantine, 200) -> the group-commit writer
(store down: 503, so the platform retries) -> 200. Nothing is parsed into models before the ack;
the intake does that from the stored bytes. Neither a token nor a body is ever logged.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from aiohttp import StreamReader, web

from webhook_bot_gateway.channels import (
    ChannelAdapter,
    ChannelError,
    UnknownAccount,
    WebhookRejected,
)
from webhook_bot_gateway.store import DeliveryIn, IngestResult, QuarantineIn

from . import _log_context as log_context
from ._http import (
    UNSUPPORTED_ENCODING,
    ReadSlots,
    body_encoding,
    encoding_message,
    json_error,
    ok,
)
from ._keys import ADAPTERS, BACKLOG, METRICS, PACER, SETTINGS, WRITER
from ._metrics import (
    ACCEPTED,
    ACK_SECONDS,
    DUPLICATE,
    IGNORED,
    QUARANTINED,
    RECEIVED,
    REJECTED,
    STORE_ERRORS,
    Metrics,
)
from ._pipeline._backlog import Backlog
from ._pipeline._writer import GroupCommitWriter, Item

log = logging.getLogger("gateway.webhooks")

READS = web.AppKey("webhook_reads", ReadSlots)  # server.max_concurrent_reads

NO_KEYS = "none"  # the ignored-update type of a delivery with nothing to record
INCOMPLETE_BODY = "incomplete_body"  # nobody reads the answer: the code is for logs and metrics


STORE_UNAVAILABLE = "store_unavailable"


class Refused(Exception):
    """A webhook answered with an error status; ``code`` is also the metric's reason."""

    def __init__(self, status: int, code: str, message: str, *, close: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.close = close or status in (408, 413, 415)  # refused with its body unread

    def response(self) -> web.Response:
        response = json_error(self.status, self.code, self.message)
        if self.close:
            # "Connection: close": the rest of the body is not worth reading. The server does
            # not read it either (lingering_time=0: app.server_options): it closes at once.
            response.force_close()
        return response


@runtime_checkable
class SubscriptionCheck(Protocol):
    """A channel with a GET subscription handshake (WhatsApp)."""

    def verify_subscription(self, query: Mapping[str, str]) -> str: ...


def check_encoding(request: web.Request) -> None:
    """Refused with 415 for a body that is not sent as it is (before any of it is read)."""
    encoding = body_encoding(request)
    if encoding is not None:
        raise Refused(415, UNSUPPORTED_ENCODING, encoding_message(encoding))


async def read_body(
    request: web.Request, limit: int, seconds: float, slots: ReadSlots | None = None
) -> bytes:
    """The whole body, at most ``limit`` bytes, within ``seconds``; else Refused.

    A body still on its way takes one of ``slots`` while it is read (503 ``busy`` when none is
    free); one that came whole with the headers needs none.
    """
    if request.content_length is not None and request.content_length > limit:
        raise _too_large(limit)
    content = request.content
    if content.is_eof():  # the usual case: the body came with the headers; nothing to wait for
        body = content.read_nowait()
        if len(body) > limit:
            raise _too_large(limit)
        return body
    if slots is None:
        return await _read_slowly(content, limit, seconds)
    if not slots.take():
        message = f"{slots.size} request bodies are being read already; retry later"
        raise Refused(503, "busy", message, close=True)
    try:
        return await _read_slowly(content, limit, seconds)
    finally:
        slots.give_back()


async def _read_slowly(content: StreamReader, limit: int, seconds: float) -> bytes:
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(seconds):
            while chunk := await content.readany():
                size += len(chunk)
                if size > limit:  # a chunked body announces no length
                    raise _too_large(limit)
                chunks.append(chunk)
    except TimeoutError:
        raise Refused(408, "request_timeout", f"the body took over {seconds:g} s") from None
    except ConnectionError:  # the client went away mid-body: one INFO line, not a traceback
        message = "the connection closed before the body came"
        raise Refused(400, INCOMPLETE_BODY, message, close=True) from None
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _too_large(limit: int) -> Refused:
    return Refused(413, "body_too_large", f"the body is larger than {limit} bytes")


def verify(adapter: ChannelAdapter, request: web.Request, body: bytes, account: str | None) -> None:
    """Authenticate the delivery; Refused with 401 or 404."""
    try:
        adapter.verify(request.headers, body, account)
    except WebhookRejected as exc:
        raise Refused(401, exc.code, exc.reason) from None
    except UnknownAccount:
        raise Refused(404, "unknown_bot", f"no bot named {account!r} is configured") from None


def to_item(adapter: ChannelAdapter, body: bytes, account: str | None) -> Item | None:
    """What to record: the delivery with its keys, a quarantine row, or None (irrelevant)."""
    channel = adapter.name
    try:
        keys = adapter.delivery_keys(body, account)
    except UnknownAccount:
        raise Refused(404, "unknown_bot", f"no bot named {account!r} is configured") from None
    except ChannelError as exc:
        log.warning("%s delivery quarantined: %s", channel, exc.reason)
        return QuarantineIn(channel=channel, account=account, body=body, reason=exc.reason)
    if not keys:
        return None
    log_context.found_keys(keys)
    return DeliveryIn(channel=channel, account=account, body=body, keys=tuple(keys))


def check_backlog(backlog: Backlog) -> None:
    """Refused with 503 while the backlog is at its refuse bound: the platform retries later."""
    if backlog.full():
        message = f"{backlog.refuse_bound} or more messages wait for an answer; retry later"
        raise Refused(503, "backlog_full", message)


async def record(
    writer: GroupCommitWriter, backlog: Backlog, item: Item, metrics: Metrics
) -> IngestResult:
    """Submit to the group-commit writer, counted in the backlog; any failure is a 503."""
    backlog.submitted()
    result: IngestResult | None = None
    failed = False
    try:
        result = await writer.submit(item)
    except Exception as exc:  # whatever the store raised: the platform must retry
        metrics.inc(STORE_ERRORS, component="webhook")
        failed = True
        log.error("%s delivery not recorded: %s", item.channel, type(exc).__name__)
        raise Refused(503, STORE_UNAVAILABLE, "the delivery could not be recorded") from None
    finally:
        stored = result is not None and result.delivery_id is not None
        backlog.settled(stored=stored, failed=failed)
    return result


async def ingest(
    request: web.Request, channel: str, account: str | None, limit: int
) -> web.Response:
    """The whole webhook path of one request; its log lines carry the channel, and the dedup
    keys once they are known (docs/logging.md)."""
    with log_context.webhook(channel):
        return await _ingest(request, channel, account, limit)


async def _ingest(
    request: web.Request, channel: str, account: str | None, limit: int
) -> web.Response:
    started = time.perf_counter()
    app = request.app
    metrics = app[METRICS]
    metrics.inc(RECEIVED, channel=channel)
    try:
        adapter = _adapter(app, channel)
        check_encoding(request)
        body = await read_body(request, limit, app[SETTINGS].server.read_timeout, app[READS])
        verify(adapter, request, body, account)
        check_backlog(app[BACKLOG])  # before any parsing: under overload a refusal is cheap
        item = to_item(adapter, body, account)
        if item is None:
            metrics.inc(IGNORED, channel=channel, type=NO_KEYS)
        else:
            _count(metrics, channel, item, await record(app[WRITER], app[BACKLOG], item, metrics))
    except Refused as exc:
        metrics.inc(REJECTED, channel=channel, reason=exc.code)
        if exc.code != STORE_UNAVAILABLE:  # ``record`` wrote its one line, an ERROR
            log.info("%s webhook refused: %s %s", channel, exc.status, exc.code)
        return exc.response()
    metrics.observe(ACK_SECONDS, time.perf_counter() - started, channel=channel)
    app[PACER].acked()
    return ok()


def _count(metrics: Metrics, channel: str, item: Item, result: IngestResult) -> None:
    if isinstance(item, QuarantineIn):
        metrics.inc(QUARANTINED, channel=channel)
    elif result.delivery_id is None:
        metrics.inc(DUPLICATE, channel=channel)
        log.debug("%s delivery is a duplicate: nothing stored", channel)
    else:
        metrics.inc(ACCEPTED, channel=channel)
        log.debug("%s delivery %d stored", channel, result.delivery_id)


def _adapter(app: web.Application, channel: str) -> ChannelAdapter:
    adapter = app[ADAPTERS].get(channel)
    if adapter is None:
        raise Refused(404, "unknown_channel", f"the {channel} channel is not configured")
    return adapter


async def whatsapp_post(request: web.Request) -> web.Response:
    """POST /webhooks/whatsapp: a delivery signed with the app secret."""
    limit = request.app[SETTINGS].server.max_body_whatsapp
    return await ingest(request, "whatsapp", None, limit)


async def telegram_post(request: web.Request) -> web.Response:
    """POST /webhooks/telegram/{bot}: one Update with the bot's secret token header."""
    limit = request.app[SETTINGS].server.max_body_telegram
    return await ingest(request, "telegram", request.match_info["bot"], limit)


async def whatsapp_handshake(request: web.Request) -> web.Response:
    """GET /webhooks/whatsapp: answer Meta's subscription check with hub.challenge."""
    adapter = request.app[ADAPTERS].get("whatsapp")
    if not isinstance(adapter, SubscriptionCheck):
        return json_error(404, "unknown_channel", "the whatsapp channel is not configured")
    try:
        challenge = adapter.verify_subscription(request.query)
    except ChannelError as exc:
        log.info("whatsapp subscription check refused: %s", exc.reason)
        return json_error(403, "bad_verify_token", "the subscription check failed")
    return web.Response(text=challenge)


def add_webhook_routes(app: web.Application) -> None:
    """Register the three webhook routes and their bound on bodies read at once."""
    app[READS] = ReadSlots(app[SETTINGS].server.max_concurrent_reads)
    app.router.add_get("/webhooks/whatsapp", whatsapp_handshake)
    app.router.add_post("/webhooks/whatsapp", whatsapp_post)
    app.router.add_post("/webhooks/telegram/{bot}", telegram_post)
