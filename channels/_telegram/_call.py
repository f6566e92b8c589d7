"""The one place where PTB's exceptions become the gateway's send errors."""

from __future__ import annotations

import warnings
from collections.abc import Awaitable, Callable, Iterable
from datetime import timedelta
from typing import TypeVar

import httpx
from telegram import Bot
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
    TimedOut,
)
from telegram.warnings import PTBDeprecationWarning

from .. import _errors as errors
from ._redact import scrub
from ._request import ConnectTimeout, WireError

CHANNEL = "telegram"
T = TypeVar("T")
# Timeouts that fire before a single byte of the request left: a retry cannot double it.
_NOT_SENT = (httpx.ConnectTimeout, httpx.PoolTimeout, ConnectTimeout)


async def call_api(bot: Bot, call: Callable[[Bot], Awaitable[T]], tokens: Iterable[str]) -> T:
    """Run one Bot API call; any PTB failure comes out as a SendError without the token."""
    try:
        return await call(bot)
    except TelegramError as exc:
        # Not chained: the cause's text or traceback may carry the URL, and so the token.
        raise map_error(exc, tokens) from None


def map_error(exc: TelegramError, tokens: Iterable[str]) -> errors.SendError:
    """Translate a PTB exception into a SendError whose disposition tells the sender what to do."""
    reason = scrub(_describe(exc), tokens)
    if isinstance(exc, ChatMigrated):
        return errors.ChatMigrated(CHANNEL, str(exc.new_chat_id))
    if isinstance(exc, RetryAfter):
        return errors.RetryableSendError(CHANNEL, reason, retry_after=retry_after(exc), status=429)
    if isinstance(exc, InvalidToken):
        return errors.FatalSendError(CHANNEL, reason, status=401)
    if isinstance(exc, Forbidden):
        return errors.PermanentSendError(CHANNEL, reason, status=403)
    if isinstance(exc, TimedOut):
        if _caused_by(exc, _NOT_SENT):
            return errors.RetryableSendError(CHANNEL, reason)
        return errors.UncertainDelivery(CHANNEL, reason)
    if isinstance(exc, BadRequest):
        return errors.PermanentSendError(CHANNEL, reason, status=400)
    if isinstance(exc, NetworkError):
        if _lost_after_sending(exc):
            return errors.UncertainDelivery(CHANNEL, reason)
        return errors.RetryableSendError(CHANNEL, reason)
    return errors.PermanentSendError(CHANNEL, reason)


def retry_after(exc: RetryAfter) -> float:
    """Seconds to wait; PTB 22 gives an int (deprecated) or a timedelta (opt-in)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        value = exc.retry_after
    if isinstance(value, timedelta):
        return value.total_seconds()
    return float(value)


def _describe(exc: TelegramError) -> str:
    text = f"{type(exc).__name__}: {exc.message}"
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, httpx.HTTPError):
        text += f" (httpx.{type(cause).__name__})"
    elif isinstance(cause, WireError):
        text += f" ({type(cause).__name__})"
    return text


def _lost_after_sending(exc: NetworkError) -> bool:
    # Our aiohttp request says when a broken connection may have delivered the request; a bare
    # NetworkError (a 5xx answer, an httpx error) stays retryable, as before.
    cause = exc.__cause__
    return isinstance(cause, WireError) and cause.may_have_arrived


def _caused_by(exc: BaseException, kinds: tuple[type[BaseException], ...]) -> bool:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kinds):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False
