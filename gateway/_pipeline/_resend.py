"""A reply the platform accepted, then reported failed for a transient reason, goes again.

WhatsApp accepts a send (200 and a wamid) and may report later, in a ``failed`` status, an
error it asks to retry (131056, the pair rate limit; 130429; 131000; 131016). The intake gives
such a status the times of a re-send (``StatusIn.resend_at``, the sender's schedule for that
error), and the store, in the status's own transaction, puts the reply back in the outbox from
the part that failed. Other failures (131026, 131047, ...) stay as they are.
"""

from __future__ import annotations

from collections.abc import Callable

from webhook_bot_gateway.channels import DeliveryStatus, RetryableSendError
from webhook_bot_gateway.channels.whatsapp import status_retry

ResendTimes = Callable[[RetryableSendError], tuple[float, ...]]


def retry_of(status: DeliveryStatus) -> RetryableSendError | None:
    """The retry a failed status asks for, or None (not failed, or not for a transient reason)."""
    if status.state != "failed" or status.channel != "whatsapp" or not status.errors:
        return None
    first = status.errors[0]
    reason = ": ".join(filter(None, [first.title, first.message, first.details])) or "failed"
    return status_retry(first.code, reason)


def resend_at(status: DeliveryStatus, times: ResendTimes | None) -> tuple[float, ...]:
    """``StatusIn.resend_at`` of this status: empty unless it asks for a retry."""
    retry = retry_of(status) if times is not None else None
    return () if retry is None or times is None else times(retry)
