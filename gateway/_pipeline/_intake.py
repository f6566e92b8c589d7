"""The intake: after the ack, parse the stored deliveries into inbox rows, statuses and the rest.

The webhook handler stored the verified bytes and claimed their dedup keys. Here the full
parser runs (pydantic, PTB), only the events whose keys that delivery claimed first are kept,
and ``record_parsed`` writes them in one transaction and drops the delivery row.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any

from webhook_bot_gateway.channels import (
    ChannelAdapter,
    ChannelError,
    DeliveryStatus,
    InboundMessage,
    MembershipEvent,
    ParseResult,
    TelegramAdapter,
    TemplateUpdate,
)
from webhook_bot_gateway.store import (
    ATTACHMENT_SOURCES,
    AttachmentIn,
    Delivery,
    InboxIn,
    MembershipIn,
    OlderDeliveries,
    ParsedDelivery,
    SessionInbox,
    StatusIn,
    Store,
    StoreError,
    make_session_id,
)

from .._media.files import clean_name
from .._metrics import (
    DELIVERY_FAILURES,
    IGNORED,
    QUARANTINED,
    STORE_ERRORS,
    TEMPLATE_UPDATES,
    Metrics,
)
from .._reachability import is_undeliverable
from .._wait import wait_event
from ._handed import HandedDeliveries
from ._pacer import AckPacer
from ._resend import ResendTimes, resend_at, retry_of

log = logging.getLogger("gateway.intake")
MEDIA_CHANNELS = frozenset(ATTACHMENT_SOURCES) - {"upload"}

MAX_ERROR = 300
GOOD_TEMPLATE_STATES = frozenset({"APPROVED", "GREEN"})  # other news needs an operator


AccountAgents = Mapping[tuple[str, str], str]  # (channel, account) -> its starting agent


def to_parsed(
    delivery: Delivery,
    result: ParseResult,
    account_agents: AccountAgents | None = None,
    resend_times: ResendTimes | None = None,
) -> ParsedDelivery:
    """The parts of ``result`` this delivery owns: events whose keys it claimed first; a
    session they create starts at its account's own agent where ``account_agents`` names one.
    A failed status the platform asks to retry gets a re-send on ``resend_times``' schedule."""
    agents = account_agents or {}
    inbox: list[InboxIn] = []
    statuses: list[StatusIn] = []
    memberships: list[MembershipIn] = []
    for event in result.events:
        if event.dedup_key not in delivery.keys:
            continue  # a duplicate of an event another delivery carried
        if isinstance(event, InboundMessage):
            inbox.append(_inbox_item(event, agents.get((event.channel, event.account))))
        elif isinstance(event, DeliveryStatus):
            # The user cannot be reached: the session of the reply it reports on is parked.
            statuses.append(_status(event, resend_at(event, resend_times), _undeliverable(event)))
        elif isinstance(event, MembershipEvent):
            blocked = event.state == "blocked"
            agent = agents.get((event.channel, event.account))
            memberships.append(
                MembershipIn(event.channel, event.account, event.chat_id, blocked, agent)
            )
    failure = "; ".join(result.failures)[: MAX_ERROR * 10] or None
    return ParsedDelivery(tuple(inbox), tuple(statuses), tuple(memberships), failure)


def _code_label(code: str) -> str:
    """A platform error code as a metric label: digits only, so the series stay few."""
    return code if code == "none" or (code.isdigit() and len(code) <= 7) else "other"


def _undeliverable(event: DeliveryStatus) -> bool:
    return event.state == "failed" and any(
        is_undeliverable(event.channel, error.code) for error in event.errors
    )


MEDIA_KINDS = frozenset({"image", "document", "audio", "video", "voice", "sticker"})
DEFAULT_TYPES = {"image": "image/jpeg", "sticker": "image/webp", "voice": "audio/ogg"}


def _inbox_item(event: InboundMessage, starting_agent: str | None = None) -> InboxIn:
    """The inbox row of a message, with its platform file to fetch and its uploads to link."""
    files: tuple[AttachmentIn, ...] = ()
    media = event.media
    if media is not None and event.kind in MEDIA_KINDS and event.channel in MEDIA_CHANNELS:
        ref = {"account": event.account, "media_id": media.id}
        content_type = media.mime_type or DEFAULT_TYPES.get(event.kind, "application/octet-stream")
        name = clean_name(media.file_name, event.kind)
        files = (AttachmentIn(uuid.uuid4().hex, name, content_type, event.channel, ref),)
    return InboxIn(
        event.channel,
        event.account,
        event.chat_id,
        event.dedup_key,
        event.stored(),
        attachments=files,
        links=event.attachments,
        starting_agent=starting_agent,
    )


def _status(
    event: DeliveryStatus, again: tuple[float, ...] = (), unreachable: bool = False
) -> StatusIn:
    error = None
    if event.errors:
        first = event.errors[0]
        parts = [str(first.code) if first.code is not None else None, first.title, first.message]
        error = ": ".join(p for p in parts if p)[:MAX_ERROR] or "failed"
    return StatusIn(
        event.channel, event.account, event.message_id, event.state, error, again, unreachable
    )


