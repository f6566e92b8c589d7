"""A failed turn: its error as kept, when its rows are tried again, or their dead letter."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from webhook_bot_gateway.agents import DEAD_LETTER, AgentError, ModelBackendError, ReplyGuard
from webhook_bot_gateway.channels import ChannelError
from webhook_bot_gateway.store import (
    InboxItem,
    RunActive,
    SessionDeletedError,
    SessionNotFound,
    Store,
    StoreError,
    TurnActive,
)

from .._metrics import HANDOFFS, STORE_ERRORS, Metrics
from ..config import DispatcherConfig
from ..errors import GatewayError
from ._dead_letter import DeadLetterRoute, record_dead_letter
from ._turn_log import ended

log = logging.getLogger("gateway.dispatcher")

MAX_ASKED_WAIT = 3600.0  # a model server's Retry-After is honoured up to an hour
MAX_ERROR = 500
# The errors our packages raise on purpose: their messages are written to be shown, with no
# secret in them (a model backend's takes its key out, a channel's its token). Any other
# exception is kept by its type only (see ``failure_text``).
OWN_ERRORS = (AgentError, StoreError, ChannelError, GatewayError)


class TurnFailures:
    """Records failed turns: a retry after a backoff, or past ``max_attempts`` a dead letter."""

    def __init__(
        self,
        store: Store,
        config: DispatcherConfig,
        *,
        metrics: Metrics,
        dead_letters: DeadLetterRoute,
        reply_guard: ReplyGuard,
        on_outbox: Callable[[], None],
        clock: Callable[[], float],
    ) -> None:
        self._store = store
        self._config = config
        self._metrics = metrics
        # Where a dead-lettered session goes, and its apology (a person promised only if one
        # holds the session afterwards).
        self._dead_letters = dead_letters
        self._reply_guard = reply_guard
        self._on_outbox = on_outbox
        self._clock = clock

    async def failed(self, sid: str, batch: Sequence[InboxItem], exc: Exception) -> float:
        """Record the failed try; the seconds the lane waits before it reads the rows again: 0
        once recorded (the rows' retry time says how long), else the backoff itself (the
        store failed too, say a full disk: the rows were readable, and were tried in a loop)."""
        error = failure_text(exc)
        if not isinstance(exc, OWN_ERRORS):
            log.debug("turn of session %s raised", sid, exc_info=exc)
        ids = [row.id for row in batch]
        attempts = max(row.attempts for row in batch) + 1
        hopeless = isinstance(exc, ModelBackendError) and exc.permanent
        dead = hopeless or attempts >= self._config.max_attempts
        delay: float = max(self._config.retry_base_seconds * 2 ** (attempts - 1), asked_wait(exc))
        log.warning(
            "turn of session %s failed (try %d): %s%s",
            sid,
            attempts,
            error,
            next_try(dead, hopeless, delay),
        )
        try:
            await self._store.fail_inbox(
                ids, error, next_attempt_at=self._clock() + (0 if dead else delay), dead=dead
            )
            ended(self._metrics, "dead" if dead else "failed")
            if dead:
                await self._dead_letter(sid, batch)
        except StoreError as store_exc:
            # The rows stay pending and the lane tries again after the backoff; the attempt
            # is not counted.
            self._metrics.inc(STORE_ERRORS, component="dispatcher")
            log.error("could not record the failed turn of %s: %s", sid, store_exc)
            return delay
        return 0.0

    async def _dead_letter(self, sid: str, batch: Sequence[InboxItem]) -> None:
        """Apologise to the user and, if configured, hand the session to a person; the
        message, the apology and the handoff go in the history (see ``record_dead_letter``)."""
        events = [row.event for row in batch]
        try:
            handoff = await record_dead_letter(
                self._store, sid, events, self._dead_letters, self._reply_guard
            )
        except (SessionDeletedError, SessionNotFound):
            return
        except (RunActive, TurnActive):  # a new turn of the session started meanwhile
            log.warning("session %s: the dead letter could not be recorded (a turn runs)", sid)
            return
        if self._dead_letters.apology or self._dead_letters.apology_no_person:
            self._on_outbox()
        if handoff is not None:
            source, target = handoff
            self._metrics.inc(HANDOFFS, from_agent=source, to_agent=target, reason=DEAD_LETTER)


def failure_text(exc: Exception) -> str:
    """A failed turn's error, as its log line and its inbox rows (``inbox.error``, which the
    dead letters API shows) keep it: one of our own errors (``OWN_ERRORS``) with its message; any
    other by its type only, as a tool's (docs/agents.md): its message is whatever the code that
    raised it wrote (the model backend of an agent declared in Python, a library below it),
    which may hold a password. The traceback, message included, is logged at DEBUG only."""
    if isinstance(exc, OWN_ERRORS):
        return f"{type(exc).__name__}: {exc}"[:MAX_ERROR]
    return f"{type(exc).__name__} (its message is not kept: it is logged at DEBUG only)"


def next_try(dead: bool, hopeless: bool, delay: float) -> str:
    """The end of a failed turn's log line: when it is tried again, or why it is not."""
    if hopeless:
        return "; not tried again: the model's server refuses such a request"
    return "" if dead else f"; next try in {delay:g}s"


def asked_wait(exc: Exception) -> float:
    """How long the model's server asked to be left alone (its Retry-After), at most an hour:
    a turn tried sooner would only be refused again and use up its attempts."""
    if isinstance(exc, ModelBackendError) and exc.retry_after is not None:
        return min(exc.retry_after, MAX_ASKED_WAIT)
    return 0.0
