"""Which failed delivery statuses send a reply again, and when (the sender's schedule)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from webhook_bot_gateway.channels import DeliveryStatus, PlatformError
from webhook_bot_gateway.gateway._metrics import Metrics
from webhook_bot_gateway.gateway._pipeline._resend import resend_at, retry_of
from webhook_bot_gateway.gateway._pipeline._sender import Sender
from webhook_bot_gateway.gateway.config import SenderConfig

from .pipeline_helpers import FakeClock

NOW = 1_800_000_000.0


def status(code: int | None, state: str = "failed", channel: str = "whatsapp") -> DeliveryStatus:
    errors = () if code is None else (PlatformError(code=code, title="why"),)
    return DeliveryStatus(
        channel=channel,
        account="1555",
        chat_id="4915",
        message_id="wamid.x",
        dedup_key=f"whatsapp:wamid.x:{state}",
        timestamp=datetime.now(UTC),
        state=state,
        errors=errors,
    )


def sender(**config: float) -> Sender:
    return Sender(
        None,  # type: ignore[arg-type]  # resend_times reads no store
        {},
        SenderConfig(**config),
        metrics=Metrics(),
        clock=FakeClock(NOW),
        jitter=lambda: 1.0,
    )


@pytest.mark.parametrize("code", [131056, 130429, 131000, 131016])
def test_transient_codes_of_a_failed_status_ask_for_a_retry(code: int) -> None:
    retry = retry_of(status(code))
    assert retry is not None
    assert (retry.error_code, retry.reason) == (code, "why")


@pytest.mark.parametrize("code", [131026, 131047, 131049, 131051, 368, 130472, None])
def test_other_failed_statuses_are_not_retried(code: int | None) -> None:
    assert retry_of(status(code)) is None
    assert resend_at(status(code), sender().resend_times) == ()


def test_only_failed_whatsapp_statuses_are_retried() -> None:
    assert retry_of(status(131056, state="delivered")) is None
    assert retry_of(status(131056, channel="telegram")) is None


def test_131056_goes_again_on_metas_4_to_the_x_schedule_within_max_attempts() -> None:
    times = resend_at(status(131056), sender(backoff_base_seconds=0.0).resend_times)
    assert [t - NOW for t in times] == [1, 4, 16, 64, 256, 300, 300]  # 8 tries in all


def test_other_transient_codes_wait_the_senders_backoff() -> None:
    retry = retry_of(status(131000))
    assert retry is not None
    times = sender(max_attempts=4).resend_times(retry)
    assert [t - NOW for t in times] == [1, 2, 4]
