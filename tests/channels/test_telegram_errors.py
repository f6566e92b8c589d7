"""The one mapping from PTB exceptions to send errors, exception by exception."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Conflict,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
    TimedOut,
)

from webhook_bot_gateway.channels import (
    ChatMigrated as ChatMigratedError,
)
from webhook_bot_gateway.channels import (
    FatalSendError,
    PermanentSendError,
    RetryableSendError,
    UncertainDelivery,
)
from webhook_bot_gateway.channels.telegram import map_error

TOKEN = "123456789:AAH-secret-token"


def timed_out(cause: httpx.TimeoutException) -> TimedOut:
    """A TimedOut raised the way HTTPXRequest raises it: from the httpx exception."""
    try:
        try:
            raise cause
        except httpx.TimeoutException as err:
            raise TimedOut from err
    except TimedOut as exc:
        return exc


@pytest.mark.parametrize(
    ("error", "expected", "disposition"),
    [
        (Forbidden("Forbidden: bot was blocked by the user"), PermanentSendError, "permanent"),
        (BadRequest("Bad Request: chat not found"), PermanentSendError, "permanent"),
        (InvalidToken("Unauthorized"), FatalSendError, "fatal"),
        (NetworkError("Bad Gateway (502)"), RetryableSendError, "retryable"),
        (Conflict("terminated by other getUpdates request"), PermanentSendError, "permanent"),
        (TelegramError("something new"), PermanentSendError, "permanent"),
    ],
)
def test_map_error_gives_each_ptb_error_its_disposition(
    error: TelegramError, expected: type[Exception], disposition: str
) -> None:
    mapped = map_error(error, [TOKEN])
    assert type(mapped) is expected
    assert mapped.disposition == disposition
    assert mapped.channel == "telegram"


@pytest.mark.parametrize("retry_after", [9, timedelta(seconds=1.5)])
def test_map_error_keeps_retry_after_as_float_seconds(retry_after: int | timedelta) -> None:
    mapped = map_error(RetryAfter(retry_after), [TOKEN])
    assert isinstance(mapped, RetryableSendError)
    expected = retry_after.total_seconds() if isinstance(retry_after, timedelta) else 9.0
    assert mapped.retry_after == expected
    assert isinstance(mapped.retry_after, float)


def test_map_error_reads_retry_after_in_ptbs_timedelta_mode(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PTB_TIMEDELTA", "true")  # PTB then returns a timedelta
    mapped = map_error(RetryAfter(timedelta(seconds=30)), [TOKEN])
    assert isinstance(mapped, RetryableSendError)
    assert mapped.retry_after == 30.0


def test_map_error_carries_the_new_chat_id_of_a_migrated_group() -> None:
    mapped = map_error(ChatMigrated(-1001987654321), [TOKEN])
    assert isinstance(mapped, ChatMigratedError)
    assert mapped.new_chat_id == "-1001987654321"


@pytest.mark.parametrize(
    "cause", [httpx.ReadTimeout("read"), httpx.WriteTimeout("write")], ids=["read", "write"]
)
def test_map_error_marks_a_timeout_after_sending_uncertain(cause: httpx.TimeoutException) -> None:
    # Telegram has no idempotency key: retrying could post the reply twice.
    assert type(map_error(timed_out(cause), [TOKEN])) is UncertainDelivery


@pytest.mark.parametrize(
    "cause", [httpx.ConnectTimeout("connect"), httpx.PoolTimeout("pool")], ids=["connect", "pool"]
)
def test_map_error_retries_a_timeout_before_sending(cause: httpx.TimeoutException) -> None:
    mapped = map_error(timed_out(cause), [TOKEN])
    assert type(mapped) is RetryableSendError
    assert type(cause).__name__ in mapped.reason


def test_map_error_without_a_cause_treats_a_timeout_as_uncertain() -> None:
    assert type(map_error(TimedOut(), [TOKEN])) is UncertainDelivery


def test_map_error_scrubs_the_token_in_any_case() -> None:
    mapped = map_error(BadRequest(f"Bad Request: wrong path /bot{TOKEN}/x"), [TOKEN])
    assert "AAH-secret-token".lower() not in str(mapped).lower()
    assert "<redacted>" in mapped.reason
