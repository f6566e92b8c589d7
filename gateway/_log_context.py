"""What a log line is about: the webhook (channel, dedup keys), the turn (session, inbox rows)
or the reply (session, outbox row) being handled when it was written.

They live in a context variable set where the handling starts (``gateway/_webhooks.py``,
``gateway/_pipeline/_turns.py``, ``gateway/_pipeline/_sender.py``); ``LogContext``, a filter on
the root handlers, copies them onto every record, so a line carries them whoever logs it and no
log call has to pass them. Tasks started while handling inherit them (asyncio copies the
context). See docs/logging.md.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace

# The record attributes of the context, in the order the formatters write them; ``outcome``
# and ``duration_ms`` are passed (``extra=``) by the line that ends a turn.
FIELDS = (
    "channel",
    "dedup_keys",
    "session_id",
    "inbox_ids",
    "outbox_id",
    "outcome",
    "duration_ms",
)


@dataclass(frozen=True, slots=True)
class Handling:
    """The webhook, turn or reply under way; empty fields are left off the record."""

    channel: str | None = None
    dedup_keys: tuple[str, ...] = ()
    session_id: str | None = None
    inbox_ids: tuple[int, ...] = ()
    outbox_id: int | None = None


_NOTHING = Handling()
_handling: ContextVar[Handling] = ContextVar("gateway_log_handling", default=_NOTHING)
_outcome: ContextVar[str | None] = ContextVar("gateway_turn_outcome", default=None)


def current() -> Handling:
    return _handling.get()


@contextmanager
def webhook(channel: str) -> Iterator[None]:
    """Lines written inside carry ``channel`` (and the dedup keys once ``found_keys`` named
    them). The previous context is back on exit: aiohttp handles the requests of one
    keep-alive connection in one task."""
    token = _handling.set(Handling(channel=channel))
    try:
        yield
    finally:
        _handling.reset(token)


MAX_LOGGED_KEYS = 20
MAX_LOGGED_KEY = 160  # a real wamid is about 60 characters; a platform's id is not bounded


def loggable(keys: Iterable[str]) -> tuple[str, ...]:
    """The keys as a line carries them: at most ``MAX_LOGGED_KEYS`` (then how many more), each
    cut at ``MAX_LOGGED_KEY`` characters, so one odd delivery cannot write a line of megabytes."""
    keys = tuple(keys)
    shown = tuple(
        key if len(key) <= MAX_LOGGED_KEY else f"{key[:MAX_LOGGED_KEY]}...({len(key)} chars)"
        for key in keys[:MAX_LOGGED_KEYS]
    )
    more = len(keys) - MAX_LOGGED_KEYS
    return (*shown, f"...(+{more} more)") if more > 0 else shown


def found_keys(keys: Iterable[str]) -> None:
    """The dedup keys of the delivery being handled, on its lines from now on."""
    _handling.set(replace(_handling.get(), dedup_keys=loggable(keys)))


@contextmanager
def turn(session_id: str, inbox_ids: Iterable[int], dedup_keys: Iterable[str]) -> Iterator[None]:
    """Lines written inside carry the session and its inbox rows (and their dedup keys, the
    link back to the webhook lines). ``outcome()`` starts as None."""
    handling = Handling(
        session_id=session_id, inbox_ids=tuple(inbox_ids), dedup_keys=loggable(dedup_keys)
    )
    token, outcome_token = _handling.set(handling), _outcome.set(None)
    try:
        yield
    finally:
        _outcome.reset(outcome_token)
        _handling.reset(token)


def sending(session_id: str | None, outbox_id: int) -> None:
    """Lines written from now on in this task (the sender's task of one outbox row) carry the
    row and its session. Not undone: the task's context ends with it."""
    _handling.set(Handling(session_id=session_id, outbox_id=outbox_id))


def record_outcome(outcome: str) -> None:
    """How the running turn ended, for the line that ends it."""
    _outcome.set(outcome)


def outcome() -> str | None:
    """What ``record_outcome`` said in this turn, None if nothing."""
    return _outcome.get()


class LogContext(logging.Filter):
    """A handler filter: the fields of the webhook, turn or reply under way onto the record (a field
    the log call passed itself wins)."""

    def filter(self, record: logging.LogRecord) -> bool:
        handling = _handling.get()
        if handling is _NOTHING:
            return True
        attributes = record.__dict__
        if handling.channel is not None:
            attributes.setdefault("channel", handling.channel)
        if handling.dedup_keys:
            attributes.setdefault("dedup_keys", list(handling.dedup_keys))
        if handling.session_id is not None:
            attributes.setdefault("session_id", handling.session_id)
        if handling.inbox_ids:
            attributes.setdefault("inbox_ids", list(handling.inbox_ids))
        if handling.outbox_id is not None:
            attributes.setdefault("outbox_id", handling.outbox_id)
        return True


LOG_CONTEXT = LogContext()  # the one filter on the root handlers, next to the redaction
