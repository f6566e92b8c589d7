"""The sender: relays outbox rows to the platforms, paced, retried, and never sent twice on purpose.

Each pass reads the due rows in id order and starts the sends the rate limits allow, one at a
time per chat so a chat's replies arrive in order, and at most ``max_in_flight`` per channel
(a platform that hangs holds its own sends, not the other platform's). The sends of a pass
share one claim write; a row another process claimed meanwhile is left to it. The platform's
answer is recorded with one statement (``outbox_sent``); a crash between the two is the
documented window in which a reply can go out twice. A timeout after the request left is
``uncertain`` and never retried.

A reply the platform needs several messages for (a long text) sends as many parts as the
chat's rate limit allows at once; the delivered parts are recorded (``outbox_progress``) and
the rest go in later passes as the limit lets them, so a long answer is paced like many
replies, not sent in one burst the platform would refuse with 429.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from webhook_bot_gateway.channels import (
    ChannelAdapter,
    ChatMigrated,
    FatalSendError,
    OutboundMessage,
    RetryableSendError,
    SendError,
    SendResult,
    UncertainDelivery,
)
from webhook_bot_gateway.store import OutboxItem, Store, StoreError

from .. import _convert as convert
from .. import _log_context as log_context
from .. import _reachability as reachability
from .._metrics import OUTBOX, RATE_LIMIT_WAITS, SEND_SECONDS, STORE_ERRORS, Metrics
from .._wait import wait_event
from ..config import SenderConfig
from ._ratelimit import RateLimiter

log = logging.getLogger("gateway.sender")
# A row is claimed for one send attempt (every part of a split reply) before it goes out, so
# two processes never send it both; longer than any attempt's HTTP timeouts. A claim of a
# process that died ends with its lease (docs/deployment.md).
CLAIM_SECONDS = 120.0

MAX_BATCH = 1000  # the store's largest page
MAX_PARTS = 1000  # parts of one reply sent in one try where the channel has no rate limit
ChatKey = tuple[str, str, str]  # channel, account, chat_id
Clock = Callable[[], float]


def configure_limits(limiter: RateLimiter, config: SenderConfig) -> None:
    """The platform limits of ``[sender]``."""
    limiter.configure(
        "telegram",
        chat_rate=config.telegram_chat_per_second,
        account_rate=config.telegram_bot_per_second,
        burst=config.burst,
        group_rate=config.telegram_group_per_minute / 60,
    )
    limiter.configure(
        "whatsapp",
        chat_rate=config.whatsapp_chat_per_second,
        account_rate=config.whatsapp_number_per_second,
        burst=config.burst,
    )


class Sender:
    """The outbox relay; ``run()`` until ``stop()``, or ``step()`` by hand in tests."""

    def __init__(
        self,
        store: Store,
        adapters: Mapping[str, ChannelAdapter],
        config: SenderConfig,
        *,
        metrics: Metrics,
        wake: asyncio.Event | None = None,
        clock: Clock = time.time,
        jitter: Callable[[], float] = random.random,
        max_in_flight: int = 64,
        batch: int = 200,
        fatal_pause: float | None = None,
        coalesce: float = 0.0,
    ) -> None:
        self._store = store
        self._adapters = adapters
        self._config = config
        self._metrics = metrics
        self.wake = wake or asyncio.Event()
        self._clock = clock
        self._jitter = jitter
        self._max_in_flight = max_in_flight
        self._batch = batch
        self._limit = batch  # rows read per pass; grows while a full batch is all waiting
        self._fatal_pause = config.backoff_max_seconds if fatal_pause is None else fatal_pause
        self._coalesce = coalesce  # seconds a pass waits for other sends to finish
        self.limiter = RateLimiter(clock)
        configure_limits(self.limiter, config)
        self._in_flight: dict[int, asyncio.Task[None]] = {}
        self._busy: set[ChatKey] = set()  # chats with a send in flight
        self._held: dict[ChatKey, float] = {}  # chats whose earlier reply waits for a retry
        self._paused: dict[tuple[str, str], float] = {}  # accounts with bad credentials
        self._rate_waited: set[int] = set()  # rows already counted as waiting for a rate limit
        self._stopping = False

    # the loop

    async def run(self, poll_seconds: float = 2.0) -> None:
        """Relay until ``stop()``; sleeps only until the next due row, a wake-up or a poll."""
        while not self._stopping:
            self.wake.clear()
            try:
                next_at = await self.step()
            except StoreError as exc:
                self._metrics.inc(STORE_ERRORS, component="sender")
                log.warning("sender pass failed: %s", exc)
                next_at = None
            pause = poll_seconds if next_at is None else next_at - self._clock()
            await wait_event(self.wake, min(max(pause, 0.0), poll_seconds))
            if self._coalesce > 0 and self._in_flight:
                # Sends finishing one after another would each cost a read of the store: let
                # the ones of the next moment join (the store's thread is the pipeline's limit).
                await asyncio.sleep(self._coalesce)

    async def stop(self, grace: float) -> None:
        """Start nothing more; let sends in flight finish for ``grace`` seconds.

        A send cut off here may have reached the platform without being recorded: it goes
        again after the restart, like a crash in the window the module docstring names.
        """
        self._stopping = True
        self.wake.set()
        try:
            async with asyncio.timeout(grace):
                await self.flush()
        except TimeoutError:
            late = list(self._in_flight.values())
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)

    async def flush(self) -> None:
        """Wait for the sends in flight (tests)."""
        while self._in_flight:
            await asyncio.wait(list(self._in_flight.values()))

    async def step(self) -> float | None:
        """Start every due send the limits allow; return when to look again (clock time).

        None means: when a send finishes (that wakes the loop) or at the next poll.
        """
        now = self._clock()
        self._forget_past(now)
        flying = Counter(channel for channel, _, _ in self._busy)
        full = [channel for channel, count in flying.items() if count >= self._max_in_flight]
        rows, later = await self._store.outbox_schedule(now, self._limit, skip_channels=full)
        self._rate_waited.intersection_update(row.id for row in rows)
        seen: set[ChatKey] = set()
        chosen: list[tuple[OutboxItem, int]] = []  # with the parts each may send
        next_at: float | None = None
        flying = Counter(channel for channel, _, _ in self._busy)  # sends may end meanwhile
        for row in rows:
            if self._stopping:
                break
            key: ChatKey = (row.channel, row.account, row.chat_id)
            if key in seen or key in self._busy or flying[row.channel] >= self._max_in_flight:
                seen.add(key)  # a full channel: sent when one of its sends ends (a wake-up)
                continue
            seen.add(key)  # later rows of this chat wait for this one: order within a chat
            ready = self._ready_at(key, now)
            if ready > now:
                next_at = ready if next_at is None else min(next_at, ready)
                self._count_rate_wait(row, key)
                continue
            chosen.append((row, self.limiter.available(*key, most=MAX_PARTS)))
            self.limiter.take(*key)
            flying[row.channel] += 1
        self._start_all(chosen)
        if self._stopping:
            return None
        started = len(chosen)
        page = len(rows) >= self._limit
        # A full batch in which every row waits (one chat with many replies queued) may hide
        # sendable rows behind it: look further next time; back to the usual batch after.
        self._limit = min(2 * self._limit, MAX_BATCH) if page and not started else self._batch
        # Another look at once only if a channel can still take a send: with every one full
        # (a burst) the next send to end wakes the loop, as one pass per wake-up costs least.
        room = any(flying[channel] < self._max_in_flight for channel in self._adapters)
        if page and room and (started or len(rows) < self._limit):
            return now
        if later is not None and later > now:
            next_at = later if next_at is None else min(next_at, later)
        return next_at

    def _forget_past(self, now: float) -> None:
        """Drop holds and pauses that have ended, so memory stays bounded."""
        self._held = {key: until for key, until in self._held.items() if until > now}
        self._paused = {key: until for key, until in self._paused.items() if until > now}

    def _ready_at(self, key: ChatKey, now: float) -> float:
        """When this chat may get its next message: pauses, held retries and rate limits."""
        paused = self._paused.get(key[:2], 0.0)
        held = self._held.get(key, 0.0)
        return max(paused, held, now + self.limiter.wait(*key))

    def _count_rate_wait(self, row: OutboxItem, key: ChatKey) -> None:
        """Count a row held back by the rate limits (not by a retry or a pause), once."""
        if row.id not in self._rate_waited and self.limiter.wait(*key) > 0:
            self._rate_waited.add(row.id)
            self._metrics.inc(RATE_LIMIT_WAITS, channel=row.channel)

    def _start_all(self, chosen: list[tuple[OutboxItem, int]]) -> None:
        """Start a send of each chosen row. They share one claim write, which each send awaits:
        the pass does not wait for it, so the next pass can start other chats' sends meanwhile."""
        if not chosen:
            return
        ids = [row.id for row, _ in chosen]
        claim = asyncio.ensure_future(self._claim(ids))
        claim.add_done_callback(_retrieve)  # an unexpected error reaches the sends, if any
        for row, parts in chosen:
            self._start(row, parts, claim)

    async def _claim(self, outbox_ids: list[int]) -> set[int]:
        """The rows this process may send; none if the claim could not be written (they stay
        pending for a later pass), said once for the pass, not once per send."""
        try:
            return set(await self._store.claim_outbox_many(outbox_ids, CLAIM_SECONDS))
        except StoreError as exc:
            self._metrics.inc(STORE_ERRORS, component="sender")
            log.error("could not claim %d outbox row(s) for sending: %s", len(outbox_ids), exc)
            return set()

    def _start(self, row: OutboxItem, parts: int, claim: asyncio.Future[set[int]]) -> None:
        key: ChatKey = (row.channel, row.account, row.chat_id)
        self._busy.add(key)
        task = asyncio.create_task(self._send(row, parts, claim), name=f"send {row.id}")
        self._in_flight[row.id] = task

        def done(_: asyncio.Task[None]) -> None:
            self._in_flight.pop(row.id, None)
            self._busy.discard(key)
            self.wake.set()

        task.add_done_callback(done)

    # one send

    async def _send(self, row: OutboxItem, parts: int, claim: asyncio.Future[set[int]]) -> None:
        log_context.sending(row.session_id, row.id)  # this task's lines name the row
        try:
            # Shielded: a send cancelled (at stop) must not cancel the claim the others await.
            if row.id not in await asyncio.shield(claim):
                # Another process sends it, it was sent meanwhile, or the claim failed: its
                # rate-limit tokens go back, for the messages this process does send.
                self.limiter.give_back(row.channel, row.account, row.chat_id)
                return
            if row.claimed_by is not None:
                # An earlier attempt's claim that no outcome ended: its process died (or the
                # store failed) after the request may have reached the platform.
                log.warning(
                    "outbox row %d: sending again after an attempt whose outcome was not"
                    " recorded (the crash window): the user may see it twice",
                    row.id,
                )
            await self._deliver(row, parts)
        except StoreError as exc:
            # The row stays as it was: pending rows are tried again (and may then go twice).
            self._metrics.inc(STORE_ERRORS, component="sender")
            log.error("could not record the outcome of outbox row %d: %s", row.id, exc)
        except Exception:
            log.exception("outbox row %d: unexpected error", row.id)

    async def _deliver(self, row: OutboxItem, parts: int) -> None:
        """Send the row's next ``parts`` parts at most (its rate-limit tokens: one is taken)."""
        adapter = self._adapters.get(row.channel)
        if adapter is None:
            await self._failed(row, "failed", f"no channel {row.channel!r} is configured")
            return
        try:
            message = _message(row).model_copy(update={"max_parts": parts})
        except ValidationError as exc:
            await self._failed(
                row, "failed", f"payload is not a message: {exc.error_count()} error(s)"
            )
            return
        try:
            result = await self._timed_send(adapter, message, row.channel)
        except SendError as exc:
            if exc.sent_ids:  # the first parts of a split reply went out: never send them again
                await self._delivered_parts(row, message, exc.sent_ids)
            await self._send_error(row, exc)
            return
        if result.remaining:  # the rest when the chat's rate limit lets them go
            await self._delivered_parts(row, message, result.message_ids)
            return
        self._spent_parts(row, len(result.message_ids))
        await self._store.outbox_sent(row.id, [*row.platform_ids, *result.message_ids])
        self._metrics.inc(OUTBOX, outcome="sent", channel=row.channel)

    async def _delivered_parts(
        self, row: OutboxItem, message: OutboundMessage, sent: tuple[str, ...]
    ) -> None:
        """Record the parts of a split reply this try delivered: the next try starts after
        them, so none reaches the user twice."""
        self._spent_parts(row, len(sent))
        await self._store.outbox_progress(
            row.id,
            skip_parts=message.skip_parts + len(sent),
            platform_ids=[*row.platform_ids, *sent],
        )

    def _spent_parts(self, row: OutboxItem, sent: int) -> None:
        """The rate-limit tokens of the parts sent beyond the first (taken when chosen)."""
        if sent > 1:
            self.limiter.take(row.channel, row.account, row.chat_id, sent - 1)

    async def _timed_send(
        self, adapter: ChannelAdapter, message: OutboundMessage, channel: str
    ) -> SendResult:
        started = time.perf_counter()
        try:
            return await adapter.send(message)
        finally:
            self._metrics.observe(SEND_SECONDS, time.perf_counter() - started, channel=channel)

    async def _send_error(self, row: OutboxItem, exc: SendError) -> None:
        gone = reachability.gone_reason(row.channel, exc)
        if gone is not None and row.session_id is not None:
            await self._park(row, row.session_id, gone, exc.reason)
        elif isinstance(exc, RetryableSendError):
            await self._retry(row, exc.reason, self._platform_wait(exc, row.attempts + 1))
        elif isinstance(exc, UncertainDelivery):
            await self._failed(row, "uncertain", exc.reason)
        elif isinstance(exc, ChatMigrated):
            await self._migrate(row, exc.new_chat_id)
        elif isinstance(exc, FatalSendError):
            await self._pause(row, exc.reason)
        else:
            await self._failed(row, "failed", exc.reason)

    async def _pause(self, row: OutboxItem, error: str) -> None:
        """The account's credentials or standing are bad (a revoked token, Meta's 190 or 368):
        nothing of it goes for ``fatal_pause`` seconds. The reply is not this message's fault,
        so it waits too, an attempt counted, rather than failing: once the account is fixed
        (the config, then a restart) it goes out."""
        self._paused[(row.channel, row.account)] = self._clock() + self._fatal_pause
        log.error(
            "%s account %s paused for %gs, its replies kept: %s",
            row.channel,
            row.account,
            self._fatal_pause,
            error,
        )
        await self._retry(row, error, self._fatal_pause)

    async def _retry(self, row: OutboxItem, error: str, retry_after: float | None) -> None:
        attempts = row.attempts + 1
        if attempts >= self._config.max_attempts:
            await self._failed(row, "dead", error)
            return
        now = self._clock()
        due = now + max(retry_after or 0.0, self.backoff(attempts))
        self._held[(row.channel, row.account, row.chat_id)] = due
        await self._store.outbox_retry(row.id, next_attempt_at=due, error=error)
        self._metrics.inc(OUTBOX, outcome="retried", channel=row.channel)
        log.info("outbox row %d: retry in %.1fs (%s)", row.id, due - now, error)

    def _platform_wait(self, exc: RetryableSendError, attempts: int) -> float | None:
        """The wait the platform asks for before try ``attempts + 1``: its retry_after, grown
        along its own schedule where it has one (capped like the backoff)."""
        if exc.retry_after is None or exc.growth is None:
            return exc.retry_after
        grown = exc.retry_after * exc.growth ** min(attempts - 1, 64)
        return max(exc.retry_after, min(grown, self._config.backoff_max_seconds))

    def resend_times(self, exc: RetryableSendError) -> tuple[float, ...]:
        """When to send again a reply the platform accepted, then reported failed with ``exc``
        (a delivery status): item n - 1 for a reply that made n tries, the failed one among
        them, waiting as ``_retry`` would after that try; none for n >= max_attempts."""
        now = self._clock()
        tries = range(1, self._config.max_attempts)
        return tuple(now + max(self._platform_wait(exc, n) or 0.0, self.backoff(n)) for n in tries)

    def backoff(self, attempts: int) -> float:
        """Exponential backoff with jitter: half fixed, half random, capped."""
        base: float = self._config.backoff_base_seconds * 2 ** (attempts - 1)
        capped = min(self._config.backoff_max_seconds, base)
        return capped * (0.5 + self._jitter() / 2)

    async def _failed(self, row: OutboxItem, state: str, error: str) -> None:
        # Logged before it is recorded: a process killed in between leaves the line beside a row
        # still pending (sent again later, with the crash-window line), never an ``uncertain``
        # row that no line explains.
        log.warning("outbox row %d %s: %s", row.id, state, error)
        await self._store.outbox_failed(row.id, error=error, state=state)
        self._metrics.inc(OUTBOX, outcome=state, channel=row.channel)
        if row.session_id is not None:
            detail: dict[str, Any] = {"outbox_id": row.id, "state": state, "error": error}
            await self._event(row.session_id, "send_failed", detail)

    async def _park(self, row: OutboxItem, session_id: str, gone: str, error: str) -> None:
        """The user blocked the bot or cannot be reached: mark the session, park its replies
        (this one too) until the user is back; nothing of it is sent meanwhile."""
        try:
            await self._store.update_session(session_id, metadata={reachability.BLOCKED: True})
        except StoreError as exc:  # e.g. the session was deleted meanwhile
            log.info("session %s is not marked %s: %s", session_id, gone, exc)
        parked = await self._store.park_outbox(session_id)
        self._metrics.inc(OUTBOX, outcome="parked", channel=row.channel)
        log.warning("outbox row %d: the user is %s; %d replies parked", row.id, gone, parked)
        detail = {"reason": gone, "outbox_id": row.id, "error": error, "parked": parked}
        await self._event(session_id, "user_blocked", detail)

    async def _migrate(self, row: OutboxItem, new_chat_id: str) -> None:
        """A Telegram group became a supergroup: the session follows, the reply goes there."""
        error = f"chat migrated to {new_chat_id}"
        await self._store.outbox_redirect(row.id, chat_id=new_chat_id, error=error)
        self._metrics.inc(OUTBOX, outcome="retried", channel=row.channel)
        if row.session_id is None:
            return
        try:
            await self._store.update_session(
                row.session_id, metadata={convert.MIGRATED_CHAT: new_chat_id}
            )
        except StoreError as exc:  # e.g. the session was deleted meanwhile
            log.info("session %s does not follow the migration: %s", row.session_id, exc)
        await self._event(row.session_id, "chat_migrated", {"from": row.chat_id, "to": new_chat_id})

    async def _event(self, session_id: str, kind: str, detail: dict[str, Any]) -> None:
        try:
            await self._store.record_event(session_id, kind, detail)
        except StoreError as exc:  # e.g. the session was deleted meanwhile
            log.info("no %s event for session %s: %s", kind, session_id, exc)


def _retrieve(future: asyncio.Future[set[int]]) -> None:
    """Mark a claim's error seen, for when every send that awaited it was cancelled."""
    if not future.cancelled():
        future.exception()


def _message(row: OutboxItem) -> OutboundMessage:
    message = OutboundMessage.model_validate(row.payload)
    return message.model_copy(update={"chat_id": row.chat_id, "account": row.account})