class Intake:
    """Turns stored deliveries into inbox rows; hands their sessions' pending rows on."""

    def __init__(
        self,
        store: Store,
        adapters: Mapping[str, ChannelAdapter],
        *,
        starting_agent: str,
        account_agents: AccountAgents | None = None,
        metrics: Metrics,
        on_inbox: Callable[[Sequence[SessionInbox]], None] = lambda news: None,
        on_files: Callable[[], None] = lambda: None,
        resend_times: ResendTimes | None = None,
        on_resend: Callable[[], None] = lambda: None,
        batch: int = 100,
        chunk: int = 32,
        pacer: AckPacer | None = None,
        handed: HandedDeliveries | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._adapters = adapters
        self._starting_agent = starting_agent
        self._account_agents = dict(account_agents or {})
        self._metrics = metrics
        self._on_inbox = on_inbox  # sessions with new rows, and their pending rows if known
        self._on_files = on_files  # recorded messages brought platform files to fetch
        self._resend_times = resend_times  # the sender's schedule for a failed status's retry
        self._on_resend = on_resend  # recorded statuses may have put replies back in the outbox
        self._batch = batch
        self._chunk = chunk  # deliveries recorded per transaction (one disk flush each)
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopping = False
        self._pacer = pacer  # acks first: may hold new deliveries back while acks are slow
        self._handed = handed  # None: always read the store
        self._clock = clock
        self._read_at = -math.inf  # when the store was last read
        # Told of each delivery quarantined, with its reason (the Telegram username replay).
        self.on_quarantined: Callable[[str, str], None] = lambda channel, reason: None

    async def run(self, wake: asyncio.Event, poll_seconds: float = 2.0) -> None:
        """Parse what is handed over (or stored), then wait for a wake-up or the next poll,
        which reads the store (another process may have stored deliveries); until ``stop``."""
        woken = False
        while not self._stopping:
            wake.clear()
            # A poll's read is due even while wake-ups keep coming: another process's
            # deliveries (an ingest_only one's) are found only by reading.
            due = self._clock() - self._read_at >= poll_seconds
            try:
                done = await self.step(from_store=due or not woken)
            except StoreError as exc:
                if self._handed is not None:
                    self._handed.forget()
                self._metrics.inc(STORE_ERRORS, component="intake")
                log.warning("intake pass failed: %s", exc)
                done = 0
            woken = True
            if done < self._batch:
                woken = await wait_event(wake, poll_seconds)

    async def stop(self) -> None:
        """Finish the pass under way (its deliveries stay stored if cut) and the answers."""
        self._stopping = True
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def step(self, from_store: bool = True) -> int:
        """Handle one batch of deliveries, oldest first: those handed over unless
        ``from_store`` (or none can be trusted to be all), else read; return how many."""
        deliveries, handed = await self._next(from_store)
        try:
            await self._handle(deliveries, oldest_first=handed)
        except OlderDeliveries:  # another process stored one before these: read, in order
            if self._handed is not None:
                self._handed.forget()
            return await self.step(from_store=True)
        return len(deliveries)

    async def _handle(self, deliveries: Sequence[Delivery], oldest_first: bool) -> None:
        writing: asyncio.Task[None] | None = None
        try:
            for start in range(0, len(deliveries), self._chunk):
                if self._stopping:
                    break
                if self._pacer is not None:
                    await self._pacer.admit(len(deliveries[start : start + self._chunk]))
                chunk = [(d, self._parse(d)) for d in deliveries[start : start + self._chunk]]
                # The next chunk is parsed while this one is written; writes stay in order.
                if writing is not None:
                    await writing
                writing = asyncio.create_task(self._record(chunk, oldest_first))
        finally:
            if writing is not None:
                await writing

    async def _next(self, from_store: bool) -> tuple[list[Delivery], bool]:
        """The next deliveries, and whether they were handed over (not read)."""
        handed = self._handed
        if handed is None:
            return await self._read(), False
        taken = None if from_store else handed.take(self._batch)
        if taken is not None:
            return taken, True
        mark = handed.before_read()
        deliveries = await self._read()
        handed.after_read(deliveries, self._batch, mark)
        return deliveries, False

    async def _read(self) -> list[Delivery]:
        self._read_at = self._clock()
        return await self._store.unparsed_deliveries(self._batch)

    async def _record(
        self, chunk: Sequence[tuple[Delivery, ParseResult]], oldest_first: bool = False
    ) -> None:
        parsed = [
            (delivery, to_parsed(delivery, result, self._account_agents, self._resend_times))
            for delivery, result in chunk
        ]
        try:
            news = await self._store.record_parsed_many(
                [(delivery.id, item) for delivery, item in parsed],
                starting_agent=self._starting_agent,
                oldest_first=oldest_first,
            )
        except ValueError:
            # One delivery the store refuses (e.g. ids too long for a session id) must not stall
            # every later one: record them one by one, quarantining the refused.
            parsed, news = await self._record_one_by_one(parsed)
        for (delivery, result), (_, item) in zip(chunk, parsed, strict=True):
            self._count(delivery, result, item)
            self._answer_callbacks(delivery, item.inbox)
        if news:
            self._on_inbox(news)
        if any(message.attachments for _, item in parsed for message in item.inbox):
            self._on_files()
        if any(status.resend_at for _, item in parsed for status in item.statuses):
            self._on_resend()

    async def _record_one_by_one(
        self, parsed: Sequence[tuple[Delivery, ParsedDelivery]]
    ) -> tuple[list[tuple[Delivery, ParsedDelivery]], list[SessionInbox]]:
        """Each delivery in its own transaction; one the store refuses goes to quarantine.
        The sessions come back without their pending rows (the dispatcher reads them)."""
        done: list[tuple[Delivery, ParsedDelivery]] = []
        sessions: dict[str, None] = {}
        for delivery, item in parsed:
            try:
                fresh = await self._store.record_parsed(
                    delivery.id, item, starting_agent=self._starting_agent
                )
            except ValueError as exc:
                log.warning("delivery %d of %s refused by the store", delivery.id, delivery.channel)
                item = ParsedDelivery(failure=f"cannot be recorded: {exc}"[:MAX_ERROR])
                fresh = await self._store.record_parsed(
                    delivery.id, item, starting_agent=self._starting_agent
                )
            done.append((delivery, item))
            sessions.update(dict.fromkeys(fresh))
        return done, [SessionInbox(sid, (), complete=False) for sid in sessions]

    def _count(self, delivery: Delivery, result: ParseResult, parsed: ParsedDelivery) -> None:
        if parsed.failure is not None:
            self._metrics.inc(QUARANTINED, channel=delivery.channel)
            log.warning(
                "delivery %d of %s quarantined in part or whole", delivery.id, delivery.channel
            )
            self.on_quarantined(delivery.channel, parsed.failure)
        for kind in result.ignored:
            self._metrics.inc(IGNORED, channel=delivery.channel, type=kind)
        for event in result.events:
            if event.dedup_key not in delivery.keys:
                continue  # another delivery carried it first, and was counted then
            if isinstance(event, TemplateUpdate):
                self._template_update(event)
            elif isinstance(event, DeliveryStatus) and event.state == "failed":
                self._delivery_failed(event)

    def _delivery_failed(self, status: DeliveryStatus) -> None:
        """A reply the platform accepted and then could not deliver (WhatsApp reports the
        24-hour window, an unreachable user, spam limits... this way too): a WARNING line that
        says why in the platform's words, and a count by error code."""
        first = status.errors[0] if status.errors else None
        code = str(first.code) if first is not None and first.code is not None else "none"
        self._metrics.inc(DELIVERY_FAILURES, channel=status.channel, code=_code_label(code))
        why = "no reason given"
        if first is not None:
            why = ": ".join(filter(None, [code, first.title, first.message, first.details]))
        session_id = make_session_id(status.channel, status.account, status.chat_id)
        again = " (a transient error: the reply goes again if it has tries left)"
        log.warning(
            "%s message %s of session %s was accepted, then not delivered: %s%s",
            status.channel,
            status.message_id,
            session_id,
            why[:MAX_ERROR],
            again if self._resend_times is not None and retry_of(status) is not None else "",
        )

    def _template_update(self, update: TemplateUpdate) -> None:
        """Meta's news about a template: a log line (WARNING unless good news) and a count.

        Everything is in the message: the log formatters write only the context fields."""
        state = update.event or update.new_quality or "unknown"
        self._metrics.inc(TEMPLATE_UPDATES, field=update.field, state=state[:32])
        details = [f"{update.field}", f"template id {update.template_id}"]
        details.append(f"business account {update.account or '?'}")
        if update.reason:
            details.append(f"reason {update.reason}")
        if update.previous_quality:
            details.append(f"quality was {update.previous_quality}")
        level = logging.INFO if state in GOOD_TEMPLATE_STATES else logging.WARNING
        log.log(
            level,
            "whatsapp template %s (%s) is now %s: %s",
            update.name,
            update.language,
            state,
            ", ".join(details),
        )

    def _parse(self, delivery: Delivery) -> ParseResult:
        adapter = self._adapters.get(delivery.channel)
        if adapter is None:
            return ParseResult(failures=(f"no channel {delivery.channel!r} is configured",))
        try:
            return adapter.parse(delivery.body, delivery.account)
        except ChannelError as exc:
            return ParseResult(failures=(exc.reason[:MAX_ERROR],))

    def _answer_callbacks(self, delivery: Delivery, inbox: Iterable[InboxIn]) -> None:
        """Stop the spinner of each pressed Telegram button (best effort, in the background)."""
        adapter = self._adapters.get(delivery.channel)
        if not isinstance(adapter, TelegramAdapter):
            return
        for item in inbox:
            query = item.event.get("callback_query_id")
            if isinstance(query, str) and query:
                self._spawn(_answer(adapter, item.account, query))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


async def _answer(adapter: TelegramAdapter, account: str, query_id: str) -> None:
    try:
        await adapter.answer_callback(account, query_id)
    except ChannelError as exc:
        log.info("callback query not answered: %s", exc.reason)
